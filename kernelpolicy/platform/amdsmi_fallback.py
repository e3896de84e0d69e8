"""amdsmi as a last resort, when the KFD topology cannot be read (a container without /sys).

amdsmi reports the gfx target with the hex stepping truncated (gfx90a becomes gfx90), so the
architecture is taken from the PCI device id where the id is known, and a truncated name that
cannot be repaired is reported in ``probe_errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelpolicy.platform.amd_ids import PRODUCTS, product_name

if TYPE_CHECKING:
    from kernelpolicy.platform.amd import AmdReport


def load_amdsmi() -> Any:
    """Import amdsmi if it is installed (the ``rocm`` extra), else return ``None``."""
    try:
        import amdsmi
    except Exception:
        return None
    return amdsmi


def read_amdsmi(amdsmi: Any, report: AmdReport) -> list[dict[str, Any]]:
    """Read GPUs through amdsmi; every failure lands in ``report.errors``."""
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:
        report.errors.append(f"amdsmi: cannot initialise: {exc}")
        return []
    try:
        handles = amdsmi.amdsmi_get_processor_handles()
        return [gpu for gpu in (_read_one(amdsmi, h, report) for h in handles) if gpu]
    except Exception as exc:
        report.errors.append(f"amdsmi: {exc}")
        return []
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception as exc:
            report.errors.append(f"amdsmi: shutdown failed: {exc}")


def _read_one(amdsmi: Any, handle: Any, report: AmdReport) -> dict[str, Any] | None:
    asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
    device_id = int(str(asic.get("device_id", "0")), 0)
    reported = str(asic.get("target_graphics_version", ""))
    known = PRODUCTS.get(device_id)
    arch = known.arch if known else reported
    if not known and len(reported) == len("gfx90"):
        report.errors.append(
            f"amdsmi: gfx target {reported!r} may be truncated (amdsmi drops hex steppings) "
            f"and device id 0x{device_id:04x} is not in the product table"
        )
    if not arch.startswith("gfx") or len(arch) < 6:
        report.errors.append(f"amdsmi: unreadable gfx target {reported!r}; device skipped")
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
            report.driver_version = str(amdsmi.amdsmi_get_gpu_driver_info(handle)["driver_version"])
        except Exception as exc:
            report.errors.append(f"amdsmi: driver info: {exc}")
    cus = asic.get("num_compute_units")
    return {
        "name": product_name(device_id, int(str(asic.get("rev_id", "0")), 0), arch),
        "arch": arch,
        "capability": capability,
        "pci_device_id": f"0x{device_id:04x}",
        "memory_mib": memory_mib,
        "compute_units": int(cus) if isinstance(cus, int) and cus > 0 else None,
        "source": "amdsmi",
    }
