"""Compile a CEL expression of the common subset to an equivalent Python expression.

The hot path (``Resolution.select``) evaluates per-call conditions millions of times; a Python
expression costs what the same rule written by hand costs. CEL stays the reference: a
translation is used only after it agreed with the CEL program on a grid of sample contexts
(``verify``), and any exception on the fast path falls back to CEL.

Supported: literals (int, double, string, bool, null, lists), variables, ``! && || == != < <= >
>= + - * / % in``, ``a ? b : c``, parentheses and ``dtype_size(x)``. Anything else raises
:class:`Untranslatable` and the caller keeps evaluating through CEL.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

from kernelpolicy.policy.celscan import cel_limit_problem

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<double>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
      | (?P<int>\d+)(?![uU\w.])
      | (?P<string>"(?:[^"\\\n]|\\["\\n])*"|'(?:[^'\\\n]|\\['\\n])*')
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>\|\||&&|==|!=|<=|>=|[!<>+\-*/%?:()\[\],])
    )""",
    re.VERBOSE,
)
_RELATIONS = {"==", "!=", "<", "<=", ">", ">=", "in"}


class Untranslatable(ValueError):
    """The expression uses CEL outside the subset this module translates."""


def _cel_div(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        if b == 0:
            raise ZeroDivisionError("division by zero")
        quotient = abs(a) // abs(b)  # CEL truncates toward zero
        return quotient if (a >= 0) == (b >= 0) else -quotient
    return a / b


def _cel_mod(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return a - b * _cel_div(a, b)
    raise TypeError("CEL defines % for integers only")


HELPERS: dict[str, Any] = {"_cel_div": _cel_div, "_cel_mod": _cel_mod}


def tokens(source: str) -> list[tuple[str, str]]:
    """``source``'s tokens as (kind, text), the kind one of ``double``, ``int``, ``string``,
    ``ident`` and ``op``: what the parser here reads, and what :mod:`.cel` names the operands
    of a type error from.

    Raises:
        Untranslatable: where a token of the common subset cannot be read.
    """
    found, position = [], 0
    source = source.rstrip()
    while position < len(source):
        match = _TOKEN.match(source, position)
        if match is None or match.end() == position:
            raise Untranslatable(f"cannot read {source[position : position + 10]!r}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


class _Parser:
    """Recursive descent over CEL's precedence levels, emitting Python source."""

    def __init__(self, source: str, static: Mapping[str, object], variables: set[str]) -> None:
        self.tokens = tokens(source)
        self.index = 0
        self.static = static
        self.variables = variables

    def parse(self) -> str:
        expression = self.conditional()
        if self.index != len(self.tokens):
            raise Untranslatable(f"unexpected {self.tokens[self.index][1]!r}")
        return expression

    def peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.index >= len(self.tokens):
            raise Untranslatable("unexpected end of expression")
        token = self.tokens[self.index]
        if expected is not None and token[1] != expected:
            raise Untranslatable(f"expected {expected!r}, found {token[1]!r}")
        self.index += 1
        return token

    def conditional(self) -> str:
        # ``a ? b : c ? d : e`` nests to the right: read it in a loop and emit Python's own
        # right-nesting conditional, flat (``b if a else d if c else e``), not one paren per arm.
        arms: list[tuple[str, str]] = []
        condition = self.binary_or()
        while self.peek() == "?":
            self.take("?")
            then = self.binary_or()
            self.take(":")
            arms.append((condition, then))
            condition = self.binary_or()
        if not arms:
            return condition
        return "(" + "".join(f"{then} if {cond} else " for cond, then in arms) + condition + ")"

    def binary_or(self) -> str:
        parts = [self.binary_and()]
        while self.peek() == "||":
            self.take()
            parts.append(self.binary_and())
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def binary_and(self) -> str:
        parts = [self.relation()]
        while self.peek() == "&&":
            self.take()
            parts.append(self.relation())
        return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"

    def relation(self) -> str:
        # CEL relations are left-associative ((a < b) == c); Python would chain them
        # (a < b == c), so each keeps its parentheses.
        left = self.addition()
        while self.peek() in _RELATIONS:
            op = self.take()[1]
            left = f"({left} {op} {self.addition()})"
        return left

    def addition(self) -> str:
        # A chain of + and - is left-associative in both languages: one pair of parentheses
        # for the whole chain, so 200 terms do not nest 200 deep.
        parts = [self.multiplication()]
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            parts.append(f"{op} {self.multiplication()}")
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"

    def multiplication(self) -> str:
        left = self.unary()
        products: list[str] = []
        while self.peek() in ("*", "/", "%"):
            op = self.take()[1]
            right = self.unary()
            if op == "*":
                products.append(right)
                continue
            if products:  # close the run of products before a division
                left = "(" + " * ".join([left, *products]) + ")"
                products = []
            helper = "_cel_div" if op == "/" else "_cel_mod"
            left = f"{helper}({left}, {right})"
        return "(" + " * ".join([left, *products]) + ")" if products else left

    def unary(self) -> str:
        # Prefix operators are read in a loop; a run of the same one collapses (!!x is x for
        # the booleans CEL allows there; the grid in ``verify`` holds either way).
        ops: list[str] = []
        while self.peek() in ("!", "-"):
            ops.append(self.take()[1])
        operand = self.primary()
        while ops:
            op = ops.pop()
            run = 1
            while ops and ops[-1] == op:
                ops.pop()
                run += 1
            if op == "!":
                operand = f"(not {operand})" if run % 2 else f"(not (not {operand}))"
            else:
                operand = f"(-{operand})" if run % 2 else f"(-(-{operand}))"
        return operand

    def primary(self) -> str:
        kind, text = self.take()
        if kind == "int":
            return text
        if kind == "double":
            return repr(float(text))
        if kind == "string":
            return repr(ast.literal_eval(text))
        if kind == "op" and text == "(":
            inner = self.conditional()
            self.take(")")
            return f"({inner})"
        if kind == "op" and text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.conditional())
                if self.peek() == ",":
                    self.take()
            self.take("]")
            return "(" + "".join(f"{item}, " for item in items) + ")"
        if kind == "ident":
            return self.identifier(text)
        raise Untranslatable(f"unexpected {text!r}")

    def identifier(self, name: str) -> str:
        if name in ("true", "false", "null"):
            return {"true": "True", "false": "False", "null": "None"}[name]
        if self.peek() == "(":
            if name != "dtype_size":
                raise Untranslatable(f"function {name}() is not translated")
            self.take("(")
            argument = self.conditional()
            self.take(")")
            return f"_dtype_size({argument})"
        if self.peek() == ".":
            raise Untranslatable("member access is not translated")
        if name in self.static:
            return repr(self.static[name])
        if name in self.variables:
            return name
        raise Untranslatable(f"unknown variable {name!r}")


def translate(source: str, static: Mapping[str, object], variables: set[str]) -> str:
    """The Python expression for ``source``, static variables inlined as constants.

    The parser recurses only at parentheses, brackets, calls and the arms of ``?:``; the CEL
    limits (``MAX_CEL_DEPTH``, ``MAX_CEL_NODES``, checked first) bound that recursion, and
    chains of operators are read in loops.

    Raises:
        Untranslatable: The expression is outside the supported subset or over a CEL limit.
    """
    problem = cel_limit_problem(source)
    if problem is not None:
        raise Untranslatable(problem)
    return _Parser(source, static, variables).parse()


def verify(
    python: str,
    reference: Callable[[Mapping[str, object]], object],
    declared: Mapping[str, str],
    source: str,
    namespace: Mapping[str, Any],
    *,
    limit: int = 4096,
) -> bool:
    """Whether ``python`` agrees with ``reference`` (CEL) on a grid of sample contexts: both
    booleans, every literal in ``source`` (and its neighbours, for numbers), and a few more."""
    literals_int = {int(x) for x in re.findall(r"(?<![\w.])\d+(?![\w.])", source)}
    literals_str = {ast.literal_eval(s) for s in re.findall(r"\"(?:[^\"\\]|\\.)*\"", source)}
    neighbours = {n + d for n in literals_int for d in (-1, 0, 1)}
    samples: dict[str, list[object]] = {
        "bool": [False, True],
        "int": [*sorted({0, 1, 2, *neighbours})],
        "double": [0.0, 1.5, *(float(n) for n in literals_int)],
        "string": [*sorted({"", "other", *literals_str})],
    }  # fmt: skip
    names = list(declared)
    function = eval(f"lambda {', '.join(names)}: {python}", dict(namespace))  # our own translation
    grid = itertools.product(*(samples[declared[n]] for n in names))
    for values in itertools.islice(grid, limit):
        context = dict(zip(names, values, strict=True))
        try:
            expected: object = bool(reference(context))
        except Exception:  # CEL says this context is an error
            expected = "error"
        try:
            got: object = bool(function(*values))
        except Exception:
            got = "error"
        if got not in (expected, "error"):  # an error on the fast path falls back to CEL
            return False
    return True


class _Fold(ast.NodeTransformer):
    """Fold comparisons and boolean operators whose operands became constants (static facts)."""

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        operands = [node.left, *node.comparators]
        if len(node.ops) == 1 and all(isinstance(o, ast.Constant) for o in operands):
            return _constant(node)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Constant):
            return ast.Constant(not node.operand.value)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        is_and = isinstance(node.op, ast.And)
        kept: list[ast.expr] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                if value.value is not is_and:  # False in `and`, True in `or`, decides it
                    return ast.Constant(value.value)
                continue  # True in `and`, False in `or`, changes nothing
            kept.append(value)
        if not kept:
            return ast.Constant(is_and)
        return kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)


def _constant(node: ast.expr) -> ast.AST:
    expression = ast.Expression(body=node)
    ast.fix_missing_locations(expression)
    return ast.Constant(eval(compile(expression, "<fold>", "eval"), {}))  # constants only


_FOLD_DEPTH = 100
"""Deeper trees are left unfolded: ``ast`` visits and unparses recursively."""


def _depth(tree: ast.AST) -> int:
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def fold(python: str) -> str:
    """Constant-fold what inlining the static variables made constant.

    A tree deeper than ``_FOLD_DEPTH`` (a long chain of arithmetic) is returned as it is: the
    ``ast`` visitors recurse per level, and such a chain rarely holds a static fact to fold.
    """
    tree = ast.parse(python, mode="eval")
    if _depth(tree) > _FOLD_DEPTH:
        return python
    folded = ast.fix_missing_locations(_Fold().visit(tree))
    return ast.unparse(folded)
