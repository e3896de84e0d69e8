"""AMD detection from the KFD sysfs topology, with amdsmi as a fallback.

KFD (``/sys/class/kfd/kfd/topology/nodes/<n>/properties``) lists every agent; a GPU node has
``cpu_cores_count 0`` and ``gfx_target_version > 0``. Reading it needs no ROCm install and keeps
hex steppings (gfx90a), which amdsmi truncates. All paths hang off ``root``, the seam that
lets tests and users point the probe at a fake tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import (
    MAX_PROBED_DEVICES,
    MAX_SYSFS_FILE_BYTES,
    MAX_VERSION_CHARS,
    shown,
)
from kernelpolicy.platform.amd_ids import (
    PRODUCTS,
    REVISIONS,
    gfx_capability,
    gfx_name,
    parse_gfx_override,
    product_name,
)
from kernelpolicy.platform.faults import DeviceFault, attempt, read
from kernelpolicy.platform.model import Device
from kernelpolicy.platform.values import control_problem
from kernelpolicy.platform.visible import select_visible
from kernelpolicy.safeio import read_bytes_bounded

TOPOLOGY = "sys/class/kfd/kfd/topology/nodes"
_HEAP_FRAME_BUFFER = {1, 2}  # HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC and _PRIVATE
_NUMBER = re.compile(r"-?\d+")
_NEEDS_REVISION = {device for device, _ in REVISIONS}


@dataclass
class AmdReport:
    """What KFD (or amdsmi) told; ``present`` is False when there is no KFD topology."""

    present: bool
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = None
    rocm_version: str | None = None
    errors: list[str] = field(default_factory=list)


def probe_amd(root: Path, environ: Mapping[str, str], amdsmi: Any = None) -> AmdReport:
    """Read AMD GPUs, the amdgpu driver version and the ROCm version under ``root``.

    Args:
        root: The filesystem root (``/`` in production, a fake tree in tests).
        environ: For ``ROCR_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``CUDA_VISIBLE_DEVICES``,
            ``HSA_OVERRIDE_GFX_VERSION`` and ``ROCM_PATH``.
        amdsmi: An amdsmi module to fall back on when the topology is absent; ``None`` skips it.
    """
    nodes_dir = root / TOPOLOGY
    report = AmdReport(present=nodes_dir.is_dir())
    if report.present:
        physical = _read_topology(root, nodes_dir, report.errors)
    elif amdsmi is not None:
        from kernelpolicy.platform.amdsmi_fallback import read_amdsmi

        reading = read_amdsmi(amdsmi)
        report.errors += reading.errors
        report.driver_version = reading.driver_version
        physical = reading.devices
        report.present = bool(physical)
    else:
        physical = []
    if physical:
        _apply_visibility(physical, environ, report)
    if report.present:
        # Only the out-of-tree (DKMS) amdgpu has a version file; the in-tree driver has none.
        report.driver_version = report.driver_version or _version_file(
            root / "sys/module/amdgpu/version", "amdgpu version", report.errors
        )
        report.rocm_version = _rocm_version(root, environ, report.errors)
    return report


def _is_node(name: str) -> bool:
    """A KFD topology node's directory name: ASCII digits ('²'.isdigit() holds, and int()
    refuses it), a few of them."""
    return name.isascii() and name.isdigit() and len(name) <= 9


def _read_topology(root: Path, nodes_dir: Path, errors: list[str]) -> list[Device]:
    """Every GPU node, each read inside the probe's one fault boundary: a bad node costs itself."""
    try:
        names = sorted((n for n in os.listdir(nodes_dir) if _is_node(n)), key=int)
    except OSError as exc:
        errors.append(f"kfd: cannot list {nodes_dir}: {exc.strerror}")
        return []
    if len(names) > MAX_PROBED_DEVICES:
        errors.append(
            f"kfd: {len(names)} topology nodes is over MAX_PROBED_DEVICES "
            f"({MAX_PROBED_DEVICES}); reading the first {MAX_PROBED_DEVICES}"
        )
        names = names[:MAX_PROBED_DEVICES]
    gpus = []
    for name in names:
        work = partial(_read_node, root, nodes_dir / name, errors)
        gpu = attempt(errors, f"kfd: node {name}", work, then="node skipped")
        if gpu is not None:
            gpus.append(gpu)
    return gpus


