"""amdsmi as a last resort, when the KFD topology cannot be read (a container without /sys).

amdsmi reports the gfx target with the hex stepping truncated (gfx90a becomes gfx90), so the
architecture is taken from the PCI device id where the id is known, and a truncated name that
cannot be repaired is reported in ``probe_errors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kernelpolicy.limits import MAX_PROBED_DEVICES, shown
from kernelpolicy.platform.amd_ids import PRODUCTS, product_name
from kernelpolicy.platform.faults import attempt, describe
from kernelpolicy.platform.model import Device, bounded_version


@dataclass
class AmdsmiReading:
    """What amdsmi told: the GPUs, the driver version of the first that reports one, and
    whatever failed (each failure costs only its device or field)."""

    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = None
    errors: list[str] = field(default_factory=list)


def load_amdsmi() -> Any:
    """Import amdsmi if it is installed (the ``rocm`` extra), else return ``None``."""
    try:
        import amdsmi
    except Exception:
        return None
    return amdsmi


def read_amdsmi(amdsmi: Any) -> AmdsmiReading:
    """Read GPUs through amdsmi; every failure lands in the reading's ``errors``, and a bad
    device costs only itself (the probe's one fault boundary, kernelpolicy.platform.faults)."""
    report = AmdsmiReading()
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:
        report.errors.append(f"amdsmi: cannot initialise: {describe(exc)}")
        return report
    try:
        handles = attempt(report.errors, "amdsmi", lambda: list(_handles(amdsmi))) or []
        gpus = [
            attempt(report.errors, f"amdsmi: device {i}", partial(_read_one, amdsmi, h, report),
                    then="device skipped")
            for i, h in enumerate(handles)
        ]  # fmt: skip
        report.devices = [gpu for gpu in gpus if gpu is not None]
        return report
    finally:
        attempt(report.errors, "amdsmi: shutdown failed", amdsmi.amdsmi_shut_down)


def _handles(amdsmi: Any) -> list[Any]:
    handles = list(amdsmi.amdsmi_get_processor_handles())
    if len(handles) > MAX_PROBED_DEVICES:
        raise ValueError(
            f"{len(handles)} devices is over MAX_PROBED_DEVICES ({MAX_PROBED_DEVICES})"
        )
    return handles


def _read_one(amdsmi: Any, handle: Any, report: AmdsmiReading) -> Device | None:
    asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
    device_id = int(str(asic.get("device_id", "0")), 0)
    reported = str(asic.get("target_graphics_version", ""))
    known = PRODUCTS.get(device_id)
    arch = known.arch if known else reported
    if not known and len(reported) == len("gfx90"):
        report.errors.append(
            f"amdsmi: gfx target {shown(reported)!r} may be truncated (amdsmi drops hex steppings) "
            f"and device id 0x{device_id:04x} is not in the product table"
        )
    if not arch.startswith("gfx") or len(arch) < 6:
        report.errors.append(f"amdsmi: unreadable gfx target {shown(reported)!r}; device skipped")
        return None
    digits = arch[3:]
    capability = f"{int(digits[:-2])}.{int(digits[-2], 16)}"
    try:
        vram = amdsmi.amdsmi_get_gpu_vram_info(handle)
        memory_mib = int(vram["vram_size"])  # amdsmi reports MB
    except Exception as exc:
        report.errors.append(f"amdsmi: VRAM info: {exc}")
        memory_mib = None
    if report.driver_version is None:
        try:
            report.driver_version = bounded_version(
                str(amdsmi.amdsmi_get_gpu_driver_info(handle)["driver_version"])
            )
        except Exception as exc:
            report.errors.append(f"amdsmi: driver info: {exc}")
    cus = asic.get("num_compute_units")
    fields = {
        "name": shown(product_name(device_id, int(str(asic.get("rev_id", "0")), 0), arch), 256),
        "arch": arch,
        "capability": capability,
        "pci_device_id": f"0x{device_id:04x}",
        "memory_mib": memory_mib,
        "compute_units": int(cus) if isinstance(cus, int) and cus > 0 else None,
        "source": "amdsmi",
    }
    return Device(index=0, **{k: v for k, v in fields.items() if v is not None})
