"""Find the line of a key in a TOML file, for error messages.

tomllib reports positions only for syntax errors; validation errors come with a path such as
``("features", "sampler.greedy", "candidates", 1, "libraries")``. The text is indexed once (its
table headers and the keys of each section, in one pass over the lines), so each lookup costs a
dictionary access and a bisection, and loading stays linear in the size of the file however many
issues or keys are located.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

_HEADER_LINE = re.compile(r"^[ \t]*(\[\[?)[ \t]*(.*?)[ \t]*(\]\]?)[ \t\r]*(?:#.*)?$", re.M)
_SIMPLE = r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)"""
_KEY = re.compile(rf"^\s*({_SIMPLE}(?:\s*\.\s*{_SIMPLE})*)\s*=")
_PARTS = re.compile(r""""((?:[^"\\]|\\.)*)"|'([^']*)'|([^."'\s]+)""")


def _path(dotted: str) -> tuple[str, ...]:
    """The parts of a dotted key or table header (``features."a.b".candidates``), unquoted."""
    return tuple(a or b or c for a, b, c in _PARTS.findall(dotted))


@dataclass
class TomlIndex:
    """Where the headers and keys of one TOML text are (1-based lines, counted as tomllib does).

    Headers are indexed when built (every load needs them: each feature, gate and candidate
    records its line); keys only on the first key lookup (only a mistake needs them).
    """

    text: str
    # (is array-of-tables, dotted path) -> header lines, in order
    headers: dict[tuple[bool, tuple[str, ...]], list[int]] = field(default_factory=dict)
    by_last: dict[str, list[int]] = field(default_factory=dict)  # last path part -> lines
    _keys: dict[int, dict[str, int]] | None = None  # section start -> key -> line
    _first_key: dict[str, int] = field(default_factory=dict)  # key -> first line anywhere

    @classmethod
    def build(cls, text: str) -> TomlIndex:
        """Index the headers of ``text`` (one regular-expression scan; multi-line strings are
        not special-cased: a line inside one that looks like a header can only make a location
        less precise)."""
        index = cls(text)
        line, position = 1, 0
        for match in _HEADER_LINE.finditer(text):
            line += text.count("\n", position, match.start())
            position = match.start()
            path = _path(match.group(2))
            if path:
                index.headers.setdefault((match.group(1) == "[[", path), []).append(line)
                index.by_last.setdefault(path[-1], []).append(line)
        return index

    def _key_lines(self) -> dict[int, dict[str, int]]:
        if self._keys is not None:
            return self._keys
        self._keys = {}
        section = 0
        for number, line in enumerate(self.text.split("\n"), start=1):
            if line.lstrip().startswith("["):
                section = number
                continue
            key = _KEY.match(line)
            parts = _path(key.group(1)) if key else ()
            if parts:
                # ``key = ...`` and dotted ``key.sub = ...`` both count as ``key``; the dotted
                # one is also found as ``key.sub`` (``engines.vllm = [...]``).
                keys = self._keys.setdefault(section, {})
                keys.setdefault(parts[0], number)
                if len(parts) > 1:
                    keys.setdefault(f"{parts[0]}.{parts[1]}", number)
                self._first_key.setdefault(parts[0], number)
        return self._keys

    def nth(self, array: bool, path: tuple[str, ...], n: int) -> int | None:
        lines = self.headers.get((array, path), [])
        return lines[n] if 0 <= n < len(lines) else None

    def key_in_section(self, start: int, key: str) -> int | None:
        return self._key_lines().get(start, {}).get(key)

    def first_key(self, key: str) -> int | None:
        """The first line that sets ``key`` (or a dotted key starting with it), anywhere."""
        self._key_lines()
        return self._first_key.get(key)

    def sub_header(self, after: int, key: str, n: int) -> int | None:
        """The ``n``-th header after line ``after`` whose last part is ``key``."""
        lines = self.by_last.get(key, [])
        first = bisect.bisect_right(lines, after)
        return lines[first + n] if first + n < len(lines) else None


_RECENT: OrderedDict[int, tuple[str, TomlIndex]] = OrderedDict()
_RECENT_SIZE = 8
_RECENT_LOCK = threading.Lock()  # resolve() and a daemon's reload thread may load at once


def index_of(text: str) -> TomlIndex:
    """The index of ``text``, built once per text object (the loader locates many keys per file).

    Keyed by identity, not value: comparing an equal copy of a 3 MB text on every lookup would
    bring the quadratic cost back. The entry keeps the text alive, so its id is not reused.
    """
    with _RECENT_LOCK:
        entry = _RECENT.get(id(text))
        if entry is not None and entry[0] is text:
            _RECENT.move_to_end(id(text))
            return entry[1]
    index = TomlIndex.build(text)  # outside the lock: building may take a while
    with _RECENT_LOCK:
        _RECENT[id(text)] = (text, index)
        while len(_RECENT) > _RECENT_SIZE:
            _RECENT.popitem(last=False)
    return index


def locate(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line that best matches ``loc``, or ``None`` if nothing does."""
    index = index_of(text)
    if len(loc) < 2 or loc[0] not in {"features", "gates", "disable"}:
        return index.first_key(str(loc[0])) if loc else None
    rest = list(loc[2:])
    if loc[0] == "disable":  # [[disable]] entries: the n-th header, then the key under it
        start = index.nth(True, ("disable",), loc[1] if isinstance(loc[1], int) else 0)
    elif len(rest) >= 2 and rest[0] == "candidates" and isinstance(rest[1], int):
        start = index.nth(True, (str(loc[0]), str(loc[1]), "candidates"), rest[1])
        rest = rest[2:]
    else:
        start = index.nth(False, (str(loc[0]), str(loc[1])), 0)
    if start is None:
        return None
    return _within(index, start, rest)


def _within(index: TomlIndex, start: int, rest: list[str | int]) -> int:
    """The line that sets the key path ``rest`` in the table whose header is on line ``start``,
    looking into its sub-tables (``[[...candidates.known_issues]]``) for a key it does not
    set; else the line of the last header found on the way."""
    position = 0
    while position < len(rest):
        key = rest[position]
        position += 1
        if not isinstance(key, str):
            continue
        following = rest[position] if position < len(rest) else None
        found = None
        if isinstance(following, str):  # a dotted key: engines.vllm = [...]
            found = index.key_in_section(start, f"{key}.{following}")
        if found is None:
            found = index.key_in_section(start, key)
        if found is not None:
            return found
        # Not a key of this table: maybe a sub-table such as [[...candidates.known_issues]].
        sub = index.sub_header(start, key, following if isinstance(following, int) else 0)
        if sub is None:
            return start
        start = sub
    return start