def _read_node(root: Path, node: Path, errors: list[str]) -> Device | None:
    """A GPU node as a Device (logical index 0 until visibility is applied), ``None`` for a CPU.

    Raises:
        DeviceFault: Anything wrong with the node: unreadable, empty or malformed properties,
            missing keys, an impossible gfx target or a value the Device model refuses.
    """
    props = _read_properties(node / "properties")
    for key in ("cpu_cores_count", "gfx_target_version"):
        if key not in props:
            raise DeviceFault(f"{node / 'properties'}: no {key}; expected the driver's key set")
    if props["cpu_cores_count"] != 0 or props["gfx_target_version"] <= 0:
        return None  # a CPU agent, not a GPU
    gpu = read("properties", lambda: _gpu_from_properties(root, node, props, errors))
    return Device(index=0, **{k: v for k, v in gpu.items() if v is not None})


def _gpu_from_properties(
    root: Path, node: Path, props: dict[str, int], errors: list[str]
) -> dict[str, Any]:
    target = props["gfx_target_version"]
    arch = gfx_name(target)
    device_id = props.get("device_id")
    simd_per_cu = props.get("simd_per_cu") or 0
    revision = _pci_revision(root, props, errors)
    return {
        "name": product_name(device_id, revision, arch) if device_id else f"AMD GPU ({arch})",
        "arch": arch,
        "capability": gfx_capability(target),
        "pci_device_id": f"0x{device_id:04x}" if device_id else None,
        "memory_mib": _vram_mib(node, errors),
        "compute_units": props["simd_count"] // simd_per_cu
        if simd_per_cu and "simd_count" in props
        else None,
        "gfx_target_version": target,
        "kfd_node": int(node.name),
        "unique_id": f"GPU-{props['unique_id']:016x}" if props.get("unique_id") else None,
    }


def _apply_visibility(
    physical: list[Device], environ: Mapping[str, str], report: AmdReport
) -> None:
    indices = list(range(len(physical)))
    uuids = [getattr(gpu, "unique_id", None) for gpu in physical]
    # ROCR_VISIBLE_DEVICES filters in the runtime; HIP_VISIBLE_DEVICES (or, when it is unset,
    # CUDA_VISIBLE_DEVICES, which HIP also honours) then filters what ROCr left visible.
    hip_variable = (
        "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in environ else "CUDA_VISIBLE_DEVICES"
    )
    for variable in ("ROCR_VISIBLE_DEVICES", hip_variable):
        seen = select_visible(variable, environ.get(variable), [uuids[i] for i in indices])
        report.errors.extend(seen.errors)
        indices = [indices[i] for i in seen.physical]
    override = environ.get("HSA_OVERRIDE_GFX_VERSION")
    override_arch = parse_gfx_override(override) if override else None
    if override and override_arch is None:
        report.errors.append(
            f"HSA_OVERRIDE_GFX_VERSION={shown(override)!r}: expected major.minor.stepping such "
            "as 11.0.0"
        )
    for logical, physical_index in enumerate(indices):
        # Every field was validated when the node was read; only the numbering changes here.
        extra: dict[str, Any] = {"physical_index": physical_index}
        if override_arch:
            extra["effective_arch"] = override_arch
        device = physical[physical_index]
        data = {**device.to_dict(), **extra, "index": logical}
        report.devices.append(Device(**data))


def _read_properties(path: Path) -> dict[str, int]:
    """A KFD properties file: ``<key> <integer>`` lines, at least one.

    Raises:
        DeviceFault: The file cannot be read, is not ASCII, is empty, or has a malformed line.
    """
    data = _read_sysfs(path)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise DeviceFault(f"cannot read {path}: not ASCII (byte {exc.start})") from None
    props: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if not _NUMBER.fullmatch(value):
            raise DeviceFault(
                f"{path}:{lineno}: expected '<key> <integer>', got {shown(line.strip())!r}"
            )
        props[key] = int(value)
    if not props:
        raise DeviceFault(f"{path}: empty; expected '<key> <integer>' lines")
    return props


