"""An in-memory NVML with the function names, return types and errors of nvidia-ml-py.

Return values are pynvml's own ctypes structures and errors are pynvml's own ``NVMLError``
subclasses, so code that works against the fake works against the real library.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

import pynvml

T = TypeVar("T")

Fault: TypeAlias = int | BaseException
"""An NVML error code to raise as ``pynvml.NVMLError``, or any exception to raise as it is
(an ``OSError`` from a broken library, a ``RuntimeError`` from a binding bug)."""


@dataclass(frozen=True)
class FakeNvidiaGpu:
    """One GPU as NVML reports it (values as on real hardware)."""

    name: str
    capability: tuple[int, int]
    pci_device_id: int  # the 16-bit PCI device id, e.g. 0x2330
    memory_mib: int
    cuda_cores: int
    bus_id: str = "00000000:18:00.0"
    uuid: str = ""

    def with_slot(self, index: int) -> FakeNvidiaGpu:
        """A copy at the ``index``-th bus slot, with a stable UUID of its own."""
        bus = f"00000000:{0x18 + 0x10 * index:02X}:00.0"
        uid = "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{self.name}/{bus}"))
        return FakeNvidiaGpu(
            self.name,
            self.capability,
            self.pci_device_id,
            self.memory_mib,
            self.cuda_cores,
            bus,
            uid,
        )


class FakeNVML:
    """A stand-in for the ``pynvml`` module.

    Args:
        gpus: The physical devices, in NVML (PCI bus) order.
        driver_version: As ``nvmlSystemGetDriverVersion`` returns it.
        cuda_driver_version: As ``nvmlSystemGetCudaDriverVersion_v2`` returns it (``13000``).
        faults: Function name -> a :data:`Fault` (an NVML error code, or an exception raised as
            it is), or ``{physical index: fault}`` to fail for some devices only.
            ``{"nvmlInit": NVML_ERROR_LIBRARY_NOT_FOUND}`` is a host without libnvidia-ml.
        values: Function name -> ``{physical index: value}``: what that device's call returns
            instead of the real answer, for drivers that report garbage (a negative memory
            total, a capability of ``(None, 0)``, a name that is not UTF-8).
        attributes_supported: Whether ``nvmlDeviceGetAttributes`` works on whole GPUs (the
            driver documents it for MIG handles only).
    """

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: Sequence[FakeNvidiaGpu] = (),
        *,
        driver_version: str = "580.159.04",
        cuda_driver_version: int = 13000,
        faults: Mapping[str, Fault | Mapping[int, Fault]] | None = None,
        values: Mapping[str, Mapping[int, Any]] | None = None,
        attributes_supported: bool = False,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.faults = dict(faults or {})
        self.values = {name: dict(per_device) for name, per_device in (values or {}).items()}
        self.attributes_supported = attributes_supported
        self.refcount = 0
        self.calls: list[str] = []

    def _enter(self, function: str, index: int | None = None) -> None:
        self.calls.append(function)
        fault = self.faults.get(function)
        if isinstance(fault, Mapping):
            fault = fault.get(index) if index is not None else None
        if isinstance(fault, BaseException):
            raise fault
        if fault is not None:
            raise pynvml.NVMLError(fault)
        if function != "nvmlInit" and self.refcount <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any, function: str) -> FakeNvidiaGpu:
        if not isinstance(handle, _Handle) or handle.owner is not self:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._enter(function, handle.index)
        return self.gpus[handle.index]

    def _answer(self, handle: Any, function: str, real: Callable[[FakeNvidiaGpu], T]) -> T:
        """The device's answer to ``function``: a configured garbage value, else the real one."""
        gpu = self._gpu(handle, function)
        per_device = self.values.get(function, {})
        if handle.index in per_device:
            return cast(T, per_device[handle.index])
        return real(gpu)

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(self, index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._answer(handle, "nvmlDeviceGetName", lambda gpu: gpu.name)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._answer(handle, "nvmlDeviceGetUUID", lambda gpu: gpu.uuid)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._answer(
            handle, "nvmlDeviceGetCudaComputeCapability", lambda gpu: gpu.capability
        )

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self._answer(handle, "nvmlDeviceGetPciInfo", self._pci_info)

    @staticmethod
    def _pci_info(gpu: FakeNvidiaGpu) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.pciDeviceId = (gpu.pci_device_id << 16) | 0x10DE
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return self._answer(handle, "nvmlDeviceGetMemoryInfo", self._memory_info)

    @staticmethod
    def _memory_info(gpu: FakeNvidiaGpu) -> Any:
        memory = pynvml.c_nvmlMemory_t()
        memory.total = gpu.memory_mib * 1024 * 1024
        memory.free = memory.total
        return memory

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        return self._answer(handle, "nvmlDeviceGetAttributes", self._attributes)

    def _attributes(self, gpu: FakeNvidiaGpu) -> Any:
        if not self.attributes_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        attrs = pynvml.c_nvmlDeviceAttributes()
        per_sm = 64 if gpu.capability in {(7, 0), (7, 5), (8, 0)} else 128
        attrs.multiprocessorCount = gpu.cuda_cores // per_sm
        attrs.memorySizeMB = gpu.memory_mib
        return attrs

    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        return self._answer(handle, "nvmlDeviceGetNumGpuCores", lambda gpu: gpu.cuda_cores)


@dataclass(frozen=True)
class _Handle:
    owner: FakeNVML
    index: int
