"""Which of an engine release's variables its code reads and acts on, from the release's syntax.

A variable counts as read where some module other than its definition uses it: in a condition,
a call, a loop, a comparison... A mention that is not code (a comment, a docstring, a log
message that names it, a key written into ``os.environ`` for a child) is not a read, and
neither is a value only stored somewhere nothing uses: ``cls._FLAG = envs.VLLM_X`` counts only
if ``_FLAG`` is used, and ``return cls._FLAG`` only if the function returning it is called. So
vLLM 0.19.1's ``VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION``, stored in ``_aiter_ops.py`` and
returned by ``is_triton_unified_attn_enabled()`` which nothing calls any more, is read nowhere;
0.18.1's ``platforms/rocm.py`` tested it in its backend priority list.

Names are followed by name, not by scope: a stored value counts as used when any code anywhere
uses a name spelt like the store's target, or the name it is imported as (``from m import FLAG
as on``). That errs towards "read" (a common name such as ``enabled`` is used somewhere). What
it cannot see, and so calls unread: a name built at run time (``getattr(envs, f"VLLM_{x}")``),
a read inside the definition's own file (another variable's default), and C code held in a
Python string (SGLang's ``pynccl_allocator.py`` reads ``SGLANG_TMP_NCCL_COMM_VALUE`` so, a value
SGLang sets itself).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

# Expressions a value passes through unchanged in meaning: its use is decided further up.
_THROUGH = (
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Tuple, ast.List, ast.Set,
    ast.Dict, ast.Attribute, ast.Subscript, ast.Starred, ast.NamedExpr, ast.Lambda,
    ast.FormattedValue, ast.JoinedStr, ast.keyword,
)  # fmt: skip
_STORES = (ast.Assign, ast.AnnAssign, ast.AugAssign)
HOPS = 6  # stores followed from a mention before it counts as read anyway


class Source:
    """A release's modules parsed once: every mention of a name and where its value goes."""

    def __init__(self, files: Iterable[tuple[str, str]]) -> None:
        self.parents: dict[ast.AST, ast.AST] = {}
        self.where: dict[ast.AST, str] = {}
        self.uses: dict[str, list[ast.AST]] = {}  # name -> Name/Attribute loads and string keys
        for relative, text in files:
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):  # a release's file this Python cannot parse
                continue
            self._index(tree, relative)
        self._live: dict[str, bool] = {}

    def _index(self, tree: ast.AST, relative: str) -> None:
        docstrings = {id(d) for d in _docstrings(tree)}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            name = _loaded_name(node)
            if name is None and id(node) not in docstrings:
                name = _string_name(node)
            if isinstance(node, ast.alias) and node.asname:  # from m import NAME as other
                name = node.name
            if name is not None:
                self.uses.setdefault(name, []).append(node)
                self.where[node] = relative

    def read_in(self, name: str, skip: str) -> list[str]:
        """The files (outside ``skip``, the definition's) where ``name`` is read, sorted."""
        files = {
            self.where[node]
            for node in self.uses.get(name, [])
            if self.where[node] != skip and self._reaches_use(node, HOPS)
        }
        return sorted(files)

    def _reaches_use(self, node: ast.AST, hops: int) -> bool:
        sinks = self._sinks(node)
        if sinks is None:
            return True
        return any(self._is_live(sink, hops - 1) for sink in sinks)

    def _is_live(self, name: str, hops: int) -> bool:
        """Whether a store into ``name`` (or a function of that name's result) is used."""
        if hops <= 0:
            return True
        if name not in self._live:
            self._live[name] = False  # a store used only by itself is not a use
            self._live[name] = any(self._reaches_use(n, hops) for n in self.uses.get(name, []))
        return self._live[name]

    def _sinks(self, node: ast.AST) -> list[str] | None:
        """The names ``node``'s value is only stored into (or returned by), or None where
        the value is used (and [] where it goes nowhere, or is written into a mapping)."""
        if isinstance(node, ast.alias):  # used under the name it is imported as
            return [node.asname] if node.asname else []
        return self._sinks_of_value(node)

    def _sinks_of_value(self, node: ast.AST) -> list[str] | None:
        child, parent = node, self.parents.get(node)
        while isinstance(parent, _THROUGH):
            written = isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load)
            if written and child is getattr(parent, "slice", None):
                return []  # os.environ["VLLM_X"] = ...: a write, not a read
            if isinstance(parent, ast.Lambda):
                return _owner(self.parents.get(parent), parent)
            child, parent = parent, self.parents.get(parent)
        if isinstance(parent, _STORES) and child is parent.value:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return [n for t in targets for n in _stored_names(t)]
        if isinstance(parent, ast.Return):
            return _enclosing_function(parent, self.parents)
        if isinstance(parent, ast.Expr):
            return []  # a bare expression statement: evaluated, never used
        return None


def _owner(parent: ast.AST | None, lam: ast.AST) -> list[str] | None:
    """Where a lambda goes: the names it is stored into, else a use (it is passed somewhere)."""
    if isinstance(parent, _STORES) and parent.value is lam:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return [n for t in targets for n in _stored_names(t)]
    return None


def _loaded_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        return node.attr
    return None


def _string_name(node: ast.AST) -> str | None:
    """A string literal that could name a variable (``os.getenv("VLLM_X")``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if node.value.isidentifier() else None
    return None


def _stored_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, ast.Subscript):
        yield from _stored_names(target.value)
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _stored_names(element)
    elif isinstance(target, ast.Starred):
        yield from _stored_names(target.value)


def _enclosing_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[str] | None:
    current = parents.get(node)
    while current is not None:
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef):
            return [current.name]
        if isinstance(current, ast.Lambda):
            return None
        current = parents.get(current)
    return None  # a return outside a function: not Python, but not ours to judge


def _docstrings(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                yield body[0].value


def source_of(root: Path, paths: Iterable[Path]) -> Source:
    """The modules at ``paths`` (under ``root``) parsed."""
    return Source((str(p.relative_to(root)), p.read_text(errors="replace")) for p in paths)
