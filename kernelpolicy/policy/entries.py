"""A candidate's ``entry = "module:function"``: its two parts (:func:`parse_entry`, the one
reading of the string), whether it can be imported, without importing it, and the callable it
names, imported (:func:`load_entry`) or imported and prepared for serving
(:func:`load_prepared`, what the engine and ``verify`` run).

``check`` and ``explain`` report an entry whose module cannot be found. Finding a module must
not run it (nor its parent packages, which may import torch or a kernel library), so the search
goes one package level at a time through the import system's finders, never through ``import``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

_ENTRY = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)")


class Entry(NamedTuple):
    """An entry's two parts: ``module:attribute``."""

    module: str
    attribute: str


def parse_entry(entry: str) -> Entry:
    """``entry`` as its module and attribute (the policy schema's rule: a dotted module name, one
    colon, an identifier).

    Raises:
        ValueError: ``entry`` is not ``package.module:function``; the message names it and
            says what was expected (a policy's ``entry`` and ``verify --entry`` say it alike).
    """
    match = _ENTRY.fullmatch(entry)
    if match is None:
        raise ValueError(f"entry {entry!r}: expected 'package.module:function'")
    return Entry(match[1], match[2])


def entry_problem(entry: str, path: Sequence[str] | None = None) -> str | None:
    """Why the module of ``entry`` cannot be imported here, or None when it can be found.

    Args:
        entry: ``package.module:function``.
        path: Where to look for the top-level package (default: ``sys.path`` and the
            interpreter's finders).

    Returns:
        A short reason naming the first part of the dotted name that is missing (or what is
        wrong with ``entry`` itself).
    """
    try:
        module = parse_entry(entry).module
    except ValueError as exc:
        return str(exc)
    parts = module.split(".")
    search: Sequence[str] | None = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        try:
            if depth == 1 and path is None:
                # Top level: every finder (editable installs, zip imports, built-ins); finding a
                # top-level module executes nothing.
                loaded = sys.modules.get(name)
                spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(name)
            else:
                spec = importlib.machinery.PathFinder.find_spec(name, search or path)
        except (ImportError, ValueError) as exc:
            return f"module {name!r} cannot be searched: {exc}"
        if spec is None:
            return f"no module named {name!r} (from entry {entry!r})"
        if depth < len(parts):
            locations = spec.submodule_search_locations
            if locations is None:
                return f"{name!r} is a module, not a package (from entry {entry!r})"
            search = list(locations)
    return None


def load_entry(entry: str) -> Callable[..., Any]:
    """The callable at ``module:attribute``, imported (what the engine and ``verify`` run).

    Raises:
        ValueError: ``entry`` is not ``module:attribute`` (:func:`parse_entry`).
        ImportError, AttributeError: the module or the attribute is missing (and whatever the
            module raises while it is imported: a kernel library may fail in many ways).
    """
    module, attr = parse_entry(entry)
    function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return function


class Prepared(NamedTuple):
    """An entry's callable, imported, and what serves its calls."""

    function: Callable[..., Any]
    """The callable the entry names (its degradations are read from it)."""
    served: Callable[..., Any]
    """Its serving form (:func:`kernelpolicy.kernels.builds.nonblocking_form`) where one was
    asked for and it has one, else ``function``."""


def load_prepared(entry: str, prepare: str | None, *, serving: bool = True) -> Prepared:
    """The callable at ``entry``, imported, with its library prepared: ``prepare``
    (``module:function``, :data:`kernelpolicy.policy.names.PREPARE`) is called once after the
    import, so that a library that cannot be imported or built here is found now. A kernel
    served by its serving form is not prepared: its background build imports the library, and
    no call waits for it.

    Args:
        entry: ``package.module:function``.
        prepare: The entry's preparation, or None.
        serving: Serve by the serving form where there is one (the engine); False for the
            callable itself, which builds inline (``verify`` checks it).

    Raises:
        Whatever :func:`load_entry` raises, and whatever ``prepare`` raises: its callers catch
            every failure and say, in their own words, that ``entry`` cannot be loaded.
    """
    from kernelpolicy.kernels.builds import nonblocking_form  # pure Python, no kernel library

    function = load_entry(entry)
    form = nonblocking_form(function) if serving else None
    if form is None and prepare is not None:
        load_entry(prepare)()
    return Prepared(function, form or function)
