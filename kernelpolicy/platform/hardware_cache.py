"""The node's hardware facts kept between processes: a worker's first ``resolve()`` skips NVML
and the AMD probe, which cost 100-200 ms of it on a CUDA node.

The first full probe on a node (the daemon, ``kernelpolicy warm``, ``kernelpolicy probe``, or a
worker) writes the vendor, devices and driver to ``<cache dir>/node/hardware.json``, with the
key they were read under: the boot (``/proc/sys/kernel/random/boot_id``), the NVIDIA kernel
module's version and the amdgpu module's, the GPUs on the PCI bus, and the variables that
choose which devices a process sees (``CUDA_VISIBLE_DEVICES``, ...). A later probe whose key is
the same takes the facts from the file; anything else (a reboot, a driver update, a GPU
swapped, another visibility) probes again and rewrites it. Libraries, torch, the environment
and the machine ID are always read fresh (they are cheap).

The file is code's input as the evidence store is: read only where it and its directory are
owned by root or the current user and writable by nobody else, never through a symbolic link
of another owner, bounded in size; a file that fails any check is ignored (the probe runs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_HARDWARE_CACHE_BYTES
from kernelpolicy.platform.pci import (
    AMD_VENDOR,
    NVIDIA_VENDOR,
    nvidia_proc_driver_version,
    pci_gpus,
)
from kernelpolicy.safeio import parse_json, read_text_bounded, write_atomic
from kernelpolicy.trust import private_dir, trust_problem

SCHEMA = "kernelpolicy.hardware-cache/v1"
RELATIVE = Path("node/hardware.json")
VISIBILITY = (
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "CUDA_DEVICE_ORDER",
)  # fmt: skip
HARDWARE_KEYS = ("vendor", "devices", "driver")


def _small(path: Path) -> str | None:
    try:
        return read_text_bounded(
            path, limit=4096, limit_name="4096 bytes", fail=KernelPolicyError
        ).strip()
    except KernelPolicyError:
        return None


def hardware_key(
    root: Path, env: Mapping[str, str], on_bus: list[str] | None = None
) -> dict[str, Any] | None:
    """What makes cached hardware facts stale; None where the boot cannot be told (no cache).
    ``on_bus``: the NVIDIA and AMD GPU functions on the PCI bus, where the caller has scanned
    it already (default: scan it)."""
    boot = _small(root / "proc/sys/kernel/random/boot_id")
    if not boot:
        return None
    return {
        "schema": SCHEMA,
        "boot_id": boot,
        "nvidia_driver": nvidia_proc_driver_version(root),
        "amdgpu": _small(root / "sys/module/amdgpu/version"),
        "pci": pci_gpus(root, NVIDIA_VENDOR, AMD_VENDOR) if on_bus is None else on_bus,
        "visible": {name: env[name] for name in VISIBILITY if name in env},
    }


def load_hardware(cache_dir: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cached vendor, devices and driver for ``key``; None where there is none, it is
    stale, or it may not be trusted."""
    path = cache_dir / RELATIVE
    if not path.exists() or trust_problem(path) is not None:
        return None
    try:
        text = read_text_bounded(
            path, limit=MAX_HARDWARE_CACHE_BYTES, limit_name="MAX_HARDWARE_CACHE_BYTES",
            fail=KernelPolicyError,
        )  # fmt: skip
        document = parse_json(text, str(path), KernelPolicyError)
    except KernelPolicyError:
        return None
    if not isinstance(document, dict) or document.get("key") != dict(key):
        return None
    hardware = document.get("hardware")
    if not isinstance(hardware, dict) or set(hardware) != set(HARDWARE_KEYS):
        return None
    return hardware


def store_hardware(cache_dir: Path, key: Mapping[str, Any], snapshot: Mapping[str, Any]) -> bool:
    """Write the hardware facts of ``snapshot`` (``Platform.to_dict()``) under ``key``;
    False where the cache directory cannot be made private or written (never raises)."""
    try:
        directory = private_dir(cache_dir / RELATIVE.parent, "hardware cache")
        data = {"key": dict(key), "hardware": {k: snapshot[k] for k in HARDWARE_KEYS}}
        write_atomic(directory / RELATIVE.name, json.dumps(data).encode(), 0o644)
    except (KernelPolicyError, OSError):
        return False
    return True
