"""A compiled rule's tests of a string variable against literals, each answered by one lookup.

A rule such as ``!(logprobs_mode in ["processed_logits", "processed_logprobs"])`` compiled to
Python needs, on every call, a type guard (``type(logprobs_mode) is str``: a None or a number
must reach CEL, which refuses it) and then the membership test. Where a string variable is read
only by such tests, each test gets a dict from the strings met so far to its answer, and one
lookup of the value both proves it is a string met before and answers the test: the guard and
the test cost what one of them cost (``select()``'s budget case, benchmarks/README.md).

A value not met yet goes through :func:`first_sight`, which refuses anything but a ``str`` (the
call then goes through the cache and CEL, which raise with the details, as a failed guard did)
and remembers the answer, up to ``MAX_STRING_MEMO_ENTRIES`` strings per test: callers choose
the strings, so past that a new one is answered without being kept.

A hit means the value is equal to a string met before (its hash and ``==``), not that it is a
``str``: a ``str`` subclass is answered as the equal string, as CEL answers it, and so is an
object of another type that makes itself equal to one (its own ``__hash__`` and ``__eq__``),
which the guard sent to CEL to be refused. Only code in the caller's process can pass such an
object, and it gets the answer of the string it claims to be.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from kernelpolicy.limits import MAX_STRING_MEMO_ENTRIES

_TESTS = (ast.In, ast.NotIn, ast.Eq, ast.NotEq)
_NEGATED = (ast.NotIn, ast.NotEq)


def first_sight(memo: dict[str, bool], value: object, literals: tuple[str, ...]) -> bool:
    """Whether ``value`` is one of ``literals``, remembered in ``memo`` while it has room.

    Raises:
        TypeError: ``value`` is not a ``str`` (not even a subclass: CEL decides those).
    """
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__}")
    answer = value in literals
    if len(memo) < MAX_STRING_MEMO_ENTRIES:
        memo[value] = answer
    return answer


class StringTests:
    """One feature's tests of its string variables against literals, rewritten to lookups.

    :meth:`rewrite` takes the body's Python; :meth:`prelude` gives the lines that answer each
    test before it (and puts each test's memo in the generated code's scope); :attr:`guarded`
    names the string variables that still need their type guard (read some other way, or not
    at all: a value of the wrong type must still reach CEL).
    """

    def __init__(self, prefix: str, strings: Iterable[str]) -> None:
        self._prefix = prefix
        self._strings = frozenset(strings)
        self._tests: dict[tuple[str, tuple[str, ...]], str] = {}
        self.guarded: set[str] = set(self._strings)

    def rewrite(self, lines: list[str]) -> list[str]:
        """``lines`` (statements) with every test of a string variable read only by tests
        replaced by its answer's local name."""
        tree = ast.parse("\n".join(lines))
        tests = [t for n in ast.walk(tree) if (t := _test(n, self._strings)) is not None]
        memoized = {variable for variable, _ in tests} - self._read_otherwise(tree)
        if not memoized:
            return lines
        self.guarded -= memoized
        tree = _Replace(self, memoized).visit(tree)
        return ast.unparse(ast.fix_missing_locations(tree)).splitlines()

    def prelude(self, scope: dict[str, Any]) -> list[str]:
        """Lines that answer each test into its local, a value not met yet through
        :func:`first_sight`; each test's memo is put in ``scope`` under its name."""
        lines = []
        for (variable, literals), local in self._tests.items():
            memo = f"_m{local[2:]}"
            scope[memo] = {}
            lines += [
                "try:",
                f"    {local} = {memo}[{variable}]",
                "except KeyError:",
                f"    {local} = _first_sight({memo}, {variable}, {literals!r})",
            ]
        return lines

    def local(self, variable: str, literals: tuple[str, ...]) -> str:
        """The local holding whether ``variable`` is one of ``literals``."""
        key = (variable, literals)
        if key not in self._tests:
            self._tests[key] = f"_s{self._prefix}_{len(self._tests)}"
        return self._tests[key]

    def _read_otherwise(self, tree: ast.AST) -> set[str]:
        """The string variables ``tree`` reads other than as the left side of a test."""
        in_tests = {
            id(node.left)  # type: ignore[attr-defined]
            for node in ast.walk(tree)
            if _test(node, self._strings) is not None
        }
        return {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id in self._strings and id(node) not in in_tests
        }


def _test(node: ast.AST, strings: frozenset[str]) -> tuple[str, tuple[str, ...]] | None:
    """``(variable, literals)`` where ``node`` tests one of the ``strings`` variables against
    string literals (``v in (...)``, ``v not in (...)``, ``v == '...'``, ``v != '...'``)."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return None
    if not isinstance(node.ops[0], _TESTS):
        return None
    left, right = node.left, node.comparators[0]
    if not isinstance(left, ast.Name) or left.id not in strings:
        return None
    if isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        literals = _strings_of([right])
    else:
        literals = _strings_of(right.elts) if isinstance(right, (ast.Tuple, ast.List)) else None
    return None if literals is None else (left.id, literals)


def _strings_of(nodes: list[ast.expr]) -> tuple[str, ...] | None:
    """The literals' values, where every one is a string constant."""
    values = [n.value for n in nodes if isinstance(n, ast.Constant) and type(n.value) is str]
    return tuple(values) if len(values) == len(nodes) else None


class _Replace(ast.NodeTransformer):
    """Each test of a memoized variable becomes its answer's local (negated for ``not in`` and
    ``!=``)."""

    def __init__(self, tests: StringTests, memoized: set[str]) -> None:
        self._tests = tests
        self._memoized = frozenset(memoized)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        found = _test(node, self._memoized)
        if found is None:
            return node
        answer = ast.Name(id=self._tests.local(*found), ctx=ast.Load())
        negated = isinstance(node.ops[0], _NEGATED)
        return ast.UnaryOp(op=ast.Not(), operand=answer) if negated else answer
