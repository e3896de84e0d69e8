"""A node's identity, for staged rollouts: which cohort of the fleet a node belongs to.

A snapshot carries ``machine_id``: the host's machine ID (``/etc/machine-id``, which
Kubernetes also reports as ``status.nodeInfo.machineID``) made application-specific, as
machine-id(5) asks of anyone who needs a stable per-host identifier: HMAC-SHA256 keyed with the
raw ID over kernelpolicy's application ID, cut to 128 bits. The raw ID never leaves the host;
the same function turns a Node object's ``machineID`` into the same value, so a snapshot and a
``kubectl get nodes -o json`` inventory put a node in the same cohort.

Without a machine ID the node's GPU UUIDs stand in (sorted, so the order the devices were
listed in does not matter). The machine ID comes first because every rank of a node must land
in the same cohort, and ranks see different GPUs (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from kernelpolicy.digest import hmac_sha256, sha256
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_DEVICE_ID_CHARS, MAX_MACHINE_ID_FILE_BYTES
from kernelpolicy.safeio import read_bytes_bounded

__all__ = [
    "APP_ID",
    "MACHINE_ID_FILES",
    "app_specific_id",
    "device_ids",
    "is_app_specific_id",
    "node_identity",
    "read_machine_id",
]

APP_ID = bytes.fromhex("6b70c0a7e1b94f5c9d3f2a8e4b1d7c60")
"""kernelpolicy's application ID: the HMAC message of :func:`app_specific_id`."""
MACHINE_ID_FILES = ("etc/machine-id", "var/lib/dbus/machine-id")
"""Where the machine ID is read, under the probe's root, first found wins."""

_RAW = re.compile(r"[0-9a-f]{32}\Z")
_APP_SPECIFIC = re.compile(r"[0-9a-f]{32}\Z")
_DEVICE_ID_KEYS = ("uuid", "unique_id")  # NVML's UUID, the AMD KFD unique_id


def app_specific_id(raw: str) -> str | None:
    """The application-specific form of a raw machine ID (32 lower-case hex characters after
    trimming; upper case and dashes, as some tools print it, are accepted), or ``None`` when
    ``raw`` is not a machine ID (empty, ``uninitialized``, the wrong length)."""
    text = raw.strip().lower().replace("-", "")
    if not _RAW.fullmatch(text) or text == "0" * 32:
        return None
    return hmac_sha256(bytes.fromhex(text), APP_ID)[:32]


def is_app_specific_id(value: str) -> bool:
    """Whether ``value`` has the shape :func:`app_specific_id` returns."""
    return _APP_SPECIFIC.fullmatch(value) is not None


def read_machine_id(root: Path) -> str | None:
    """This host's application-specific machine ID, or ``None`` where there is none to read.

    Raises:
        Nothing: a missing, unreadable or malformed file is no identity (the probe never raises).
    """
    for name in MACHINE_ID_FILES:
        try:
            data = read_bytes_bounded(
                root / name, limit=MAX_MACHINE_ID_FILE_BYTES,
                limit_name="MAX_MACHINE_ID_FILE_BYTES", fail=KernelPolicyError,
            )  # fmt: skip
        except KernelPolicyError:
            continue
        found = app_specific_id(data.decode("ascii", "replace"))
        if found is not None:
            return found
    return None


def node_identity(machine_id: str | None, device_ids: Iterable[object]) -> str | None:
    """The node's identity, 32 hex characters: its application-specific machine ID, else a
    hash of its GPU UUIDs (sorted, comma separated); ``None`` without either (such a node is
    in no partial rollout). Of fixed size, so that it fits a node label whole, and a node
    label's value read back as ``machine_id`` gives the same identity."""
    if machine_id:
        return machine_id
    ids = sorted(
        {d for d in device_ids if isinstance(d, str) and 0 < len(d) <= MAX_DEVICE_ID_CHARS}
    )
    if not ids:
        return None
    return sha256(f"gpus:{','.join(ids)}".encode()).hexdigest()[:32]


def device_ids(extras: Iterable[Mapping[str, object]]) -> list[object]:
    """The GPU UUIDs in the devices' extra keys (``uuid`` on NVIDIA, ``unique_id`` on AMD)."""
    return [extra.get(key) for extra in extras for key in _DEVICE_ID_KEYS if extra.get(key)]
