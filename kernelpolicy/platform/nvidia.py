"""NVIDIA detection through NVML (nvidia-ml-py). Never creates a CUDA context.

The NVML object is a seam: the real ``pynvml`` module in production, a
:class:`kernelpolicy.testing.FakeNVML` in tests. Both raise ``pynvml.NVMLError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kernelpolicy.limits import MAX_PROBED_DEVICES, MAX_VERSION_CHARS, shown
from kernelpolicy.platform.faults import DeviceFault, attempt, describe, read
from kernelpolicy.platform.model import Device, bounded_version
from kernelpolicy.platform.visible import select_visible
from kernelpolicy.versions import cuda_version_from_int

# FP32 cores per SM by compute capability, to derive the SM count from nvmlDeviceGetNumGpuCores
# when nvmlDeviceGetAttributes is not supported (it is documented for MIG handles only).
_CORES_PER_SM = {
    (6, 0): 64, (6, 1): 128, (6, 2): 128,
    (7, 0): 64, (7, 2): 64, (7, 5): 64,
    (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
    (9, 0): 128,
}  # fmt: skip


@dataclass
class NvidiaReport:
    """What NVML told: ``available`` is False when NVML could not be initialised at all."""

    available: bool
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    errors: list[str] = field(default_factory=list)
    init_error: str | None = None


def load_nvml() -> Any:
    """Import nvidia-ml-py lazily; the import itself does not load libnvidia-ml."""
    import pynvml

    return pynvml


def probe_nvidia(nvml: Any, environ: Mapping[str, str]) -> NvidiaReport:
    """Read the NVIDIA devices and driver through an NVML object.

    Every read goes through the probe's one fault boundary (:mod:`kernelpolicy.platform.faults`):
    a device that fails in any way, an NVML error, an ``OSError``, a value out of range, costs
    that device alone, with a ``probe_errors`` entry; a failing system query costs that value.

    Args:
        nvml: ``pynvml`` or a fake with the same functions and errors.
        environ: The environment, for ``CUDA_VISIBLE_DEVICES``.

    Returns:
        A report; it never raises.
    """
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return NvidiaReport(available=False, init_error=f"nvml: cannot initialise: {describe(exc)}")
    report = NvidiaReport(available=True)
    try:
        _read_system(nvml, report)
        _read_devices(nvml, environ, report)
    finally:
        attempt(report.errors, "nvml: shutdown failed", nvml.nvmlShutdown)
    return report


def _read_system(nvml: Any, report: NvidiaReport) -> None:
    report.driver_version = attempt(
        report.errors,
        "nvml: driver version",
        lambda: bounded_version(_text(nvml.nvmlSystemGetDriverVersion())),
    )
    report.cuda_version = attempt(
        report.errors,
        "nvml: CUDA driver version",
        lambda: cuda_version_from_int(_integer(nvml.nvmlSystemGetCudaDriverVersion_v2())),
    )


def _read_devices(nvml: Any, environ: Mapping[str, str], report: NvidiaReport) -> None:
    count = attempt(report.errors, "nvml: device count", lambda: _count(nvml))
    if count is None:
        return
    found = [
        attempt(report.errors, f"nvml: device {physical}", partial(_handle, nvml, physical),
                then="device skipped")
        for physical in range(count)
    ]  # fmt: skip
    uuids = [entry[1] if entry else None for entry in found]
    visible = select_visible("CUDA_VISIBLE_DEVICES", environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    report.errors.extend(visible.errors)
    for logical, physical in enumerate(visible.physical):
        entry = found[physical]
        if entry is None:
            continue  # reported above; CUDA still numbers it, so the logical index is kept
        work = partial(
            _read_device, nvml, entry[0], logical=logical, physical=physical, uuid=entry[1],
            errors=report.errors,
        )  # fmt: skip
        device = attempt(report.errors, f"nvml: device {physical}", work, then="device skipped")
        if device is not None:
            report.devices.append(device)


def _count(nvml: Any) -> int:
    count = _integer(nvml.nvmlDeviceGetCount())
    if not 0 <= count <= MAX_PROBED_DEVICES:
        raise ValueError(
            f"{count} devices is outside 0..MAX_PROBED_DEVICES ({MAX_PROBED_DEVICES}); "
            "no device read"
        )
    return count


def _handle(nvml: Any, physical: int) -> tuple[Any, str | None]:
    handle = read("handle", lambda: nvml.nvmlDeviceGetHandleByIndex(physical))
    return handle, _optional(nvml, "nvmlDeviceGetUUID", handle)


def _read_device(
    nvml: Any, handle: Any, *, logical: int, physical: int, uuid: str | None, errors: list[str]
) -> Device:
    """One device; any failure of its required fields (or a value out of range) raises."""
    where = f"nvml: device {physical}"
    name = read("name", lambda: _label(nvml.nvmlDeviceGetName(handle)))
    major, minor = read(
        "compute capability", lambda: _capability(nvml.nvmlDeviceGetCudaComputeCapability(handle))
    )
    extra: dict[str, Any] = {"physical_index": physical}
    if uuid is not None:
        extra["uuid"] = uuid
    pci_id: str | None = None
    try:
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        pci_id = f"0x{(_integer(pci.pciDeviceId) >> 16) & 0xFFFF:04x}"
        extra["pci_bus_id"] = _label(pci.busId)
    except nvml.NVMLError as exc:
        errors.append(f"{where}: PCI info: {exc}")
    memory_mib: int | None = None
    try:
        memory_mib = read("memory info", lambda: _memory_mib(nvml.nvmlDeviceGetMemoryInfo(handle)))
    except DeviceFault as exc:
        if not isinstance(exc.__cause__, nvml.NVMLError):
            raise
        errors.append(f"{where}: {exc}")
    return Device(
        index=logical,
        name=name,
        arch=f"sm_{major}{minor}",
        capability=f"{major}.{minor}",
        pci_device_id=pci_id,
        memory_mib=memory_mib,
        compute_units=_sm_count(nvml, handle, (major, minor), where, errors),
        **extra,
    )


def _capability(value: Any) -> tuple[int, int]:
    major, minor = value
    if not (_small(major) and _small(minor)):
        raise ValueError(f"expected two small integers such as (9, 0), got {shown(repr(value))}")
    return major, minor


def _small(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 100


def _memory_mib(memory: Any) -> int:
    total = _integer(memory.total)
    if total < 0:
        raise ValueError(f"negative total ({total} bytes)")
    return total // (1024 * 1024)


def _integer(value: Any) -> int:
    """An integer NVML returned; anything else (a float, a string, None) is a fault."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {shown(repr(value))}")
    return value


def _sm_count(
    nvml: Any, handle: Any, cc: tuple[int, int], where: str, errors: list[str]
) -> int | None:
    try:
        count = _integer(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
        if count > 0:
            return count
    except nvml.NVMLError:
        pass  # documented for MIG handles only; the core count below works on whole GPUs
    per_sm = _CORES_PER_SM.get(cc, 128 if cc >= (9, 0) else None)
    try:
        cores = _integer(nvml.nvmlDeviceGetNumGpuCores(handle))
    except nvml.NVMLError as exc:
        errors.append(f"{where}: SM count: {exc}")
        return None
    if per_sm is None or cores <= 0 or cores % per_sm:
        errors.append(f"{where}: SM count: {cores} cores do not divide into SMs of {per_sm}")
        return None
    return cores // per_sm


def _optional(nvml: Any, function: str, handle: Any) -> str | None:
    try:
        return _label(getattr(nvml, function)(handle))
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str:
    """A string NVML returned (bytes from older bindings)."""
    text = value.decode() if isinstance(value, bytes) else value
    if not isinstance(text, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return text


def _label(value: Any) -> str:
    """A name or identifier NVML returned, cut so that a garbage one cannot swell answers."""
    return shown(_text(value), MAX_VERSION_CHARS)
