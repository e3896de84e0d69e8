"""Bounded reading and parsing of files and text that cross a boundary.

Every reader here checks the input's kind, size and nesting depth before a third-party parser
(json, tomllib) sees it, and turns every failure into the caller's error class, so no
``UnicodeDecodeError``, ``RecursionError``, ``MemoryError`` or hang on a FIFO reaches a user.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_NESTING_DEPTH, shown

Fail = Callable[[str], KernelPolicyError]
"""Builds the surface's own error from a message (``PlatformFileError``, ``SettingsError``...)."""


def _raise(fail: Fail, message: str) -> NoReturn:
    raise fail(message) from None


def read_bytes_bounded(
    path: str | Path,
    *,
    limit: int,
    limit_name: str,
    fail: Fail,
    opened: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The contents of a regular file of at most ``limit`` bytes.

    The file is opened non-blocking, so a FIFO or a device never hangs the reader; anything but
    a regular file (``/dev/zero``, a FIFO, a directory, a socket) is refused before reading.

    Args:
        path: The file (symbolic links are followed: Kubernetes mounts ConfigMaps through them).
        limit: The most bytes accepted.
        limit_name: The constant in :mod:`kernelpolicy.limits` that ``limit`` comes from.
        fail: Builds the error to raise.
        opened: Called with the ``stat`` of the file opened, before anything is read (it may
            raise: a trust check of the very file read, which a path check before cannot be).

    Raises:
        KernelPolicyError: Whatever ``fail`` builds, naming the file and what was wrong.
    """
    source = str(path)
    fd = _open_nonblocking(source, fail)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _raise(fail, f"{source}: not a regular file ({_kind(info.st_mode)}); expected a file")
        if info.st_size > limit:
            _raise(fail, f"{source}: {info.st_size} bytes is over {limit_name} ({limit} bytes)")
        if opened is not None:
            opened(info)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # the file grew while being read
                _raise(fail, f"{source}: more than {limit_name} ({limit} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            _raise(fail, f"{source}: is a directory; expected a file")
        _raise(fail, f"{source}: cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)


def _open_nonblocking(source: str, fail: Fail) -> int:
    """A read-only descriptor of ``source`` (non-blocking: a FIFO never hangs the open), or
    ``fail``'s error saying why it cannot be opened."""
    try:
        return os.open(source, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        _raise(fail, f"{source}: no such file")
    except OSError as exc:
        _raise(fail, f"{source}: cannot open: {exc.strerror or exc}")
    except ValueError:  # a NUL character: no such path can exist
        _raise(fail, f"{source!r}: not a usable path (it contains a NUL character)")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def decode_utf8(data: bytes, source: str, fail: Fail) -> str:
    """``data`` as UTF-8, or an error naming the first bad byte's offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        _raise(fail, f"{source}: not UTF-8 (byte {exc.start}: {exc.reason}); expected UTF-8 text")


def read_text_bounded(
    path: str | Path,
    *,
    limit: int,
    limit_name: str,
    fail: Fail,
    opened: Callable[[os.stat_result], None] | None = None,
) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes (see :func:`read_bytes_bounded`)."""
    data = read_bytes_bounded(path, limit=limit, limit_name=limit_name, fail=fail, opened=opened)
    return decode_utf8(data, str(path), fail)


# Brackets outside strings and comments. Strings are matched whole so that their brackets do not
# count; the patterns cover JSON strings and TOML's four string kinds and comments.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)
_TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\[\s\S])*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?'
    r"|#[^\n]*|[\[\]{}]"
)
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


def nesting_depth(text: str, *, toml: bool = False, stop_above: int | None = None) -> int:
    """The deepest bracket nesting of a JSON (or TOML) text, strings and comments excluded.

    Linear in the text, with no recursion; unbalanced text is measured as far as it goes (the
    parser reports the syntax error). With ``stop_above``, the scan ends as soon as the depth
    passes it (a megabyte of ``[`` is refused after ``stop_above + 1`` of them, not after a
    scan of the whole text) and that depth is returned.
    """
    depth = deepest = 0
    for match in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        token = match.group()
        if token in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif token in _CLOSE:
            depth = max(depth - 1, 0)
    return deepest


# A TOML key's structure outside strings and comments: brackets, dots, '=', ',' and line ends.
_TOML_KEY_TOKENS = re.compile(_TOML_TOKENS.pattern.replace(r"|[\[\]{}]", r"|[\[\]{}.=,\n]"))


