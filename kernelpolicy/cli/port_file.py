"""``serve --port-file``: where the daemon writes the addresses it bound, checked before it
binds (a path another user could aim, hold or rewrite is refused), written whole without
following a link, and removed when the daemon stops if it is still the file it wrote."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from kernelpolicy.errors import DaemonError

__all__ = ["check_port_file", "port_file_error", "remove_port_file", "write_port_file"]


def port_file_error(path: Path, exc: OSError) -> DaemonError:
    return DaemonError(
        f"--port-file {path}: cannot write ({exc.strerror or exc}); expected a file path in a "
        "writable directory"
    )


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISREG, "a file"))


def check_port_file(path: Path) -> Path:
    """Before anything is bound, refuse a port file that cannot be written or that another
    user could aim or rewrite: a directory failing :func:`kernelpolicy.trust.ancestors_problem`
    (root's sticky ``/tmp`` passes: nobody can rename our file there), or at the path anything
    but a regular file of root's or ours (a link aims the write, a FIFO holds it, another
    user's file stays theirs to rewrite). The path is left as it was; returned with its
    directory resolved (a link to it in ``/tmp`` could be aimed elsewhere after the check).

    Raises:
        DaemonError: Naming the path, what is there and what was expected.
    """
    import tempfile

    from kernelpolicy.trust import ancestors_problem, owner_ok

    if not path.parent.is_dir():
        raise DaemonError(f"--port-file {path}: no directory {path.parent}")
    path = path.parent.resolve() / path.name
    problem = ancestors_problem(path.parent)
    if problem is not None:
        raise DaemonError(
            f"--port-file {path}: refusing its directory, {problem}; another user could aim "
            "the file or rewrite it: use a directory only you (or root) can write, such as "
            "$XDG_RUNTIME_DIR"
        )
    try:
        info: os.stat_result | None = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise port_file_error(path, exc) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise port_file_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    if info is not None and not (stat.S_ISREG(info.st_mode) and owner_ok(info.st_uid)):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
        raise DaemonError(
            f"--port-file {path}: {kind} owned by uid {info.st_uid} is there; expected no "
            f"file, or a regular file of root's or uid {os.geteuid()}'s (you) to replace; "
            "refusing to write through it (remove it yourself if it is stale)"
        )
    try:  # a file can be made beside it (what the write makes first, then renames)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise port_file_error(path, exc) from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_port_file(path: Path, addresses: list[str]) -> tuple[int, int]:
    """The bound addresses, one a line, mode 0644, by :func:`kernelpolicy.safeio.write_atomic`
    (no link followed, no FIFO opened, the whole file or none); its device and inode returned.

    Raises:
        DaemonError: It cannot be written after all (see :func:`check_port_file`).
    """
    from kernelpolicy.safeio import write_atomic

    try:
        # the file written, not what is at the path by now (someone may have replaced it)
        info = write_atomic(path, ("\n".join(addresses) + "\n").encode(), 0o644)
    except OSError as exc:
        raise port_file_error(path, exc) from None
    return info.st_dev, info.st_ino


def remove_port_file(path: Path, stamp: tuple[int, int]) -> None:
    """Remove the port file if it is still the one written (same device and inode ``stamp``),
    not whatever took its name since; gone already is as good."""
    with contextlib.suppress(OSError):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) == stamp:
            path.unlink()
