"""NVIDIA detection through a fake NVML with pynvml's own structures and errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from kernelpolicy import probe
from kernelpolicy.limits import MAX_PROBED_DEVICES
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
        pytest.param("0,\u00b2,1", [0], "entry '\u00b2' names no device", id="superscript-two"),
        pytest.param("1,\u0663", [1], "names no device", id="arabic-indic-three"),
        pytest.param("4," + "1" * 5000, [4], "names no device", id="5000-digits"),
        pytest.param("0003,1", [3, 1], None, id="leading-zeros"),
        pytest.param("2," + "0" * 5000 + "7", [2, 7], None, id="5000-leading-zeros"),
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
    assert platform.probe_errors == (
        "nvml: device 1: compute capability: Unknown Error; device skipped",
    )


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


def test_unexpected_exception_costs_only_its_device(empty_root: Path) -> None:
    """Even a bug-like exception inside NVML handling costs only the device it came from."""

    class Exploding(FakeNVML):
        def nvmlDeviceGetName(self, handle):  # type: ignore[no-untyped-def]
            if handle.index == 0:
                raise RuntimeError("boom")
            return super().nvmlDeviceGetName(handle)

    platform = nvidia_probe(Exploding(EIGHT_H100[:2]), empty_root)
    assert platform.vendor == "nvidia"
    assert [d.index for d in platform.devices] == [1]
    assert platform.probe_errors == ("nvml: device 0: name: RuntimeError: boom; device skipped",)


# One bad device among four: what it does, and the probe error it must leave.
BAD_DEVICE = [
    pytest.param({"nvmlDeviceGetName": OSError(5, "Input/output error")}, {},
                 "name: OSError: [Errno 5] Input/output error", id="name-oserror"),
    pytest.param({"nvmlDeviceGetName": pynvml.NVML_ERROR_GPU_IS_LOST}, {},
                 "name: GPU is lost", id="name-gpu-lost"),
    pytest.param({}, {"nvmlDeviceGetName": b"H100\xff\xfe"},
                 "name: UnicodeDecodeError", id="name-not-utf8"),
    pytest.param({}, {"nvmlDeviceGetName": None}, "name: TypeError: expected a string",
                 id="name-none"),
    pytest.param({"nvmlDeviceGetHandleByIndex": OSError("no handle")}, {},
                 "handle: OSError: no handle", id="handle-oserror"),
    pytest.param({"nvmlDeviceGetUUID": RuntimeError("binding bug")}, {},
                 "RuntimeError: binding bug", id="uuid-runtime-error"),
    pytest.param({}, {"nvmlDeviceGetCudaComputeCapability": (None, 0)},
                 "compute capability: ValueError: expected two small integers",
                 id="capability-none"),
    pytest.param({}, {"nvmlDeviceGetCudaComputeCapability": (-1, 0)},
                 "compute capability: ValueError", id="capability-negative"),
    pytest.param({}, {"nvmlDeviceGetCudaComputeCapability": ("9", "0")},
                 "compute capability: ValueError", id="capability-strings"),
    pytest.param({}, {"nvmlDeviceGetCudaComputeCapability": 9},
                 "compute capability: TypeError", id="capability-not-a-pair"),
    pytest.param({}, {"nvmlDeviceGetMemoryInfo": SimpleNamespace(total=-5 * 2**20)},
                 "memory info: ValueError: negative total", id="memory-negative"),
    pytest.param({}, {"nvmlDeviceGetMemoryInfo": SimpleNamespace(total="80GB")},
                 "memory info: TypeError: expected an integer", id="memory-string"),
    pytest.param({}, {"nvmlDeviceGetMemoryInfo": None},
                 "memory info: AttributeError", id="memory-none"),
    pytest.param({"nvmlDeviceGetPciInfo": OSError("pci")}, {}, "OSError: pci", id="pci-oserror"),
    pytest.param({}, {"nvmlDeviceGetPciInfo": SimpleNamespace(pciDeviceId=None, busId=b"x")},
                 "TypeError: expected an integer", id="pci-garbage"),
    pytest.param({"nvmlDeviceGetAttributes": MemoryError()}, {}, "MemoryError",
                 id="attributes-memory-error"),
    pytest.param({"nvmlDeviceGetNumGpuCores": ZeroDivisionError("x")}, {},
                 "ZeroDivisionError", id="cores-zero-division"),
]  # fmt: skip


@pytest.mark.parametrize(("faults", "values", "message"), BAD_DEVICE)
def test_one_bad_device_costs_only_itself(
    faults: dict[str, object], values: dict[str, object], message: str, empty_root: Path
) -> None:
    """Device 2 of four fails in some way: the other three are reported, vendor stays nvidia,
    and one probe error names device 2 and what went wrong."""
    nvml = FakeNVML(
        EIGHT_H100[:4],
        faults={name: {2: fault} for name, fault in faults.items()},  # type: ignore[misc]
        values={name: {2: value} for name, value in values.items()},
    )
    platform = nvidia_probe(nvml, empty_root)
    assert platform.vendor == "nvidia"
    assert [d.physical_index for d in platform.devices] == [0, 1, 3]  # type: ignore[attr-defined]
    assert [d.index for d in platform.devices] == [0, 1, 3]  # CUDA still counts device 2
    assert len(platform.probe_errors) == 1
    assert platform.probe_errors[0].startswith("nvml: device 2: ")
    assert message in platform.probe_errors[0]
    assert platform.probe_errors[0].endswith("device skipped")
    assert nvml.refcount == 0


@pytest.mark.parametrize(
    ("faults", "driver", "message"),
    [
        pytest.param({"nvmlSystemGetDriverVersion": OSError("gone")}, None,
                     "nvml: driver version: OSError: gone", id="driver-oserror"),
        pytest.param({}, "5" * 300, "nvml: driver version: ValueError: a version of 300 characters",
                     id="driver-version-too-long"),
        pytest.param({"nvmlSystemGetCudaDriverVersion_v2": RuntimeError("x")}, None,
                     "nvml: CUDA driver version: RuntimeError: x", id="cuda-runtime-error"),
        pytest.param({"nvmlShutdown": OSError("busy")}, None,
                     "nvml: shutdown failed: OSError: busy", id="shutdown-oserror"),
    ],
)  # fmt: skip
def test_system_faults_cost_only_their_value(
    faults: dict[str, BaseException], driver: str | None, message: str, empty_root: Path
) -> None:
    """A system query that fails in any way blanks its value; every device is still read."""
    extra = {} if driver is None else {"driver_version": driver}
    nvml = FakeNVML(EIGHT_H100[:2], faults=faults, **extra)  # type: ignore[arg-type]
    platform = nvidia_probe(nvml, empty_root)
    assert len(platform.devices) == 2
    assert platform.probe_errors == (message,) or message in platform.probe_errors[0]


@pytest.mark.parametrize(
    ("count", "devices"),
    [
        pytest.param(MAX_PROBED_DEVICES, MAX_PROBED_DEVICES, id="at-limit"),
        pytest.param(MAX_PROBED_DEVICES + 1, 0, id="limit-plus-one"),
    ],
)
def test_device_count_is_bounded(count: int, devices: int, empty_root: Path) -> None:
    """A device count over MAX_PROBED_DEVICES (a garbage answer) reads no device and says so."""
    nvml = FakeNVML([H100_SXM] * count)
    platform = nvidia_probe(nvml, empty_root)
    assert len(platform.devices) == devices
    if devices == 0:
        assert "outside 0..MAX_PROBED_DEVICES" in platform.probe_errors[0]


def test_init_raising_anything_is_an_init_error(empty_root: Path) -> None:
    """nvmlInit raising OSError (not NVMLError) on a host with an NVIDIA GPU is reported."""
    (empty_root / "proc/driver/nvidia").mkdir(parents=True)
    (empty_root / "proc/driver/nvidia/version").write_text(
        "NVRM version: Kernel Module  580.1.2  x"
    )
    nvml = FakeNVML([H100_SXM], faults={"nvmlInit": OSError("libnvidia-ml.so.1: bad ELF")})
    platform = nvidia_probe(nvml, empty_root)
    assert platform.vendor == "nvidia"
    assert platform.driver.version == "580.1.2"
    assert (
        "nvml: cannot initialise: OSError: libnvidia-ml.so.1: bad ELF" in platform.probe_errors[0]
    )


def test_default_probe_skips_nvml_without_nvidia_evidence(
    empty_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no NVIDIA driver, device node or PCI function, NVML is not even loaded."""

    def fail() -> None:
        raise AssertionError("NVML loaded on a host with no NVIDIA evidence")

    monkeypatch.setattr("kernelpolicy.platform.nvidia.load_nvml", fail)
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
    monkeypatch.setattr("kernelpolicy.platform.nvidia.load_nvml", lambda: FakeNVML([H100_SXM]))
    platform = probe(root=empty_root, amdsmi=None, environ={}, metadata=lambda name: None)
    assert platform.devices[0].name == "NVIDIA H100 80GB HBM3"