def _read_sysfs(path: Path) -> bytes:
    """A sysfs or version file: regular, at most ``MAX_SYSFS_FILE_BYTES``, never blocking.

    Raises:
        DeviceFault: Naming the file and why it could not be read.
    """
    try:
        return read_bytes_bounded(
            path, limit=MAX_SYSFS_FILE_BYTES, limit_name="MAX_SYSFS_FILE_BYTES",
            fail=KernelPolicyError,
        )  # fmt: skip
    except KernelPolicyError as exc:
        raise DeviceFault(f"cannot read {exc}") from None


def _vram_mib(node: Path, errors: list[str]) -> int | None:
    banks = node / "mem_banks"
    if not banks.is_dir():
        return None
    total = 0
    for bank in sorted(banks.iterdir())[:MAX_PROBED_DEVICES]:
        try:
            props = _read_properties(bank / "properties")
        except DeviceFault as exc:
            errors.append(f"kfd: {exc}; memory bank skipped")
            continue
        if props.get("heap_type") in _HEAP_FRAME_BUFFER:
            total += props.get("size_in_bytes", 0)
    return total // (1024 * 1024) if total else None


def _pci_revision(root: Path, props: dict[str, int], errors: list[str]) -> int | None:
    if "location_id" not in props or props.get("device_id") not in _NEEDS_REVISION:
        return None
    location = props["location_id"]
    bdf = (
        f"{props.get('domain', 0):04x}:{location >> 8:02x}:"
        f"{(location >> 3) & 0x1F:02x}.{location & 0x7}"
    )
    text = _read_text(root / "sys/bus/pci/devices" / bdf / "revision", "PCI revision", errors)
    try:
        return int(text, 16) if text else None
    except ValueError:
        errors.append(
            f"kfd: PCI revision of {bdf}: expected hex such as 0xc8, got {shown(text or '')!r}"
        )
        return None


def _rocm_version(root: Path, environ: Mapping[str, str], errors: list[str]) -> str | None:
    prefixes = [environ.get("ROCM_PATH", ""), "/opt/rocm"]
    for prefix in (p for p in prefixes if p):
        base = root / prefix.lstrip("/")
        text = _version_file(base / ".info/version", "ROCm version", errors)
        if text:
            return text
        header = _read_text(
            base / "include/rocm-core/rocm_version.h", "ROCm version", errors, quiet_missing=True
        )
        if header:
            parts = [
                re.search(rf"#define ROCM_VERSION_{part}\s+(\d{{1,6}})\b", header)
                for part in ("MAJOR", "MINOR", "PATCH")
            ]
            if all(parts):
                return ".".join(m.group(1) for m in parts if m)
    return None


def _read_text(path: Path, what: str, errors: list[str], quiet_missing: bool = False) -> str | None:
    if quiet_missing and not path.exists():
        return None
    try:
        text = _read_sysfs(path).decode("utf-8").strip()
    except DeviceFault as exc:
        errors.append(f"{what}: {exc}")
        return None
    except UnicodeDecodeError as exc:
        errors.append(f"{what}: cannot read {path}: not UTF-8 (byte {exc.start})")
        return None
    return text or None


def _version_file(path: Path, what: str, errors: list[str]) -> str | None:
    """A version from a file, bounded like every version (``MAX_VERSION_CHARS``), and
    printable like every platform string."""
    text = _read_text(path, what, errors, quiet_missing=True)
    if text is not None and len(text) > MAX_VERSION_CHARS:
        errors.append(
            f"{what}: {path}: {len(text)} characters is over MAX_VERSION_CHARS "
            f"({MAX_VERSION_CHARS})"
        )
        return None
    if text is not None and (problem := control_problem(text)):
        errors.append(f"{what}: {path}: {problem}")
        return None
    return text


__all__ = ["PRODUCTS", "AmdReport", "probe_amd"]
