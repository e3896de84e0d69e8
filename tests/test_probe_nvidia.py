"""NVIDIA detection through a fake NVML with pynvml's own structures and errors."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from kernelpolicy import probe
from kernelpolicy.testing import FakeNVML
from kernelpolicy.testing.machines import A100_SXM, H100_SXM, L4, T4

EIGHT_H100 = [H100_SXM.with_slot(i) for i in range(8)]


def nvidia_probe(nvml: FakeNVML, root: Path, **env: str):  # type: ignore[no-untyped-def]
    return probe(root=root, nvml=nvml, amdsmi=None, environ=env, metadata=lambda name: None)


def test_h100_host(empty_root: Path) -> None:
    """Names, capability, PCI id, memory, SM count, driver and CUDA come from NVML."""
    platform = nvidia_probe(FakeNVML(EIGHT_H100, cuda_driver_version=12040), empty_root)
    assert platform.vendor == "nvidia"
    assert len(platform.devices) == 8
    first = platform.devices[0]
    assert (first.name, first.arch, first.capability) == ("NVIDIA H100 80GB HBM3", "sm_90", "9.0")
    assert (first.pci_device_id, first.memory_mib, first.compute_units) == ("0x2330", 81559, 132)
    assert platform.driver.version == "580.159.04"
    assert platform.driver.cuda == "12.4"
    assert platform.probe_errors == ()


@pytest.mark.parametrize(
    ("gpu", "arch", "sms"),
    [
        pytest.param(A100_SXM, "sm_80", 108, id="a100-64-cores-per-sm"),
        pytest.param(L4, "sm_89", 58, id="l4-128-cores-per-sm"),
        pytest.param(T4, "sm_75", 40, id="t4-turing"),
    ],
)
def test_sm_count_from_core_count(gpu, arch: str, sms: int, empty_root: Path) -> None:  # type: ignore[no-untyped-def]
    """Without nvmlDeviceGetAttributes (MIG only), SMs come from cores per SM of the arch."""
    device = nvidia_probe(FakeNVML([gpu]), empty_root).devices[0]
    assert (device.arch, device.compute_units) == (arch, sms)


def test_sm_count_from_attributes_when_supported(empty_root: Path) -> None:
    """Where the driver supports nvmlDeviceGetAttributes, its multiprocessorCount is used."""
    nvml = FakeNVML([H100_SXM], attributes_supported=True)
    assert nvidia_probe(nvml, empty_root).devices[0].compute_units == 132
    assert "nvmlDeviceGetNumGpuCores" not in nvml.calls


@pytest.mark.parametrize(
    ("visible", "physical", "error"),
    [
        pytest.param("2,5", [2, 5], None, id="indices"),
        pytest.param("5,2", [5, 2], None, id="order-kept"),
        pytest.param("", [], None, id="empty-hides-all"),
        pytest.param("1,9,2", [1], "entry '9' names no device", id="invalid-index-ends-list"),
        pytest.param("3,3", [3], "listed twice", id="duplicate-ends-list"),
        pytest.param("-1", [], "names no device", id="minus-one-hides-all"),
        pytest.param(EIGHT_H100[6].uuid, [6], None, id="full-uuid"),
        pytest.param(EIGHT_H100[4].uuid[:14], [4], None, id="uuid-prefix"),
        pytest.param("GPU-", [], "names no device", id="ambiguous-uuid-prefix"),
    ],
)
def test_cuda_visible_devices(
    visible: str, physical: list[int], error: str | None, empty_root: Path
) -> None:
    """CUDA_VISIBLE_DEVICES picks and orders devices as the CUDA runtime does."""
    platform = nvidia_probe(FakeNVML(EIGHT_H100), empty_root, CUDA_VISIBLE_DEVICES=visible)
    assert [d.physical_index for d in platform.devices] == physical  # type: ignore[attr-defined]
    assert [d.index for d in platform.devices] == list(range(len(physical)))
    if error is None:
        assert platform.probe_errors == ()
    else:
        assert any(error in e for e in platform.probe_errors)
    # The probe reads the variable; the snapshot does not carry it (no policy reads it, and
    # physical_index already records its effect).
    assert "CUDA_VISIBLE_DEVICES" not in platform.env


def test_missing_library_on_a_cpu_host_is_not_an_error(empty_root: Path) -> None:
    """No libnvidia-ml and no NVIDIA GPU on the PCI bus: simply not an NVIDIA host."""
    nvml = FakeNVML(faults={"nvmlInit": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND})
    platform = nvidia_probe(nvml, empty_root)
    assert platform.vendor == "none"
    assert platform.probe_errors == ()


def _nvidia_pci_device(root: Path, bdf: str = "0000:18:00.0") -> None:
    dev = root / "sys/bus/pci/devices" / bdf
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")


def test_missing_library_with_an_nvidia_gpu_present_is_reported(empty_root: Path) -> None:
    """An NVIDIA GPU on the bus but no libnvidia-ml: reported, no devices, kernels fall back."""
    _nvidia_pci_device(empty_root)
    nvml = FakeNVML(faults={"nvmlInit": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND})
    platform = nvidia_probe(nvml, empty_root)
    assert platform.vendor == "nvidia"
    assert platform.devices == ()
    (error,) = platform.probe_errors
    assert "NVML Shared Library Not Found" in error
    assert "0000:18:00.0" in error


def test_driver_not_loaded_uses_proc_version(empty_root: Path) -> None:
    """NVML fails to initialise; the driver version still comes from /proc/driver/nvidia."""
    proc = empty_root / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 2025\n"
    )
    nvml = FakeNVML(faults={"nvmlInit": pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
    platform = nvidia_probe(nvml, empty_root)
    assert platform.driver.version == "580.159.04"
    assert "Driver Not Loaded" in platform.probe_errors[0]


@pytest.mark.parametrize(
    ("function", "field", "message"),
    [
        pytest.param("nvmlDeviceGetPciInfo", "pci_device_id", "PCI info", id="pci"),
        pytest.param("nvmlDeviceGetMemoryInfo", "memory_mib", "memory info", id="memory"),
        pytest.param("nvmlDeviceGetNumGpuCores", "compute_units", "SM count", id="sm-count"),
    ],
)
def test_one_field_fails_on_one_device(
    function: str, field: str, message: str, empty_root: Path
) -> None:
    """A failing optional query blanks that field of that device only and is reported."""
    nvml = FakeNVML(EIGHT_H100[:2], faults={function: {1: pynvml.NVML_ERROR_GPU_IS_LOST}})
    platform = nvidia_probe(nvml, empty_root)
    assert getattr(platform.devices[0], field) is not None
    assert getattr(platform.devices[1], field) is None
    assert platform.probe_errors == (f"nvml: device 1: {message}: GPU is lost",)


def test_device_without_capability_is_skipped(empty_root: Path) -> None:
    """A device whose compute capability cannot be read is skipped, the rest are kept."""
    nvml = FakeNVML(
        EIGHT_H100[:3],
        faults={"nvmlDeviceGetCudaComputeCapability": {1: pynvml.NVML_ERROR_UNKNOWN}},
    )
    platform = nvidia_probe(nvml, empty_root)
    assert [d.physical_index for d in platform.devices] == [0, 2]  # type: ignore[attr-defined]
    assert "device 1: name or compute capability unreadable" in platform.probe_errors[0]


@pytest.mark.parametrize(
    ("function", "message"),
    [
        pytest.param("nvmlSystemGetDriverVersion", "driver version", id="driver"),
        pytest.param("nvmlSystemGetCudaDriverVersion_v2", "CUDA driver version", id="cuda"),
        pytest.param("nvmlDeviceGetCount", "device count", id="count"),
    ],
)
def test_system_queries_fail(function: str, message: str, empty_root: Path) -> None:
    """A failing system-level query is reported and the probe still returns."""
    nvml = FakeNVML([H100_SXM], faults={function: pynvml.NVML_ERROR_UNKNOWN})
    platform = nvidia_probe(nvml, empty_root)
    assert platform.vendor == "nvidia"
    assert any(message in e for e in platform.probe_errors)


def test_nvml_is_shut_down_even_after_errors(empty_root: Path) -> None:
    """The NVML reference taken by nvmlInit is always released."""
    nvml = FakeNVML([H100_SXM], faults={"nvmlDeviceGetCount": pynvml.NVML_ERROR_UNKNOWN})
    nvidia_probe(nvml, empty_root)
    assert nvml.refcount == 0
    assert nvml.calls[-1] == "nvmlShutdown"


def test_unexpected_exception_never_escapes(empty_root: Path) -> None:
    """Even a bug-like exception inside NVML handling becomes a probe error."""

    class Exploding(FakeNVML):
        def nvmlDeviceGetName(self, handle):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    platform = nvidia_probe(Exploding([H100_SXM]), empty_root)
    assert platform.vendor == "none"
    assert platform.probe_errors == ("nvidia: unexpected RuntimeError: boom",)


def test_default_probe_skips_nvml_without_nvidia_evidence(
    empty_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no NVIDIA driver, device node or PCI function, NVML is not even loaded."""

    def fail() -> None:
        raise AssertionError("NVML loaded on a host with no NVIDIA evidence")

    monkeypatch.setattr("kernelpolicy.platform.probing.load_nvml", fail)
    platform = probe(root=empty_root, amdsmi=None, environ={}, metadata=lambda name: None)
    assert platform.vendor == "none"


@pytest.mark.parametrize(
    "evidence",
    [
        pytest.param("dev/nvidiactl", id="device-node"),
        pytest.param("proc/driver/nvidia/version", id="proc"),
    ],
)
def test_default_probe_uses_nvml_with_evidence(
    evidence: str, empty_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device node or the kernel module is enough to query NVML."""
    (empty_root / evidence).parent.mkdir(parents=True, exist_ok=True)
    (empty_root / evidence).write_text("")
    monkeypatch.setattr("kernelpolicy.platform.probing.load_nvml", lambda: FakeNVML([H100_SXM]))
    platform = probe(root=empty_root, amdsmi=None, environ={}, metadata=lambda name: None)
    assert platform.devices[0].name == "NVIDIA H100 80GB HBM3"
