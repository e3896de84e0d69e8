"""Size limits on a CEL expression, checked before the CEL library sees it.

The CEL extension parses and evaluates recursively in native code: a chain of 20,000 ``+`` terms
overflows its stack (SIGSEGV, the whole process dies) and 70,000 nested parentheses make it
panic. So every expression is first measured here by a linear, non-recursive scan of its tokens
(string literals are skipped whole, so brackets and operators inside them do not count) against
``MAX_CEL_SOURCE_CHARS``, ``MAX_CEL_DEPTH`` and ``MAX_CEL_NODES``.

What counts:

- **depth**: open brackets (``(``, ``[``, ``{``) around a point, plus the unary operators
  (``!``, prefix ``-``) applied there; ``!(!(x))`` is 4 deep.
- **nodes**: operands and operators: every token except brackets, commas and colons;
  ``a + b > 0`` is 5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelpolicy.limits import MAX_CEL_DEPTH, MAX_CEL_NODES, MAX_CEL_SOURCE_CHARS

# One alternative per token kind. Strings first (optional r/b prefixes, triple-quoted before
# single-quoted); an unterminated string runs to the end (the CEL parser reports it). Every
# alternative consumes at least one character, so the scan is linear.
_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>(?:[rRbB]{1,2})?(?:
            \"\"\"[\s\S]*?(?:\"\"\"|\Z) | '''[\s\S]*?(?:'''|\Z)
          | "(?:[^"\\\n]|\\.)*(?:"|$) | '(?:[^'\\\n]|\\.)*(?:'|$) ))
    | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[uU]?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>\|\||&&|==|!=|<=|>=|[-!<>+*/%?:.,()\[\]{}])
    | (?P<other>.)
    """,
    re.VERBOSE | re.MULTILINE,
)
_OPEN = frozenset("([{")
_CLOSE = frozenset(")]}")
_NOT_NODES = frozenset("()[]{},:")
_OPERAND_KINDS = frozenset({"string", "number", "ident"})


@dataclass(frozen=True)
class CelSize:
    """What :func:`measure` found: source characters, deepest nesting, operand/operator count."""

    chars: int
    depth: int
    nodes: int


def measure(source: str) -> CelSize:
    """The size of ``source`` by the rules in the module docstring (linear, no recursion)."""
    nodes = deepest = 0
    # Per open bracket: the unary operators pending when it opened (they apply to the group).
    stack: list[int] = []
    enclosing_unary = pending = 0
    after_operand = False  # the last token ended an operand: a following '-' subtracts
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "other"
        if kind == "space":
            continue
        text = match.group()
        if kind == "op" and text in _OPEN:
            stack.append(pending)
            enclosing_unary += pending
            pending = 0
        elif kind == "op" and text in _CLOSE:
            if stack:
                enclosing_unary -= stack.pop()
            pending = 0
        elif kind == "op" and (text == "!" or (text == "-" and not after_operand)):
            pending += 1
        elif kind in _OPERAND_KINDS:
            pending = 0
        if text not in _NOT_NODES:
            nodes += 1
        deepest = max(deepest, len(stack) + enclosing_unary + pending)
        after_operand = kind in _OPERAND_KINDS or (kind == "op" and text in _CLOSE)
    return CelSize(len(source), deepest, nodes)


def cel_limit_problem(source: str) -> str | None:
    """Which limit ``source`` exceeds, in words naming the constant, or None.

    The length is checked first, so a huge text is never scanned.
    """
    if len(source) > MAX_CEL_SOURCE_CHARS:
        return (
            f"CEL expression is {len(source)} characters, over MAX_CEL_SOURCE_CHARS "
            f"({MAX_CEL_SOURCE_CHARS})"
        )
    size = measure(source)
    if size.depth > MAX_CEL_DEPTH:
        return (
            f"CEL expression nests {size.depth} levels deep (parentheses, brackets and unary "
            f"operators), over MAX_CEL_DEPTH ({MAX_CEL_DEPTH})"
        )
    if size.nodes > MAX_CEL_NODES:
        return (
            f"CEL expression has {size.nodes} operands and operators, over MAX_CEL_NODES "
            f"({MAX_CEL_NODES}); split the rule or simplify it"
        )
    return None
