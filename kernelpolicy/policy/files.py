"""Policy files on disk: which files a set of paths means, whether to trust them, their text.

A directory means its ``*.toml`` files in name order. Before anything is read, every directory
given and every file must pass :func:`kernelpolicy.trust.trust_problem` (owned by root or the
current user, writable by nobody else) unless the caller opts out (``allow_untrusted``,
``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``). Files are read with :mod:`kernelpolicy.safeio`: regular
files only (a FIFO never hangs, ``/dev/zero`` is refused), at most ``MAX_POLICY_FILE_BYTES``,
UTF-8; a set has at most ``MAX_POLICY_FILES`` files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelpolicy.errors import KernelPolicyError, PolicyError, PolicyIssue, UntrustedFileError
from kernelpolicy.limits import MAX_POLICY_FILE_BYTES, MAX_POLICY_FILES
from kernelpolicy.policy.load_boundary import boundary
from kernelpolicy.safeio import read_text_bounded
from kernelpolicy.settings import bundled_policy_dir
from kernelpolicy.trust import Seen, owner_mode_problem, shipped_group, trust_problem


class _Unreadable(KernelPolicyError):
    """A file could not be read (kept inside this module: it becomes a PolicyIssue)."""


def _too_many(count: int) -> PolicyError:
    return PolicyError(
        [
            PolicyIssue(
                "<policies>",
                f"{count} or more policy files, over MAX_POLICY_FILES ({MAX_POLICY_FILES}); "
                "merge files or point at fewer directories",
            )
        ]
    )


def expand_policy_paths(paths: Iterable[str | Path]) -> list[str]:
    """Paths with ``+PATH`` entries resolved: any ``+`` adds to the bundled pack.

    ``["+/etc/kp"]`` means the bundled pack, then ``/etc/kp``; without a ``+`` the paths replace
    the pack.
    """
    entries = [str(path) for path in paths]
    if not any(entry.startswith("+") for entry in entries):
        return entries
    from kernelpolicy.settings import bundled_policy_dir

    return [str(bundled_policy_dir()), *(entry.removeprefix("+") for entry in entries)]


EMPTY_DIRECTORY = "a directory with no *.toml files"
"""What a policy directory that holds no policy file is called, wherever it is named."""


@dataclass(frozen=True)
class PolicyListing:
    """The policy files a set of paths means, and the directories among the paths that hold
    none (an empty ``+/etc/kernelpolicy/policies.d`` from a ConfigMap adds nothing, which is
    fine; ``check`` says so).

    Attributes:
        files: Each policy file once, in load order.
        empty_directories: The directories given that hold no policy file.
        repeated: (path given, the path given before it that leads to the same file or
            directory): ``+policies`` in a source tree, whose ``kernelpolicy/bundled_policies``
            links to ``policies/``, is the bundled pack given twice; it is read once.
    """

    files: list[Path]
    empty_directories: list[Path]
    repeated: list[tuple[Path, Path]] = field(default_factory=list)


def list_policy_paths(paths: Iterable[str | Path]) -> PolicyListing:
    """Expand directories to their ``*.toml`` files (sorted); keep files as given. A file or
    directory met again under another name (its real path, links followed, one met before) is
    listed once, where it was met first: the same file twice would define its features twice.

    A ``+PATH`` entry adds to the bundled pack (see :func:`expand_policy_paths`).

    Raises:
        PolicyError: More than ``MAX_POLICY_FILES`` files, none at all (each empty directory
            named as one, or no path given), or a directory cannot be listed.
    """
    with boundary() as cursor:
        files: list[Path] = []
        empty: list[Path] = []
        repeated: list[tuple[Path, Path]] = []
        given: dict[str, Path] = {}  # real path -> the path given for it first
        read: set[str] = set()  # the real paths of the files listed
        for raw in expand_policy_paths(paths):
            if not raw.strip():  # Path("") is the current directory: never what was meant
                raise PolicyError([PolicyIssue("<policies>", "an empty policy path")])
            path = Path(raw)
            cursor.at(str(path))
            if "\0" in raw:  # realpath would raise ValueError: no such path can exist
                message = "not a usable path (it contains a NUL character)"
                raise PolicyError([PolicyIssue(repr(raw), message)])
            real = os.path.realpath(path)
            if real in given:
                repeated.append((path, given[real]))
                continue
            given[real] = path
            if _is_dir(path):
                found = _toml_files(path, MAX_POLICY_FILES + 1 - len(files))
                files.extend(_unread(found, read))
                if not found:
                    empty.append(path)
            else:
                files.extend(_unread([path], read))
            if len(files) > MAX_POLICY_FILES:
                raise _too_many(len(files))
        if not files:  # every path given is a directory, and none holds a policy file
            message = f"{EMPTY_DIRECTORY}; expected policy files there"
            issues = [PolicyIssue(str(directory), message) for directory in empty]
            raise PolicyError(issues or [PolicyIssue("<policies>", "no policy paths given")])
        return PolicyListing(files, empty, repeated)


def _unread(found: list[Path], read: set[str]) -> list[Path]:
    """The files of ``found`` whose real path is not in ``read`` (a file given, then its
    directory), adding theirs to it."""
    fresh = []
    for path in found:
        real = os.path.realpath(path)
        if real not in read:
            read.add(real)
            fresh.append(path)
    return fresh


def policy_files(paths: Iterable[str | Path]) -> list[Path]:
    """The policy files under ``paths`` (:func:`list_policy_paths`).

    Raises:
        PolicyError: As :func:`list_policy_paths` does.
    """
    return list_policy_paths(paths).files


def policy_stamp(paths: Iterable[str | Path]) -> tuple[object, ...]:
    """What changes when a policy file under ``paths`` is added, removed, edited or replaced
    (a Kubernetes ConfigMap's swap of its ``..data`` link included): each file's path and the
    identity, size and modification time of what it leads to. Never raises: a listing that
    fails is part of the stamp (the next load says why)."""
    try:
        files = policy_files(paths)
    except PolicyError as exc:
        return ("unlisted", str(exc))
    stamp: list[object] = []
    for file in files:
        try:
            info = file.stat()
        except OSError as exc:
            stamp.append((str(file), exc.errno))
            continue
        stamp.append((str(file), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamp)


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a directory (links followed); one this user may not look at is an
    error naming it (``Path.is_dir`` raises PermissionError there, which reached ``check`` as
    "cannot be loaded: PermissionError")."""
    try:
        return path.is_dir()
    except OSError as exc:
        issue = PolicyIssue(
            str(path), f"cannot be read: {exc.strerror or exc}; expected a policy file or a "
            "directory of *.toml files this user can read",
        )  # fmt: skip
        raise PolicyError([issue]) from None


def _toml_files(directory: Path, room: int) -> list[Path]:
    found: list[Path] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".toml") and entry.is_file():
                    found.append(Path(directory, entry.name))
                    if len(found) >= room:  # over the limit already: stop listing
                        break
    except OSError as exc:
        issue = PolicyIssue(str(directory), f"cannot list directory: {exc.strerror or exc}")
        raise PolicyError([issue]) from None
    return sorted(found, key=lambda p: p.name)


