"""Who may change what the engine trusts: ssh's StrictModes, applied to policies and evidence.

A file or directory that decides which kernel runs must be owned by root or by the user running
kernelpolicy, and writable by nobody else; otherwise a second local user could switch a kernel
on or off. The opt-out (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1``) exists for people who share a
policy directory on purpose; it is never the default.

What ships inside kernelpolicy's installation (the bundled pack) is held to the rule of the code
that reads it: a group that can write the package's code can already change every decision, so
its write access to the bundled pack adds no one (:func:`code_group`). An install made under
``umask 002`` (Ubuntu's default for people) is group-writable throughout; it works as it is.
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


def owner_mode_problem(
    info: os.stat_result, code_gid: int | None = None, *, sticky_passes: bool = True
) -> str | None:
    """The rule for one file or directory, from its ``stat``: why it may not be trusted, or None.

    Refused: owned by a user other than root or the current one; writable by group or others
    (a directory with the sticky bit, like ``/tmp``, may be world-writable when root owns it:
    others cannot replace what is in it). ``code_gid``: a group that may write it all the same
    (the group that can write kernelpolicy's code, for what ships with it). ``sticky_passes``
    False: the sticky bit does not help, for a directory where the names matter as well as what
    is in them (a daemon's socket directory: others could take the names beside its socket
    first).
    """
    mode = stat.S_IMODE(info.st_mode)
    if not owner_ok(info.st_uid):
        return (
            f"owned by uid {info.st_uid} (mode {mode:04o}); expected root or uid "
            f"{os.geteuid()}, the user running kernelpolicy"
        )
    rootdir = stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and sticky_passes
    sticky = rootdir and mode & stat.S_ISVTX
    writers = mode & (stat.S_IWGRP | stat.S_IWOTH)
    if code_gid is not None and info.st_gid == code_gid:
        writers &= ~stat.S_IWGRP  # that group can change the code that reads it anyway
    if writers and not sticky:
        return (
            f"writable by {'others' if mode & stat.S_IWOTH else 'its group'} "
            f"(mode {mode:04o}, owner uid {info.st_uid}); expected no group or other write "
            f"({'chmod go-w, or chmod +t as /tmp is' if rootdir else 'chmod go-w'})"
        )
    return None


Seen = dict[tuple[Path, bool], "str | None"]
"""Directories already judged within one pass over many paths (their rule's answer), so that
the files of one policy directory do not stat the same directories above again."""


def trust_problem(
    path: str | Path, *, shipped: bool = False, seen: Seen | None = None
) -> str | None:
    """Why ``path`` (a file or directory, symbolic links followed) may not be trusted, or None.

    The rule (:func:`owner_mode_problem`) applies to the real file that symbolic links lead to
    (as ssh does) and to every directory above it up to ``/`` (as OpenSSH's ``safe_path``
    does), since whoever can write any of them can swap what is below it: rename the directory
    holding the file and put one of their own in its place, between a check and the read. A
    directory above that is also above kernelpolicy's own code is not judged: whoever can
    write it can replace the code that reads the file. ``shipped``: it is part of
    kernelpolicy's installation (the bundled pack), writable by the group that can write the
    code as well (:func:`shipped_group`). ``seen``: what one pass over several paths judged
    already (it lives no longer than that pass).
    """
    return _chain_problem(path, shipped=shipped, own=2, seen=seen)


def ancestors_problem(directory: str | Path) -> str | None:
    """Why another user could swap what is in ``directory`` (resolved), or None: the rule of
    :func:`owner_mode_problem` for it and every directory above it up to ``/`` (a root-owned
    sticky directory such as ``/tmp`` passes: others cannot rename what is in it; a directory
    above kernelpolicy's own code is not judged, as in :func:`trust_problem`)."""
    return _chain_problem(directory, shipped=False, own=1)


MAX_NAMED_ABOVE = 3  # directories above named in one message (a umask 002 tree fails at each)


def _chain_problem(
    given: str | Path, *, shipped: bool, own: int, seen: Seen | None = None
) -> str | None:
    """Why ``given`` (resolved, symbolic links followed) or a directory above it fails the
    rule, or None: the path or its own directory (the first ``own`` of the chain) named alone,
    else every directory above that fails (up to ``MAX_NAMED_ABOVE``), each with its owner and
    mode."""
    try:
        target = Path(given).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return f"{given}: cannot resolve: {getattr(exc, 'strerror', None) or exc}"
    above: list[str] = []
    code = _code_ancestors()
    for depth, item in enumerate((target, *target.parents)):
        if depth >= own and item in code:
            continue  # its writers can replace kernelpolicy's code: no one new
        if depth > 0 and seen is not None and (item, shipped) in seen:
            problem = seen[item, shipped]
        else:
            try:
                info = item.stat()
            except OSError as exc:
                return f"{item}: cannot check owner and mode: {exc.strerror or exc}"
            problem = owner_mode_problem(info, shipped_group(item, info) if shipped else None)
            if depth > 0 and seen is not None:
                seen[item, shipped] = problem
        if problem is not None and depth < own:
            return f"{item}: {problem}"
        if problem is not None:
            above.append(f"{item} is {problem}")
    if not above:
        return None
    named = "; ".join(above[:MAX_NAMED_ABOVE]) + ("; ..." if len(above) > MAX_NAMED_ABOVE else "")
    return (
        f"{given}: a directory above it can be written by another user, who could swap what is "
        f"below it: {named}"
    )


PACKAGE = Path(__file__).resolve().parent


def shipped_group(path: Path, info: os.stat_result) -> int | None:
    """The group that may write ``path``, part of kernelpolicy's installation: the one that can
    write the code (:func:`code_group`), where ``path`` is on the code's filesystem and carries
    no POSIX ACL (with one, the group bits are the ACL's mask and may let in a named user)."""
    code_gid = code_group()
    if code_gid is None or info.st_gid != code_gid or not info.st_mode & stat.S_IWGRP:
        return None
    if info.st_dev != _code_device() or _has_acl(path):
        return None
    return code_gid


@functools.cache
def _code_ancestors() -> frozenset[Path]:
    """The directories above kernelpolicy's package (resolved), read once a process."""
    return frozenset(PACKAGE.parents)


@functools.cache
def _code_device() -> int:
    return PACKAGE.stat().st_dev


def _has_acl(path: Path) -> bool:
    try:
        os.getxattr(path, "system.posix_acl_access")
    except OSError:  # no ACL (ENODATA), or a filesystem without them (ENOTSUP)
        return False
    return True


@functools.cache
def code_group(package: Path = PACKAGE) -> int | None:
    """The group that can write kernelpolicy's code, or None: the package directory and its
    ``__init__.py`` (what every process imports first) both writable by the same group, with no
    POSIX ACL on either (whose mask the group bits would be). Read once a process."""
    try:
        infos = [package.stat(), (package / "__init__.py").stat()]
    except OSError:
        return None
    if _has_acl(package) or _has_acl(package / "__init__.py"):
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
    except OSError as exc:  # cannot create, inspect or tighten it: say which, why and what then
        raise UntrustedFileError(
            f"cannot prepare {what} {directory}: {exc.strerror or exc}; set "
            f"{MOVED_BY.get(what, IN_THE_CACHE)} that uid {os.geteuid()} owns or can create"
        ) from None
    return directory


IN_THE_CACHE = "KERNELPOLICY_CACHE_DIR to a directory"
MOVED_BY = {"socket directory": "KERNELPOLICY_SOCKET to a socket in a directory"}
"""What :func:`private_dir` asks of a user whose directory it cannot make: the setting that puts
it elsewhere, by what it is; anything else it makes is under the cache directory
(:data:`IN_THE_CACHE`: the kernel, hardware, settings, code and pack caches, the evidence
store)."""
