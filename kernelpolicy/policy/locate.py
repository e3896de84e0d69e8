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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

_HEADER = re.compile(r"^\s*(\[\[?)\s*(.*?)\s*(\]\]?)\s*(?:#.*)?$")
_SIMPLE = r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)"""
_KEY = re.compile(rf"^\s*({_SIMPLE}(?:\s*\.\s*{_SIMPLE})*)\s*=")
_PART = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^."'\s]+)\s*(?:\.|$)""")


def _unquote(part: str) -> str:
    return part[1:-1] if part[:1] in "\"'" and len(part) >= 2 else part


def _path(header: str) -> tuple[str, ...] | None:
    """The dotted key of a table header (``features."a.b".candidates``), quotes removed."""
    parts: list[str] = []
    position = 0
    while position < len(header):
        match = _PART.match(header, position)
        if match is None or match.end() == position:
            return None
        parts.append(_unquote(match.group(1)))
        position = match.end()
    return tuple(parts)


@dataclass
class TomlIndex:
    """Where the headers and keys of one TOML text are (1-based lines)."""

    # (is array-of-tables, dotted path) -> header lines, in order
    headers: dict[tuple[bool, tuple[str, ...]], list[int]] = field(default_factory=dict)
    by_last: dict[str, list[int]] = field(default_factory=dict)  # last path part -> lines
    starts: list[int] = field(default_factory=list)  # every header line, in order
    keys: dict[int, dict[str, int]] = field(default_factory=dict)  # section start -> key -> line
    first_key: dict[str, int] = field(default_factory=dict)  # key -> first line anywhere

    @classmethod
    def build(cls, text: str) -> TomlIndex:
        """Index ``text`` in one pass (multi-line strings are not special-cased: a line inside
        one that looks like a header or key can only make a location less precise)."""
        index = cls()
        section = 0
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.lstrip()
            if stripped.startswith("["):
                match = _HEADER.match(line)
                path = _path(match.group(2)) if match else None
                if match and path:
                    array = match.group(1) == "[["
                    index.headers.setdefault((array, path), []).append(number)
                    index.by_last.setdefault(path[-1], []).append(number)
                index.starts.append(number)
                section = number
                continue
            key = _KEY.match(line)
            parts = _path(key.group(1)) if key else None
            if parts:
                # ``key = ...`` and dotted ``key.sub = ...`` both count as ``key``; the dotted
                # one is also found as ``key.sub`` (``engines.vllm = [...]``).
                keys = index.keys.setdefault(section, {})
                keys.setdefault(parts[0], number)
                if len(parts) > 1:
                    keys.setdefault(f"{parts[0]}.{parts[1]}", number)
                index.first_key.setdefault(parts[0], number)
        return index

    def nth(self, array: bool, path: tuple[str, ...], n: int) -> int | None:
        lines = self.headers.get((array, path), [])
        return lines[n] if 0 <= n < len(lines) else None

    def key_in_section(self, start: int, key: str) -> int | None:
        return self.keys.get(start, {}).get(key)

    def sub_header(self, after: int, key: str, n: int) -> int | None:
        """The ``n``-th header after line ``after`` whose last part is ``key``."""
        lines = self.by_last.get(key, [])
        first = bisect.bisect_right(lines, after)
        return lines[first + n] if first + n < len(lines) else None


_RECENT: OrderedDict[int, tuple[str, TomlIndex]] = OrderedDict()
_RECENT_SIZE = 8


def index_of(text: str) -> TomlIndex:
    """The index of ``text``, built once per text object (the loader locates many keys per file).

    Keyed by identity, not value: comparing an equal copy of a 3 MB text on every lookup would
    bring the quadratic cost back. The entry keeps the text alive, so its id is not reused.
    """
    entry = _RECENT.get(id(text))
    if entry is not None and entry[0] is text:
        _RECENT.move_to_end(id(text))
        return entry[1]
    index = TomlIndex.build(text)
    _RECENT[id(text)] = (text, index)
    while len(_RECENT) > _RECENT_SIZE:
        _RECENT.popitem(last=False)
    return index


def locate(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line that best matches ``loc``, or ``None`` if nothing does."""
    index = index_of(text)
    if len(loc) < 2 or loc[0] not in {"features", "gates", "disable"}:
        return index.first_key.get(str(loc[0])) if loc else None
    if loc[0] == "disable":
        return index.nth(True, ("disable",), loc[1] if isinstance(loc[1], int) else 0)
    table, name = str(loc[0]), str(loc[1])
    rest = list(loc[2:])
    if len(rest) >= 2 and rest[0] == "candidates" and isinstance(rest[1], int):
        start = index.nth(True, (table, name, "candidates"), rest[1])
        rest = rest[2:]
    else:
        start = index.nth(False, (table, name), 0)
    if start is None:
        return None
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
