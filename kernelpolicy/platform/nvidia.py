"""NVIDIA detection through NVML (nvidia-ml-py). Never creates a CUDA context.

The NVML object is a seam: the real ``pynvml`` module in production, a
:class:`kernelpolicy.testing.FakeNVML` in tests. Both raise ``pynvml.NVMLError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelpolicy.platform.model import Device
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

    Args:
        nvml: ``pynvml`` or a fake with the same functions and errors.
        environ: The environment, for ``CUDA_VISIBLE_DEVICES``.

    Returns:
        A report; it never raises for NVML errors, which land in ``errors``.
    """
    error_type = nvml.NVMLError
    try:
        nvml.nvmlInit()
    except error_type as exc:
        return NvidiaReport(available=False, init_error=f"nvml: cannot initialise: {exc}")
    report = NvidiaReport(available=True)
    try:
        _read_system(nvml, report)
        _read_devices(nvml, environ, report)
    finally:
        try:
            nvml.nvmlShutdown()
        except error_type as exc:
            report.errors.append(f"nvml: shutdown failed: {exc}")
    return report


def _read_system(nvml: Any, report: NvidiaReport) -> None:
    try:
        report.driver_version = str(nvml.nvmlSystemGetDriverVersion())
    except nvml.NVMLError as exc:
        report.errors.append(f"nvml: driver version: {exc}")
    try:
        report.cuda_version = cuda_version_from_int(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    except nvml.NVMLError as exc:
        report.errors.append(f"nvml: CUDA driver version: {exc}")


def _read_devices(nvml: Any, environ: Mapping[str, str], report: NvidiaReport) -> None:
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        report.errors.append(f"nvml: device count: {exc}")
        return
    handles: list[Any] = []
    uuids: list[str | None] = []
    for physical in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(physical)
        except nvml.NVMLError as exc:
            report.errors.append(f"nvml: device {physical}: {exc}")
            handle = None
        handles.append(handle)
        uuids.append(_optional(nvml, "nvmlDeviceGetUUID", handle) if handle is not None else None)
    visible = select_visible("CUDA_VISIBLE_DEVICES", environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    report.errors.extend(visible.errors)
    for logical, physical in enumerate(visible.physical):
        handle = handles[physical]
        if handle is None:
            continue
        device = _read_device(
            nvml, handle, logical=logical, physical=physical, uuid=uuids[physical],
            errors=report.errors,
        )  # fmt: skip
        if device is not None:
            report.devices.append(device)


def _read_device(
    nvml: Any, handle: Any, *, logical: int, physical: int, uuid: str | None, errors: list[str]
) -> Device | None:
    where = f"nvml: device {physical}"
    try:
        name = str(nvml.nvmlDeviceGetName(handle))
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except nvml.NVMLError as exc:
        errors.append(f"{where}: name or compute capability unreadable, device skipped: {exc}")
        return None
    extra: dict[str, Any] = {"physical_index": physical}
    if uuid is not None:
        extra["uuid"] = uuid
    pci_id: str | None = None
    try:
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        pci_id = f"0x{(int(pci.pciDeviceId) >> 16) & 0xFFFF:04x}"
        extra["pci_bus_id"] = _text(pci.busId)
    except nvml.NVMLError as exc:
        errors.append(f"{where}: PCI info: {exc}")
    memory_mib: int | None = None
    try:
        memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
    except nvml.NVMLError as exc:
        errors.append(f"{where}: memory info: {exc}")
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


def _sm_count(
    nvml: Any, handle: Any, cc: tuple[int, int], where: str, errors: list[str]
) -> int | None:
    try:
        count = int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
        if count > 0:
            return count
    except nvml.NVMLError:
        pass  # documented for MIG handles only; the core count below works on whole GPUs
    per_sm = _CORES_PER_SM.get(cc, 128 if cc >= (9, 0) else None)
    try:
        cores = int(nvml.nvmlDeviceGetNumGpuCores(handle))
    except nvml.NVMLError as exc:
        errors.append(f"{where}: SM count: {exc}")
        return None
    if per_sm is None or cores % per_sm:
        errors.append(f"{where}: SM count: {cores} cores do not divide into SMs of {per_sm}")
        return None
    return cores // per_sm


def _optional(nvml: Any, function: str, handle: Any) -> str | None:
    try:
        return _text(getattr(nvml, function)(handle))
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