def dotted_key_parts(text: str, *, stop_above: int | None = None) -> int:
    """The most parts of one dotted TOML key (``a.b.c = 1``, ``[a.b.c]``, ``{a.b = 1}``): each
    part is a level of nesting, which tomllib builds in time quadratic in their number (40,000
    parts: 45 s), so they are counted before it parses. Linear, strings and comments excluded;
    with ``stop_above``, the scan ends once a key passes it. A value's dots (``1.5``) do not
    count: a key ends at its ``=``."""
    containers: list[str] = []  # "H" a table header, "[" an array, "{" an inline table
    in_key, parts, most = True, 1, 0
    for match in _TOML_KEY_TOKENS.finditer(text):
        token = match.group()
        if token == "." and (in_key or containers[-1:] == ["H"]):
            parts += 1
            most = max(most, parts)
            if stop_above is not None and most > stop_above:
                break
        elif token == "\n" and not containers:
            in_key, parts = True, 1
        elif token == "=":
            in_key = False
        elif token == "[":
            header = (in_key and not containers) or containers[-1:] == ["H"]
            containers.append("H" if header else "[")
            in_key, parts = False, 1
        elif token == "{":
            containers.append("{")
            in_key, parts = True, 1
        elif token == "," and containers[-1:] == ["{"]:
            in_key, parts = True, 1
        elif token in _CLOSE and containers:
            containers.pop()
    return max(most, 1)


