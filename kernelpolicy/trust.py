"""Who may change what the engine trusts: ssh's StrictModes, applied to policies and evidence.

A file or directory that decides which kernel runs must be owned by root or by the user running
kernelpolicy, and writable by nobody else; otherwise a second local user could switch a kernel
on or off. Write access for the file's group counts as nobody else's when that group is its
owner's own (a user-private group whose one member is the owner, as Debian's OpenSSH accepts
under StrictModes): with ``umask 002``, Ubuntu's default for people, every checkout is
group-writable. The opt-out (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1``) exists for people who
share a policy directory on purpose; it is never the default.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from kernelpolicy.errors import UntrustedFileError


def owner_ok(uid: int) -> bool:
    """Whether ``uid`` may own what kernelpolicy trusts: root or the user running it."""
    return uid in (0, os.geteuid())


def owner_mode_problem(
    info: os.stat_result, alone: Callable[[int, int], bool] | None = None
) -> str | None:
    """The rule for one file or directory, from its ``stat``: why it may not be trusted, or None.

    Refused: owned by a user other than root or the current one; writable by others, or by a
    group other than one of the owner alone (``alone(gid, uid)``, default
    :func:`owner_only_group`; never the root group, gid 0, which containers hand to arbitrary
    uids that no database lists). A directory with the sticky bit, like ``/tmp``, may be
    world-writable when root owns it: others cannot replace what is in it.
    """
    mode = stat.S_IMODE(info.st_mode)
    if not owner_ok(info.st_uid):
        return (
            f"owned by uid {info.st_uid} (mode {mode:04o}); expected root or uid "
            f"{os.geteuid()}, the user running kernelpolicy"
        )
    sticky = stat.S_ISDIR(info.st_mode) and mode & stat.S_ISVTX and info.st_uid == 0
    if sticky:
        return None
    if mode & stat.S_IWOTH:
        return (
            f"writable by others (mode {mode:04o}, owner uid {info.st_uid}); expected no group "
            f"or other write (chmod go-w)"
        )
    owner_alone = owner_only_group if alone is None else alone
    if mode & stat.S_IWGRP and (info.st_gid == 0 or not owner_alone(info.st_gid, info.st_uid)):
        return (
            f"writable by its group (mode {mode:04o}, owner uid {info.st_uid}, group gid "
            f"{info.st_gid} not the owner's alone); expected no group or other write "
            f"(chmod go-w)"
        )
    return None


def owner_only_group(gid: int, owner: int) -> bool:
    """Whether ``owner`` is the one member of group ``gid``, in the system's user and group
    databases (a user-private group): group write then gives nobody else a way in. A process
    root starts with that gid (a container's ``runAsGroup``) is a member no database shows;
    who can start one can change the file anyway."""
    try:
        group = grp.getgrgid(gid)
        accounts = pwd.getpwall()
    except (KeyError, OSError):  # an unknown group, or a database that cannot be read
        return False
    primary = [account.pw_uid for account in accounts if account.pw_gid == gid]
    names = {account.pw_name: account.pw_uid for account in accounts}
    return sole_member(owner, primary, group.gr_mem, names)


def sole_member(
    owner: int, primary: Iterable[int], listed: Iterable[str], uids: dict[str, int]
) -> bool:
    """The rule of :func:`owner_only_group` on the databases' contents: every account whose
    primary group it is (``primary``, uids) and every name the group lists (``listed``,
    resolved through ``uids``) is ``owner``, and there is at least one. A listed name with no
    account counts as someone else; a group with no member at all (the kind setgid programs
    use) is not the owner's."""
    members = set(primary)
    for name in listed:
        members.add(uids.get(name, -1))
    return members == {owner}


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
