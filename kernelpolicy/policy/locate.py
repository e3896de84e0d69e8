"""Find the line of a key in a TOML file, for error messages.

tomllib reports positions only for syntax errors; validation errors come with a path such as
``("features", "sampler.greedy", "candidates", 1, "libraries")``. This walks the text for the
table header of that feature (or its n-th ``[[...candidates]]``) and then for the key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"^\s*\[")


def _name_pattern(name: str) -> str:
    escaped = re.escape(name)
    return rf"(?:\"{escaped}\"|'{escaped}'|{escaped})"


def locate(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line that best matches ``loc``, or ``None`` if nothing does."""
    lines = text.splitlines()
    if len(loc) < 2 or loc[0] not in {"features", "gates", "disable"}:
        return _key_line(lines, 0, len(lines), str(loc[0])) if loc else None
    if loc[0] == "disable":
        return _nth_header(
            lines, r"\[\[\s*disable\s*\]\]", loc[1] if isinstance(loc[1], int) else 0
        )
    table, name = str(loc[0]), str(loc[1])
    rest = list(loc[2:])
    if len(rest) >= 2 and rest[0] == "candidates" and isinstance(rest[1], int):
        pattern = rf"\[\[\s*{table}\.{_name_pattern(name)}\.candidates\s*\]\]"
        start = _nth_header(lines, pattern, rest[1])
        rest = rest[2:]
    else:
        start = _nth_header(lines, rf"\[\s*{table}\.{_name_pattern(name)}\s*\]", 0)
    if start is None:
        return None
    index = 0
    while index < len(rest):
        key = rest[index]
        index += 1
        if not isinstance(key, str):
            continue
        following_key = rest[index] if index < len(rest) else None
        found = None
        if isinstance(following_key, str):  # a dotted key: engines.vllm = [...]
            found = _key_line(lines, start, _section_end(lines, start), key, following_key)
        if found is None:
            found = _key_line(lines, start, _section_end(lines, start), key)
        if found is not None:
            return found
        # Not a key of this table: maybe a sub-table such as [[...candidates.known_issues]].
        following = rest[index] if index < len(rest) else None
        nth = following if isinstance(following, int) else 0
        sub = _nth_header(lines[start:], rf"\[\[?[^\]]*\.{_name_pattern(key)}\s*\]\]?", nth)
        if sub is None:
            return start
        start += sub
    return start


def _nth_header(lines: list[str], pattern: str, n: int) -> int | None:
    regex = re.compile(rf"^\s*{pattern}\s*(#.*)?$")
    hits = [i + 1 for i, line in enumerate(lines) if regex.match(line)]
    return hits[n] if n < len(hits) else None


def _section_end(lines: list[str], start: int) -> int:
    """Index of the first header after the header at 1-based line ``start``."""
    for i in range(start, len(lines)):
        if _HEADER.match(lines[i]):
            return i
    return len(lines)


def _key_line(
    lines: list[str], start: int, end: int, key: str, subkey: str | None = None
) -> int | None:
    # ``key =``, or the first ``key.anything =`` (a dotted key), or exactly ``key.subkey =``.
    tail = rf"\s*\.\s*{_name_pattern(subkey)}\s*=" if subkey is not None else r"\s*[.=]"
    regex = re.compile(rf"^\s*{_name_pattern(key)}{tail}")
    for i in range(start, end):
        if regex.match(lines[i]):
            return i + 1
    return None