def value_depth(value: object) -> int:
    """The nesting depth of parsed dicts and lists (1 for a flat one), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(
    text: str, source: str, fail: Fail, *, toml: bool = False, limit: int = MAX_NESTING_DEPTH
) -> None:
    """Raise when ``text`` nests deeper than ``limit`` (``MAX_NESTING_DEPTH``)."""
    if nesting_depth(text, toml=toml, stop_above=limit) > limit:
        _raise(fail, f"{source}: nested more than {limit} levels deep, over MAX_NESTING_DEPTH")


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, source: str, fail: Fail, *, limit: int = MAX_NESTING_DEPTH) -> Any:
    """Strict JSON (no NaN or Infinity) nested at most ``limit`` deep.

    Raises:
        KernelPolicyError: Whatever ``fail`` builds, with the line and column of a syntax error.
    """
    check_depth(text, source, fail, limit=limit)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        _raise(fail, f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})")
    except (ValueError, RecursionError, MemoryError) as exc:
        # ValueError: NaN/Infinity, or an integer over Python's 4,300-digit conversion limit.
        _raise(fail, f"{source}: not acceptable JSON ({_short(exc)})")


def parse_toml(text: str, source: str, fail: Fail, *, limit: int = MAX_NESTING_DEPTH) -> Any:
    """TOML nested at most ``limit`` deep (brackets and dotted keys alike).

    ``tomllib.TOMLDecodeError`` is left to the caller, which knows how to locate it.
    """
    check_depth(text, source, fail, toml=True, limit=limit)
    if dotted_key_parts(text, stop_above=limit) > limit:
        _raise(fail, f"{source}: a dotted key of more than {limit} parts, over MAX_NESTING_DEPTH")
    try:
        import tomllib  # here: 7 ms a worker that reads only JSON need not pay

        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:
        _raise(fail, f"{source}: not acceptable TOML ({_short(exc)})")
    depth = value_depth(data)
    if depth > limit:
        _raise(fail, f"{source}: nested {depth} levels deep, over MAX_NESTING_DEPTH ({limit})")
    return data


def _short(exc: BaseException) -> str:
    return shown(str(exc) or type(exc).__name__, 200)


def temp_path(path: Path) -> Path:
    """The names :func:`write_atomic` writes to before renaming onto ``path``, as a pattern
    (for messages): a dot file beside it (tools that read a directory, such as nfd-worker, skip
    dot files), ``.{name}.`` and random characters."""
    return path.with_name(f".{path.name}.*")


def write_atomic(path: Path, data: bytes, mode: int, *, sync: bool = True) -> os.stat_result:
    """Replace ``path`` with ``data``, whole or not at all, following no symbolic link; returns
    the written file's status (what was written, whatever takes ``path`` later).

    The data goes to a new temporary file of an unpredictable name (``tempfile.mkstemp``:
    ``O_EXCL | O_NOFOLLOW``, 0600, so nothing planted there is written through, and nothing
    planted at a name guessed ahead, in a sticky ``/tmp`` say, can stop the write), is synced,
    given ``mode`` and renamed onto ``path`` (a rename replaces a link at ``path``, never
    follows it); the directory is synced so that a crash right after cannot bring the old file
    back. ``sync=False`` leaves both syncs out (counters written from a serving path, where a
    lost update costs nothing).

    Raises:
        OSError: Whatever failed, with the temporary file removed; callers name the file.
    """
    import tempfile  # here: only writers pay for it

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)  # exactly ``mode``, whatever the umask
            if sync:
                os.fsync(handle.fileno())
            written = os.fstat(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = tmp  # a failed write or sync names the file it was writing
        raise
    if sync:
        directory = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return written


def keep_newest(directory: Path, count: int, suffix: str = ".json") -> None:
    """Remove all but the newest ``count`` entries (``*<suffix>``) of a cache ``directory`` (by
    modification time, never following a link; a file that cannot be read or removed is left)."""
    entries = []
    with os.scandir(directory) as found:
        for item in found:
            if item.name.endswith(suffix) and not item.name.startswith("."):
                with contextlib.suppress(OSError):
                    entries.append((item.stat(follow_symlinks=False).st_mtime_ns, item.path))
    for _, stale in sorted(entries, reverse=True)[count:]:
        with contextlib.suppress(OSError):
            os.unlink(stale)


def store_cache_bytes(
    path: Path, data: bytes, *, limit: int, keep: int, what: str, suffix: str = ".json"
) -> None:
    """Write a cache file of ours: ``data`` as ``path`` (0600, atomically) in a private 0700
    directory (:func:`kernelpolicy.trust.private_dir`, ``what`` naming it), then keep the newest
    ``keep`` files of its kind (:func:`keep_newest`). Data over ``limit`` is not stored. Never
    raises: a cache that cannot be written is no cache. Read back by
    :func:`read_trusted_cache_bytes`."""
    from kernelpolicy.trust import ancestors_problem, private_dir

    if len(data) > limit:
        return
    try:
        private_dir(path.parent, what)
        if ancestors_problem(path.parent) is not None:
            return  # another user could swap the directory: prune and write nothing there
        write_atomic(path, data, 0o600)
        keep_newest(path.parent, keep, suffix)
    except (OSError, KernelPolicyError):
        return


def read_trusted_cache_bytes(
    path: Path, *, limit: int, limit_name: str, links: bool = False
) -> bytes | None:
    """The bytes of a cache file of ours: where it and every directory above it may be trusted
    (:func:`kernelpolicy.trust.trust_problem`), and the file opened, checked again on its
    descriptor, is a regular file within ``limit`` (not a link unless ``links``); None
    otherwise. Never raises: a cache is never authoritative."""
    from kernelpolicy.trust import owner_mode_problem, trust_problem

    def still_trusted(info: os.stat_result) -> None:
        problem = owner_mode_problem(info)
        if problem is not None:  # swapped between the path's check and the open
            raise KernelPolicyError(f"{path}: {problem}")

    try:
        if not os.path.lexists(path) or (not links and path.is_symlink()):
            return None
        if trust_problem(path) is not None:
            return None
        return read_bytes_bounded(
            path, limit=limit, limit_name=limit_name, fail=KernelPolicyError, opened=still_trusted
        )
    except Exception:  # unreadable, too large, gone meanwhile: a miss
        return None


def read_cache_entry(
    path: Path, *, key: str, version: int, limit: int, limit_name: str, links: bool
) -> dict[str, Any] | None:
    """A cache entry of ours: the JSON object at ``path`` naming ``format`` ``version`` and
    ``key``, where it and its directory may be trusted (:func:`kernelpolicy.trust.trust_problem`)
    and it is a regular file within ``limit`` (not a link unless ``links``); None otherwise.
    Never raises: a cache is never authoritative, whatever is wrong with it is a miss."""
    data = read_trusted_cache_bytes(path, limit=limit, limit_name=limit_name, links=links)
    if data is None:
        return None
    try:
        # Our own file (trusted) and size-bounded: no depth pre-scan (it would cost as much as
        # the parse); a RecursionError is a miss like any other failure.
        entry = json.loads(data)
    except Exception:  # truncated, too deep: a miss
        return None
    if not isinstance(entry, dict) or entry.get("format") != version or entry.get("key") != key:
        return None
    return entry
