"""Real machines, as published figures, and the snapshots the real probe makes of them.

Each :class:`Machine` is turned into a fake root (a KFD tree for AMD, ``torch/version.py`` for
all) plus a :class:`FakeNVML` for NVIDIA, and then probed by the same ``probe()`` that runs in
production. ``scripts/gen_fixtures.py`` writes the results to ``kernelpolicy/fixtures`` (read
through :mod:`kernelpolicy.platform.fixtures`); a test checks they are current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.platform.model import Platform
from kernelpolicy.platform.probing import probe
from kernelpolicy.testing.fake_nvml import FakeNvidiaGpu, FakeNVML
from kernelpolicy.testing.fake_sysfs import FakeAmdGpu, write_kfd_tree

GiB = 2**30


@dataclass(frozen=True)
class Machine:
    """A host: its GPUs (NVIDIA or AMD), driver stack and installed libraries."""

    name: str
    description: str
    nvidia: tuple[FakeNvidiaGpu, ...] = ()
    amd: tuple[FakeAmdGpu, ...] = ()
    driver: str | None = None
    cuda_driver: int = 0
    rocm: str | None = None
    torch_cuda: str | None = None
    torch_hip: str | None = None
    libraries: dict[str, str] = field(default_factory=dict)


H100_SXM = FakeNvidiaGpu("NVIDIA H100 80GB HBM3", (9, 0), 0x2330, 81559, 132 * 128)
H200 = FakeNvidiaGpu("NVIDIA H200", (9, 0), 0x2335, 143771, 132 * 128)
A100_SXM = FakeNvidiaGpu("NVIDIA A100-SXM4-80GB", (8, 0), 0x20B2, 81920, 108 * 64)
L4 = FakeNvidiaGpu("NVIDIA L4", (8, 9), 0x27B8, 23034, 58 * 128)
T4 = FakeNvidiaGpu("Tesla T4", (7, 5), 0x1EB8, 15360, 40 * 64)
B200 = FakeNvidiaGpu("NVIDIA B200", (10, 0), 0x2901, 183359, 148 * 128)

MI250X_GCD = FakeAmdGpu(
    0x740C, 90010, 110, 4, 64 * GiB, revision=0x01, max_engine_clk_fcompute=1700
)
MI300X = FakeAmdGpu(0x74A1, 90402, 304, 4, 192 * GiB, num_xcc=8)
MI325X = FakeAmdGpu(0x74A5, 90402, 304, 4, 256 * GiB, num_xcc=8)
MI355X = FakeAmdGpu(0x75A3, 90500, 256, 4, 288 * GiB, num_xcc=8, max_engine_clk_fcompute=2400)
RX7900XTX = FakeAmdGpu(
    0x744C, 110000, 96, 2, 24 * GiB, wave_front_size=32, revision=0xC8,
    max_engine_clk_fcompute=2500,
)  # fmt: skip


def _eight(gpu: FakeNvidiaGpu) -> tuple[FakeNvidiaGpu, ...]:
    return tuple(gpu.with_slot(i) for i in range(8))


MACHINES: dict[str, Machine] = {
    m.name: m
    for m in (
        Machine(
            "h100-sxm", "HGX H100 SXM5 80GB x8", nvidia=_eight(H100_SXM),
            driver="570.133.20", cuda_driver=12080, torch_cuda="12.8",
            libraries={"torch": "2.9.1+cu128", "triton": "3.5.1", "vllm": "0.12.0",
                       "flashinfer-python": "0.5.3"},
        ),
        Machine(
            "h200", "HGX H200 141GB x8", nvidia=_eight(H200),
            driver="580.159.03", cuda_driver=13000, torch_cuda="13.0",
            libraries={"torch": "2.11.0+cu130", "triton": "3.6.0", "vllm": "0.16.0",
                       "flashinfer-python": "0.7.2.post1", "flashinfer-cubin": "0.7.2.post1"},
        ),
        Machine(
            "a100", "HGX A100 SXM4 80GB x8", nvidia=_eight(A100_SXM),
            driver="550.54.15", cuda_driver=12040, torch_cuda="12.4",
            libraries={"torch": "2.5.1+cu124", "triton": "3.1.0", "vllm": "0.7.3",
                       "flashinfer-python": "0.2.1.post2"},
        ),
        Machine(
            "l4", "one NVIDIA L4 (cloud g2 instance)", nvidia=(L4.with_slot(0),),
            driver="535.183.01", cuda_driver=12020, torch_cuda="12.1",
            libraries={"torch": "2.5.1+cu121", "triton": "3.1.0", "sglang": "0.4.3",
                       "sgl-kernel": "0.0.3", "flashinfer-python": "0.2.0.post2"},
        ),
        Machine(
            "t4", "one Tesla T4 (cloud n1 instance)", nvidia=(T4.with_slot(0),),
            driver="535.183.01", cuda_driver=12020, torch_cuda="12.6",
            libraries={"torch": "2.9.1+cu126", "triton": "3.5.1", "vllm": "0.12.0"},
        ),
        Machine(
            "b200", "HGX B200 180GB x8", nvidia=_eight(B200),
            driver="580.82.07", cuda_driver=13000, torch_cuda="13.0",
            libraries={"torch": "2.11.0+cu130", "triton": "3.6.0", "sglang": "0.5.6",
                       "sgl-kernel": "0.3.18", "flashinfer-python": "0.7.2.post1",
                       "flashinfer-cubin": "0.7.2.post1"},
        ),
        Machine(
            "mi250x", "AMD Instinct MI250X x4 (8 GCDs)", amd=(MI250X_GCD,) * 8,
            driver="6.8.5", rocm="6.2.4-120", torch_hip="6.2.41134-65d174c3e",
            libraries={"torch": "2.5.1+rocm6.2", "pytorch-triton-rocm": "3.1.0",
                       "vllm": "0.7.3"},
        ),
        Machine(
            "mi300x", "AMD Instinct MI300X x8", amd=(MI300X,) * 8,
            driver="6.10.5", rocm="6.3.1-48", torch_hip="6.3.42131-fa1d09cbd",
            libraries={"torch": "2.7.0+rocm6.3", "pytorch-triton-rocm": "3.3.0",
                       "amd-aiter": "0.1.12", "vllm": "0.10.1"},
        ),
        Machine(
            "mi325x", "AMD Instinct MI325X x8", amd=(MI325X,) * 8,
            driver="6.12.12", rocm="6.4.1-103", torch_hip="6.4.43482-0f2d60242",
            libraries={"torch": "2.8.0+rocm6.4", "pytorch-triton-rocm": "3.4.0",
                       "amd-aiter": "0.1.13", "vllm": "0.12.0"},
        ),
        Machine(
            "mi355x", "AMD Instinct MI355X x8", amd=(MI355X,) * 8,
            driver="6.14.14", rocm="7.0.2-56", torch_hip="7.0.51831-a3e329ad8",
            libraries={"torch": "2.9.0+rocm7.0", "triton": "3.5.0",
                       "amd-aiter": "0.1.16.post3.dev0+g1a2b3c4", "sglang": "0.5.6"},
        ),
        Machine(
            "rx7900xtx", "AMD Radeon RX 7900 XTX workstation", amd=(RX7900XTX,),
            rocm="6.4.1-103", torch_hip="6.4.43482-0f2d60242",
            libraries={"torch": "2.8.0+rocm6.4", "pytorch-triton-rocm": "3.4.0"},
        ),
        Machine(
            "cpu", "CPU-only host (this project's CI)", libraries={"torch": "2.13.0+cpu"},
        ),
    )
}  # fmt: skip


def write_root(machine: Machine, root: Path) -> Path:
    """Lay out the fake filesystem of ``machine`` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    if machine.amd:
        write_kfd_tree(root, machine.amd, amdgpu_version=machine.driver, rocm_version=machine.rocm)
    torch_dir = root / "site-packages/torch"
    torch_dir.mkdir(parents=True, exist_ok=True)
    (torch_dir / "version.py").write_text(
        "from typing import Optional\n\n"
        f"__version__ = {machine.libraries.get('torch')!r}\n"
        "debug = False\n"
        f"cuda: Optional[str] = {machine.torch_cuda!r}\n"
        f"hip: Optional[str] = {machine.torch_hip!r}\n"
    )
    return root


def probe_machine(machine: Machine, root: Path | None = None) -> Platform:
    """Probe ``machine`` through the real code path, from its fake root and a fake NVML."""
    root = root if root is not None else fixture_dir() / "roots" / machine.name
    nvml = (
        FakeNVML(machine.nvidia, driver_version=machine.driver or "",
                 cuda_driver_version=machine.cuda_driver)
        if machine.nvidia
        else None
    )  # fmt: skip
    return probe(
        root=root,
        nvml=nvml,
        amdsmi=None,
        environ={},
        metadata=machine.libraries.get,
        torch_version_file=root / "site-packages/torch/version.py",
    )
