"""Evidence of GPUs on the PCI bus, for when the vendor's library cannot be loaded.

A host with an NVIDIA GPU but no loadable libnvidia-ml is a fault worth reporting; a host with
no NVIDIA GPU and no libnvidia-ml is simply not an NVIDIA host. The PCI bus tells them apart.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_SYSFS_FILE_BYTES
from kernelpolicy.safeio import read_bytes_bounded

NVIDIA_VENDOR = 0x10DE
AMD_VENDOR = 0x1002
# PCI classes of GPUs: VGA (0x0300), 3D controller (0x0302), processing accelerator (0x1200).
_GPU_CLASSES = {0x0300, 0x0302, 0x1200}


def _read(path: Path) -> str:
    """A sysfs or /proc file, bounded and never blocking; undecodable bytes become U+FFFD.

    Raises:
        KernelPolicyError: Not a regular file, over MAX_SYSFS_FILE_BYTES, or unreadable.
    """
    data = read_bytes_bounded(
        path, limit=MAX_SYSFS_FILE_BYTES, limit_name="MAX_SYSFS_FILE_BYTES",
        fail=KernelPolicyError,
    )  # fmt: skip
    return data.decode("utf-8", errors="replace")


def pci_gpus(root: Path, *vendors: int) -> list[str]:
    """Bus addresses of GPU-class PCI functions of any of ``vendors`` (one scan of the bus);
    unreadable entries are skipped."""
    base = root / "sys/bus/pci/devices"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            dev_vendor = int(_read(base / entry / "vendor").strip(), 16)
            dev_class = int(_read(base / entry / "class").strip(), 16) >> 8
        except (KernelPolicyError, ValueError):
            continue
        if dev_vendor in vendors and dev_class in _GPU_CLASSES:
            found.append(entry)
    return found


def nvidia_proc_driver_version(root: Path) -> str | None:
    """The version in ``/proc/driver/nvidia/version``, when the kernel module is loaded."""
    try:
        text = _read(root / "proc/driver/nvidia/version")
    except KernelPolicyError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..."
    for token in text.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit() and len(token) <= 64:
            return token
    return None


def nvidia_evidence(root: Path) -> bool:
    """Any sign of an NVIDIA GPU: the kernel module, a device node, or a PCI function.

    Containers get ``/dev/nvidiactl`` from the NVIDIA runtime even where ``/proc`` is masked.
    """
    return (
        (root / "proc/driver/nvidia/version").exists()
        or (root / "dev/nvidiactl").exists()
        or bool(pci_gpus(root, NVIDIA_VENDOR))
    )