def read_policy_sources(
    paths: Iterable[str | Path], *, allow_untrusted: bool = False
) -> list[tuple[str, str]]:
    """(file name, text) of every policy file under ``paths``.

    Args:
        paths: Files and directories.
        allow_untrusted: Accept files and directories that another user owns or can write
            (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``); never the default.

    Raises:
        UntrustedFileError: A directory or file is owned or writable by another user; the one
            line names the file, its owner and its mode.
        PolicyError: A file is missing, unreadable, not a regular file, too large or not UTF-8,
            there are too many files, or there is no file at all.
    """
    with boundary():
        given = expand_policy_paths(paths)
        files = policy_files(given)  # refuses an empty path before Path("") means "."
        check_policy_trust(given, files, allow_untrusted=allow_untrusted)
    return read_listed_sources(files, trusted=not allow_untrusted)


def read_listed_sources(files: Sequence[Path], *, trusted: bool = True) -> list[tuple[str, str]]:
    """(file name, text) of ``files``, already listed by :func:`policy_files` and checked by
    :func:`check_policy_trust` (as :func:`read_policy_sources` does before it calls this).

    ``trusted`` (unless the caller opted out): each file opened is checked again, on the very
    file read, so that one put in its place after the path was checked is refused too.

    Raises:
        PolicyError: A file is missing, unreadable, not a regular file, too large or not UTF-8,
            or there is no file at all.
        UntrustedFileError: The file opened is owned or writable by another user.
    """
    with boundary() as cursor:
        if not files:
            raise PolicyError([PolicyIssue("<policies>", "no policy files found")])
        issues: list[PolicyIssue] = []
        sources = []
        for path in files:
            cursor.at(str(path))
            text = _read(path, issues, _opened_check(path) if trusted else None)
            if text is not None:
                sources.append((str(path), text))
        if issues:
            raise PolicyError(issues)
        return sources


