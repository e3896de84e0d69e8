"""Text that stays on its line: the pieces every output format's encoder is built from.

kernelpolicy writes shell, dotenv, YAML, JSON and Node Feature Discovery files whose strings
may come from a platform snapshot (another machine's), a policy file or the command line.
Each format has one encoder (:mod:`kernelpolicy.bridge.formats`, :mod:`kernelpolicy.labels`);
what they share is here:

- :func:`escaped`: free text (a comment, an error message) with every character that is not
  printable written as its Python escape (``\\n``, ``\\x00``, ``\\u2028``), so it cannot end
  its line in any reader (a shell, python-dotenv, YAML, Go's line scanner).
- :func:`escaped_lines`: the same, line breaks kept.
- :func:`one_line`, :func:`some_lines`: text from elsewhere (a daemon's answer) cut and escaped
  for a terminal, so that no escape sequence in it can move the cursor or rewrite the screen.
- :func:`control_character`: the first character a platform string must not hold.
- :func:`yaml_quoted`: a YAML double-quoted scalar that escapes all but printable ASCII.
- :class:`EncodingError`: a value a format cannot carry exactly is refused, never bent.
"""

from __future__ import annotations

import unicodedata

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import SHOWN_ERROR_CHARS, shown

__all__ = [
    "EncodingError",
    "control_character",
    "described",
    "escaped",
    "escaped_lines",
    "one_line",
    "some_lines",
    "yaml_quoted",
]

# Control (C0, DEL, C1), format (bidi overrides, zero-width), surrogate (text that was not
# UTF-8), and the line and paragraph separators YAML and str.splitlines() break lines at.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_YAML_ESCAPES = {'"': '\\"', "\\": "\\\\"}


class EncodingError(KernelPolicyError):
    """A name or value an output format cannot carry exactly (a NUL for a shell, a ``${...}``
    for python-dotenv): refused with what and why, never written altered."""


def escaped(text: str) -> str:
    """``text`` with each character that is not printable (a space is) as its Python escape.

    The result holds no line break of any reader and no control character, so it can go
    into a comment or a one-line message; backslashes are kept as they are (it is for people
    to read, not to be decoded).
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def escaped_lines(text: str) -> str:
    """``text`` with its line breaks (``\\n``) kept and every other character that is not
    printable :func:`escaped`: a multi-line text for a terminal (an error listing its issues,
    explain's table) in which an escape sequence is shown, never sent."""
    return "\n".join(escaped(line) for line in text.split("\n"))


def one_line(text: str, limit: int = SHOWN_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters (marked when cut) and :func:`escaped`: one line
    holding no control character, safe to print to a terminal whoever wrote it (``\\x1b[2J``
    is shown as those characters, never sent as an escape)."""
    return escaped(shown(text, limit))


SHOWN_LINES = 20
"""How many lines of a multi-line message from elsewhere :func:`some_lines` shows."""


def some_lines(text: str, lines: int = SHOWN_LINES, limit: int = SHOWN_ERROR_CHARS) -> str:
    """The first ``lines`` lines of ``text`` (split at ``\\n`` only), each :func:`one_line`,
    and how many more there were: a multi-line message (a policy error lists its issues a line
    each) kept readable, bounded and safe to print to a terminal."""
    parts = text.split("\n", lines)  # at most lines + 1: the rest, uncut, is only counted
    shown_parts = [one_line(part, limit) for part in parts[:lines]]
    if len(parts) > lines:
        more = parts[lines].count("\n") + 1
        shown_parts.append(f"...(and {more} more line{'s' if more > 1 else ''})")
    return "\n".join(shown_parts)


def described(text: str, limit: int = 80) -> str:
    """``text`` quoted, escaped and cut for an error message (always one line)."""
    return f"'{one_line(text, limit)}'"


def control_character(text: str) -> str | None:
    """The first control, format, surrogate or line-separator character of ``text``, as
    ``U+000A``, or ``None`` where there is none."""
    if text.isprintable():  # the common case: nothing to look at character by character
        return None
    for char in text:
        if unicodedata.category(char) in _CONTROL_CATEGORIES:
            return f"U+{ord(char):04X}"
    return None


def yaml_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that reads back exactly (YAML 1.1 and 1.2).

    Printable ASCII stays; every other character is a ``\\x``, ``\\u`` or ``\\U`` escape, so
    the scalar is one line of ASCII, and a name such as ``ON`` or ``NO`` stays a string.
    """
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _YAML_ESCAPES:
            out.append(_YAML_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
