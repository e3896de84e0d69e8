"""A candidate's ``entry = "module:function"``: whether it can be imported, without importing
it, and the callable it names, imported (:func:`load_entry`).

``check`` and ``explain`` report an entry whose module cannot be found. Finding a module must
not run it (nor its parent packages, which may import torch or a kernel library), so the search
goes one package level at a time through the import system's finders, never through ``import``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import Any


def entry_problem(entry: str, path: Sequence[str] | None = None) -> str | None:
    """Why the module of ``entry`` cannot be imported here, or None when it can be found.

    Args:
        entry: ``package.module:function``.
        path: Where to look for the top-level package (default: ``sys.path`` and the
            interpreter's finders).

    Returns:
        A short reason naming the first part of the dotted name that is missing.
    """
    module = entry.partition(":")[0]
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
        ImportError, AttributeError: the module or the attribute is missing (and whatever the
            module raises while it is imported: a kernel library may fail in many ways).
    """
    module, _, attr = entry.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return function
