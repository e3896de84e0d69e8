"""A stand-in for the ``amdsmi`` module, with the value formats of amdsmi 7.0's Python API.

``amdsmi_get_gpu_asic_info`` returns ids as hex strings (``"0x74a1"``), the revision as
``"0x00"``, and the gfx target as ``"gfx" + hex(target)``, which is how gfx90a comes out as
``gfx90``. ``amdsmi_get_gpu_vram_info`` reports MB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class AmdSmiException(Exception):
    """Mirrors ``amdsmi.AmdSmiException``."""


@dataclass(frozen=True)
class FakeAmdSmiGpu:
    device_id: int
    target_graphics_version: str  # as amdsmi prints it: "gfx942", or "gfx90" for gfx90a
    compute_units: int
    vram_mb: int
    market_name: str
    rev_id: int = 0


class FakeAmdSmi:
    AmdSmiException = AmdSmiException

    def __init__(
        self,
        gpus: Sequence[FakeAmdSmiGpu] = (),
        *,
        driver_version: str = "6.10.5",
        fail_init: bool = False,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.fail_init = fail_init
        self.initialised = False

    def amdsmi_init(self) -> None:
        if self.fail_init:
            raise AmdSmiException("Error code:\n\t2 | AMDSMI_STATUS_INVAL - Invalid parameters")
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[int]:
        return list(range(len(self.gpus)))

    def amdsmi_get_gpu_asic_info(self, handle: int) -> dict[str, Any]:
        gpu = self.gpus[handle]
        return {
            "market_name": gpu.market_name,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": hex(gpu.device_id),
            "rev_id": f"0x{gpu.rev_id:02x}",
            "asic_serial": "0xA1B2C3D4E5F60708",
            "oam_id": handle,
            "num_compute_units": gpu.compute_units,
            "target_graphics_version": gpu.target_graphics_version,
            "subsystem_id": "0x74a1",
        }

    def amdsmi_get_gpu_vram_info(self, handle: int) -> dict[str, Any]:
        gpu = self.gpus[handle]
        return {
            "vram_type": 8,
            "vram_vendor": "SAMSUNG",
            "vram_size": gpu.vram_mb,
            "vram_bit_width": 8192,
        }

    def amdsmi_get_gpu_driver_info(self, handle: int) -> dict[str, str]:
        return {
            "driver_name": "amdgpu",
            "driver_version": self.driver_version,
            "driver_date": "N/A",
        }
