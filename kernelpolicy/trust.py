"""Who may change what the engine trusts: ssh's StrictModes, applied to policies and evidence.

A file or directory that decides which kernel runs must be owned by root or by the user running
kernelpolicy, and writable by nobody else; otherwise a second local user could switch a kernel
on or off. The opt-out (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1``) exists for people who share a
policy directory on purpose; it is never the default.

"Nobody else" leaves out the group that can write kernelpolicy's own code (:func:`code_group`):
its members can already change every decision, through the code that reads the files, so their
write access to a policy file, the evidence store or a cache adds no one. An install made under
``umask 002`` (Ubuntu's default for people) is group-writable throughout, with the files it
makes; it works as it is, and an install of root's with mode 0644 leaves no such group.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

from kernelpolicy.errors import UntrustedFileError


def owner_ok(uid: int) -> bool:
    """Whether ``uid`` may own what kernelpolicy trusts: root or the user running it."""
    return uid in (0, os.geteuid())


def owner_mode_problem(info: os.stat_result) -> str | None:
    """The rule for one file or directory, from its ``stat``: why it may not be trusted, or None
    (:func:`mode_problem` with the group that can write kernelpolicy's code)."""
    return mode_problem(info, code_group())


def mode_problem(info: os.stat_result, code_gid: int | None) -> str | None:
    """Why a file or directory of this ``stat`` may not be trusted, or None.

    Refused: owned by a user other than root or the current one; writable by others, or by a
    group other than ``code_gid`` (a directory with the sticky bit, like ``/tmp``, may be
    world-writable when root owns it: others cannot replace what is in it).
    """
    mode = stat.S_IMODE(info.st_mode)
    if not owner_ok(info.st_uid):
        return (
            f"owned by uid {info.st_uid} (mode {mode:04o}); expected root or uid "
            f"{os.geteuid()}, the user running kernelpolicy"
        )
    if foreign_write(info, code_gid):
        return (
            f"writable by {'others' if mode & stat.S_IWOTH else 'its group'} "
            f"(mode {mode:04o}, owner uid {info.st_uid}); expected no group or other write "
            f"(chmod go-w)"
        )
    return None


def foreign_write(info: os.stat_result, code_gid: int | None) -> bool:
    """Whether someone besides the owner and the members of ``code_gid`` (the group that can
    write kernelpolicy's code) may write it: others, or another group. A root-owned directory
    with the sticky bit (``/tmp``) is not writable that way: nobody can replace what others
    put in it."""
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode) and mode & stat.S_ISVTX and info.st_uid == 0:
        return False
    group = bool(mode & stat.S_IWGRP) and info.st_gid != code_gid
    return bool(mode & stat.S_IWOTH) or group


def trust_problem(path: str | Path) -> str | None:
    """Why ``path`` (a file or directory, symbolic links followed) may not be trusted, or None.

    The rule (:func:`owner_mode_problem`) applies to the real file that symbolic links lead to
    (as ssh does) and to the directory holding it, since whoever can write that directory can
    swap the file.
    """
    try:
        target = Path(path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return f"{path}: cannot resolve: {getattr(exc, 'strerror', None) or exc}"
    for item in dict.fromkeys((target, target.parent)):
        try:
            info = item.stat()
        except OSError as exc:
            return f"{item}: cannot check owner and mode: {exc.strerror or exc}"
        problem = owner_mode_problem(info)
        if problem is not None:
            return f"{item}: {problem}"
    return None


PACKAGE = Path(__file__).resolve().parent


@functools.cache
def code_group(package: Path = PACKAGE) -> int | None:
    """The group that can write kernelpolicy's code, or None: the package directory and its
    ``__init__.py`` (what every process imports first) both writable by the same group. Read
    once a process (two ``stat`` calls)."""
    try:
        infos = [package.stat(), (package / "__init__.py").stat()]
    except OSError:
        return None
    if all(info.st_mode & stat.S_IWGRP for info in infos) and infos[0].st_gid == infos[1].st_gid:
        return infos[0].st_gid
    return None


def check_trusted(path: str | Path, what: str, *, allow_untrusted: bool = False) -> None:
    """Raise :class:`UntrustedFileError` when ``path`` may not be trusted (see trust_problem).

    Args:
        path: The file or directory.
        what: What it is, for the message ("policy file", "evidence store").
        allow_untrusted: The explicit opt-out (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``).
    """
    if allow_untrusted:
        return
    problem = trust_problem(path)
    if problem is not None:
        raise UntrustedFileError(
            f"refusing {what} {problem} (set KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1 to accept it)"
        )


def private_dir(path: str | Path, what: str) -> Path:
    """Create (or check) a directory only this user can enter: mode 0700, owned by us.

    Raises:
        UntrustedFileError: It exists and belongs to someone else, or is not a directory (a
            symbolic link is refused: it could point anywhere), or it cannot be created,
            inspected or tightened (an OSError, named).
    """
    directory = Path(path)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise UntrustedFileError(f"refusing {what} {directory}: not a directory (a link?)")
        if info.st_uid != os.geteuid():
            raise UntrustedFileError(
                f"refusing {what} {directory}: owned by uid {info.st_uid}, not uid {os.geteuid()}"
            )
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(directory, 0o700)
    except OSError as exc:  # cannot create, inspect or tighten it: say which and why
        raise UntrustedFileError(
            f"cannot prepare {what} {directory}: {exc.strerror or exc}"
        ) from None
    return directory