def check_policy_trust(
    paths: Iterable[str | Path], files: Iterable[Path], *, allow_untrusted: bool = False
) -> None:
    """Check every directory among ``paths`` and every existing file among ``files``.

    Raises:
        UntrustedFileError: Some are owned or writable by another user: one line for one, else
            a line for each (at most ``MAX_UNTRUSTED_SHOWN``), so that one fix covers them all
            (a missing file is left to the reader, which reports it).
    """
    if allow_untrusted:
        return
    problems: dict[str, str] = {}  # problem -> what it is about, in the order found
    seen: Seen = {}  # the directories above, judged once for every path of this pass
    with boundary() as cursor:
        for path in map(Path, expand_policy_paths(paths)):
            cursor.at(str(path))
            if path.is_dir():
                _note(problems, "policy directory", path, seen)
        for file in files:
            cursor.at(str(file))
            if file.exists():
                _note(problems, "policy file", file, seen)
    opt_out = "set KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1 to accept"
    if len(problems) == 1:
        ((problem, what),) = problems.items()
        raise UntrustedFileError(
            f"refusing {what} {problem} ({opt_out} it)", [_issue(problem, what, opt_out)]
        )
    if problems:
        shown = list(problems.items())[:MAX_UNTRUSTED_SHOWN]
        lines = [f"refusing {len(problems)} policy paths another user could change ({opt_out})"]
        lines += [f"  {what} {problem}" for problem, what in shown]
        if len(problems) > len(shown):
            lines.append(f"  and {len(problems) - len(shown)} more")
        issues = [_issue(problem, what, opt_out) for problem, what in problems.items()]
        raise UntrustedFileError("\n".join(lines), issues)


def _issue(problem: str, what: str, opt_out: str) -> PolicyIssue:
    """``PATH: why`` as an issue located at the path (``kernelpolicy check``'s lines)."""
    path, _, why = problem.partition(": ")
    return PolicyIssue(path, f"refusing this {what}: {why} ({opt_out} it)")


MAX_UNTRUSTED_SHOWN = 10
"""Untrusted policy paths named in one error; the rest are counted."""


def _note(problems: dict[str, str], what: str, path: Path, seen: Seen) -> None:
    """Add why ``path`` may not be trusted, if it may not (a directory's problem is named once,
    though each file in it reports it too). The bundled pack is held to the rule of the code
    that ships with it (:func:`kernelpolicy.trust.code_group`)."""
    problem = trust_problem(path, seen=seen)
    if problem is not None and _bundled(path):  # (a resolve() a path: only where refused)
        problem = trust_problem(path, shipped=True, seen=seen)
    if problem is not None:
        problems.setdefault(problem, _what_failed(problem, what, path))


def _what_failed(problem: str, what: str, path: Path) -> str:
    """What ``problem`` (about ``path``, a ``what``) is about: ``path`` itself; a policy
    file's own directory, named as the policy directory it is (the one wording of
    ``explain``'s error and ``check``'s issue, both made from this); or a directory further up,
    named as one above the policies."""
    named = Path(problem.partition(": ")[0])
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a loop of links (trust_problem's message says why)
        return what
    if named in (path, real):
        return what
    if what == "policy file" and named == real.parent:
        return "policy directory"
    return "directory above the policies" if named in real.parents else what


def _bundled(path: Path) -> bool:
    """Whether ``path`` is the bundled pack or in it (symbolic links followed)."""
    pack = bundled_policy_dir().resolve()
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a loop of links: not the pack (trust_problem says why)
        return False
    return real == pack or pack in real.parents


def _opened_check(path: Path) -> Callable[[os.stat_result], None]:
    """The trust rule for the file ``path`` names, as opened (see read_listed_sources)."""

    def check(info: os.stat_result) -> None:
        problem = owner_mode_problem(info)
        if problem is not None and _bundled(path):
            problem = owner_mode_problem(info, shipped_group(path, info))
        if problem is not None:
            raise UntrustedFileError(
                f"refusing policy file {path} as opened: {problem} (set "
                "KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1 to accept it)"
            )

    return check


def _read(
    path: Path, issues: list[PolicyIssue], opened: Callable[[os.stat_result], None] | None
) -> str | None:
    try:
        return read_text_bounded(
            path, limit=MAX_POLICY_FILE_BYTES, limit_name="MAX_POLICY_FILE_BYTES",
            fail=_Unreadable, opened=opened,
        )  # fmt: skip
    except _Unreadable as exc:
        message = str(exc).removeprefix(f"{path}: ")
        if message == "no such file":
            message = (
                "no such policy file or directory; expected a policy file or a directory of "
                "*.toml files"
            )
        issues.append(PolicyIssue(str(path), message))
        return None
