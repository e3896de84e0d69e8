"""AMD GPU names by PCI device id, and gfx target names from KFD's ``gfx_target_version``.

Sources: the amdgpu kernel driver's PCI id table and AMD's product specifications.
"""

from __future__ import annotations

from typing import NamedTuple


class AmdProduct(NamedTuple):
    name: str
    arch: str


# PCI device id -> product, from the amdgpu.ids table. Virtual functions (SR-IOV, cloud
# instances) carry their own ids. Consumer ids name several boards told apart by the PCI revision:
# those are in REVISIONS, and PRODUCTS holds the family name used when the revision is unknown.
PRODUCTS: dict[int, AmdProduct] = {
    0x738C: AmdProduct("AMD Instinct MI100", "gfx908"),
    0x7408: AmdProduct("AMD Instinct MI250X", "gfx90a"),
    0x740C: AmdProduct("AMD Instinct MI250X / MI250", "gfx90a"),
    0x740F: AmdProduct("AMD Instinct MI210", "gfx90a"),
    0x74A0: AmdProduct("AMD Instinct MI300A", "gfx942"),
    0x74A1: AmdProduct("AMD Instinct MI300X", "gfx942"),
    0x74A2: AmdProduct("AMD Instinct MI308X", "gfx942"),
    0x74A5: AmdProduct("AMD Instinct MI325X", "gfx942"),
    0x74A8: AmdProduct("AMD Instinct MI308X HF", "gfx942"),
    0x74A9: AmdProduct("AMD Instinct MI300X HF", "gfx942"),
    0x74B5: AmdProduct("AMD Instinct MI300X VF", "gfx942"),
    0x74B6: AmdProduct("AMD Instinct MI308X", "gfx942"),
    0x74BD: AmdProduct("AMD Instinct MI300X HF", "gfx942"),
    0x75A0: AmdProduct("AMD Instinct MI350X", "gfx950"),
    0x75A3: AmdProduct("AMD Instinct MI355X", "gfx950"),
    0x75B0: AmdProduct("AMD Instinct MI350X VF", "gfx950"),
    0x75B3: AmdProduct("AMD Instinct MI355X VF", "gfx950"),
    0x7448: AmdProduct("AMD Radeon Pro W7900", "gfx1100"),
    0x744C: AmdProduct("AMD Radeon RX 7900 series", "gfx1100"),
    0x7550: AmdProduct("AMD Radeon RX 9070 series", "gfx1201"),
}

REVISIONS: dict[tuple[int, int], str] = {
    (0x744C, 0xC8): "AMD Radeon RX 7900 XTX",
    (0x744C, 0xCC): "AMD Radeon RX 7900 XT",
    (0x744C, 0xCE): "AMD Radeon RX 7900 GRE",
    (0x744C, 0xCF): "AMD Radeon RX 7900M",
    (0x7550, 0xC0): "AMD Radeon RX 9070 XT",
    (0x7550, 0xC2): "AMD Radeon RX 9070 GRE",
    (0x7550, 0xC3): "AMD Radeon RX 9070",
}


def product_name(device_id: int, revision: int | None, arch: str) -> str:
    """The marketing name of a board, or a generic one that still names id and arch."""
    if revision is not None and (device_id, revision) in REVISIONS:
        return REVISIONS[(device_id, revision)]
    product = PRODUCTS.get(device_id)
    return product.name if product else f"AMD GPU 0x{device_id:04x} ({arch})"


def gfx_name(target_version: int) -> str:
    """KFD's integer to a gfx target: 90402 -> gfx942, 90010 -> gfx90a, 110000 -> gfx1100.

    The major is written in decimal, minor and stepping as one hex digit each.

    Raises:
        ValueError: The integer is not positive or a part is out of range.
    """
    if target_version <= 0:
        raise ValueError(f"gfx_target_version must be positive, got {target_version}")
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    if minor > 15 or stepping > 15:
        raise ValueError(
            f"gfx_target_version {target_version}: minor {minor} and stepping {stepping} "
            "must each fit one hex digit"
        )
    return f"gfx{major}{minor:x}{stepping:x}"


def gfx_capability(target_version: int) -> str:
    """The ``major.minor`` of a gfx target: 90402 -> "9.4", 110000 -> "11.0"."""
    major, rest = divmod(target_version, 10000)
    return f"{major}.{rest // 100}"


def parse_gfx_override(value: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION=11.0.0`` -> ``gfx1100``; ``None`` if it is not ``M.m.s``."""
    parts = value.strip().split(".")
    # ASCII digits, a few of them: '²'.isdigit() holds and int() refuses it
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 4 for p in parts):
        return None
    major, minor, stepping = (int(p) for p in parts)
    try:
        return gfx_name(major * 10000 + minor * 100 + stepping)
    except ValueError:
        return None
