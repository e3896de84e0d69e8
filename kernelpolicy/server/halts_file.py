"""The node's halts where its workers read them: a file the daemon writes beside its sockets.

A candidate the daemon halted (:mod:`.halts`) must leave the node's workers too, not only the
daemon's answers: most workers resolve in-process (``resolve()``, the vLLM plugin, ``exec``).
The daemon writes ``x.halts.json`` beside each unix socket ``x.sock``
(:func:`kernelpolicy.server.sockets.halts_file_path`) when it starts (no
halts: a restarted daemon starts with none), each time the halts its answers use change, and
removes it when it stops. A worker reads it where it would report (``KERNELPOLICY_SOCKET``, or
the default socket where a daemon listens) and resolves without those candidates, as the
daemon does; a process that lives on (the vLLM plugin) follows the file's changes.

The file is trusted as the daemon behind the socket is: owned by root or this user, writable
by nobody else, every directory above likewise, no link, at most ``MAX_HALTS_FILE_BYTES``;
otherwise it is ignored, and the reason is given (a worker logs it). A halt only ever takes a
candidate out (the fallback stays), and only one the worker's own policies name.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_HALT_REASON_CHARS, MAX_HALTS_FILE_BYTES
from kernelpolicy.safeio import parse_json, read_bytes_bounded, write_atomic

__all__ = ["NodeHalts", "file_stamp", "read_halts", "remove_halts", "write_halts"]

FORMAT = 1


def write_halts(path: Path, halts: Mapping[str, str]) -> None:
    """Replace the file at ``path`` with ``halts`` (``feature/impl`` -> why), atomically, mode
    0644 (no secret: the same words are in ``explain``, the labels and the metrics).

    Raises:
        OSError: It cannot be written.
    """
    data = json.dumps({"format": FORMAT, "halts": dict(sorted(halts.items()))}, indent=1)
    write_atomic(path, data.encode(), 0o644, sync=False)


def remove_halts(path: Path) -> None:
    """The daemon stops: its halts go with it (never raises)."""
    with contextlib.suppress(OSError):
        path.unlink()


Stamp = tuple[int, int, int, int]  # device, inode, mtime_ns, size: a replaced file differs


@dataclass(frozen=True)
class NodeHalts:
    """What a worker takes from the node's halts file.

    Attributes:
        halts: ``feature/impl`` -> why (empty without a daemon, or when the file is ignored).
        problem: Why the file was ignored, or None.
        stamp: The file's identity when it was read (None: no file), to notice a change.
    """

    halts: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    stamp: Stamp | None = None


def file_stamp(path: Path) -> Stamp | None:
    """The identity of the file at ``path`` now (not following a link), or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)


def read_halts(path: Path) -> NodeHalts:
    """The halts in the file at ``path``; no file is no halts. Never raises."""
    from kernelpolicy.trust import owner_mode_problem, trust_problem

    stamp = file_stamp(path)
    if stamp is None:
        return NodeHalts()

    def still_trusted(info: os.stat_result) -> None:
        problem = owner_mode_problem(info)
        if problem is not None:  # replaced between the path's check and the open
            raise KernelPolicyError(f"{path}: {problem}")

    try:
        if path.is_symlink():
            raise KernelPolicyError(f"{path}: a symbolic link; the daemon writes a plain file")
        problem = trust_problem(path)
        if problem is not None:
            raise KernelPolicyError(problem)
        data = read_bytes_bounded(
            path, limit=MAX_HALTS_FILE_BYTES, limit_name="MAX_HALTS_FILE_BYTES",
            fail=KernelPolicyError, opened=still_trusted,
        )  # fmt: skip
        return NodeHalts(_parse(path, data), None, stamp)
    except KernelPolicyError as exc:
        return NodeHalts({}, f"the node's halts file is ignored: {exc}", stamp)


def _parse(path: Path, data: bytes) -> dict[str, str]:
    """``{"format": 1, "halts": {"feature/impl": "why"}}``, checked.

    Raises:
        KernelPolicyError: Anything else, naming what was expected.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KernelPolicyError(f"{path}: not UTF-8") from None
    document = parse_json(text, str(path), KernelPolicyError, limit=3)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise KernelPolicyError(f"{path}: expected an object with format {FORMAT}")
    halts = document.get("halts")
    if not isinstance(halts, dict):
        raise KernelPolicyError(f'{path}: expected "halts", an object of feature/impl -> why')
    for key, why in halts.items():
        feature, _, impl = key.partition("/")
        if not (feature and impl and isinstance(why, str) and len(why) <= MAX_HALT_REASON_CHARS):
            raise KernelPolicyError(
                f"{path}: halt {key[:80]!r}: expected a feature/impl key and a reason of at "
                f"most {MAX_HALT_REASON_CHARS} characters"
            )
    return dict(halts)
