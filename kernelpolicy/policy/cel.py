"""CEL (the expression language of Kubernetes and Envoy) for per-call conditions and gates.

Expressions are compiled once at load time and checked: every variable must be declared (in the
feature's ``context`` or among the static platform variables), and a trial evaluation with a
sample value of each declared type catches type errors (``tokens + "x"``) before any worker runs.
"""

from __future__ import annotations

import contextlib
import importlib._bootstrap
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.digest import file_stamps
from kernelpolicy.dtypes import DTYPE_SIZES, dtype_name
from kernelpolicy.limits import shown

# Platform facts bound once per resolution, usable in every expression.
STATIC_VARIABLES: dict[str, str] = {
    "vendor": "string",
    "arch": "string",
    "compute_units": "int",
    "device_count": "int",
}

_SAMPLES: dict[str, object] = {"bool": False, "int": 0, "double": 0.0, "string": ""}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name; CEL calls this as ``dtype_size(dtype)``."""
    try:
        return DTYPE_SIZES[dtype_name(dtype)]
    except KeyError:
        raise ValueError(f"dtype_size: unknown dtype {dtype!r}") from None


FUNCTIONS = {"dtype_size": dtype_size}


_EXTENSION = "cel.cel"
_load_lock = threading.Lock()
_loaded: Any = None


def cel_module() -> Any:
    """The CEL extension module: loaded once per process, whichever thread asks first.

    The extension sets up a process-wide logger when it initialises and panics
    (``SetLoggerError``) if that runs a second time, so there must be one copy of it in the
    process, shared with the host's own ``import cel`` in either order (see :func:`_load`).
    """
    module = _loaded  # set once, never cleared: a plain read after the first load
    if module is None:
        module = _first_load()
    return module


def _first_load() -> Any:
    global _loaded  # noqa: PLW0603 - the one-time load, published under the lock
    with _load_lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def _load() -> Any:
    """Find the extension's one copy, or load it and register it where ``import`` looks.

    ``import cel`` also imports the package's command-line front end (typer, rich and
    prompt_toolkit, over 100 ms); the compiled extension alone loads in a few ms, so it is
    loaded from its file, under the name the package gives it (``cel.cel``). The load runs
    under the import system's own lock for that name and is registered in ``sys.modules``, so
    that a host that imported ``cel`` before (the module is there: it is used) or imports it
    during or after (its ``from .cel import *`` finds ours) never initialises a second copy.
    Falls back to the package import if the package's layout ever changes.
    """
    with _import_lock(_EXTENSION):
        module = sys.modules.get(_EXTENSION)
        if module is not None:
            return module
        path = _extension_path()
        if path is not None:
            spec = importlib.util.spec_from_file_location(_EXTENSION, path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[_EXTENSION] = module
                package = sys.modules.get("cel")
                if package is not None:  # a host's import of the package under way
                    setattr(package, "cel", module)  # noqa: B010 - as import itself binds it
                return module
    import cel

    return cel


def extension_stamp() -> str:
    """The CEL extension's file, size and modification time (``-`` where it is not found):
    what a result kept from its evaluations depends on, besides the expression."""
    found = _extension_path()
    if found is None:
        return "-"
    path = Path(found)
    return file_stamps(Path(path.anchor), [path])  # its whole path: where it was found too


def _extension_path() -> str | None:
    spec = importlib.util.find_spec("cel")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        for name in sorted(os.listdir(location)):
            if name.startswith("cel.") and name.endswith((".so", ".pyd")):
                return os.path.join(location, name)
    return None


def _import_lock(name: str) -> contextlib.AbstractContextManager[object]:
    """The lock ``import`` itself holds while it loads ``name`` (CPython's per-module import
    lock, private but stable since 3.3): without it, a host thread importing ``cel`` while
    another makes the first CEL call would initialise the extension twice. A no-op lock where
    the interpreter has none."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)
    if manager is None:
        return contextlib.nullcontext()
    lock: contextlib.AbstractContextManager[object] = manager(name)
    return lock


class CelFailure(RuntimeError):
    """The CEL extension failed in a way that is not a CEL error of the expression (a panic of
    the native code, or any exception it was not documented to raise)."""


_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _binding(call: Callable[..., Any], *args: Any) -> Any:
    """Call into the CEL extension: the one place its failures are translated.

    ``TypeError``, ``RuntimeError`` and ``ValueError`` are CEL's own errors and pass as they are;
    anything else it raises (``ZeroDivisionError``, ``OverflowError``, pyo3's ``PanicException``,
    which is a ``BaseException``) becomes :class:`CelFailure`. Only the interpreter's own exits
    (``KeyboardInterrupt``, ``SystemExit``) pass through.
    """
    try:
        return call(*args)
    except _PASS_THROUGH:
        raise
    except (TypeError, RuntimeError, ValueError):
        raise
    except BaseException as exc:  # pyo3 panics derive from BaseException
        raise CelFailure(f"{type(exc).__name__}: {shown(str(exc), 200)}") from None


def compile_expression(source: str, declared: Mapping[str, str]) -> Any:
    """Compile and check an expression.

    Args:
        source: The CEL text.
        declared: Variable name -> type (``bool``, ``int``, ``double``, ``string``) it may use,
            besides :data:`STATIC_VARIABLES`.

    Returns:
        The compiled program.

    Raises:
        ValueError: Over a limit (``MAX_CEL_SOURCE_CHARS``, ``MAX_CEL_DEPTH``,
            ``MAX_CEL_NODES``; checked before the CEL library sees the text), a syntax error, an
            undeclared variable, a type error, an error on the sample context (a division by
            zero), or a result that is not a boolean; the message says which and what was
            expected.
    """
    from kernelpolicy.policy.celscan import cel_limit_problem  # loading only, not resolving

    problem = cel_limit_problem(source)
    if problem is not None:
        raise ValueError(problem)
    cel = cel_module()
    try:
        program = _binding(cel.compile, source)
        variables = list(_binding(program.variables))
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ValueError(f"CEL syntax error: {shown(str(exc), 500)}") from None
    known = {**STATIC_VARIABLES, **declared}
    unknown = [v for v in variables if v not in known]
    if unknown:
        raise ValueError(
            f"CEL expression uses undeclared variable {shown(str(unknown[0]))!r}; declared: "
            f"{', '.join(sorted(known))} (declare call-context variables under 'context')"
        )
    _run_on_sample(program, source, known, declared)
    return program


def _run_on_sample(
    program: Any, source: str, known: Mapping[str, str], declared: Mapping[str, str]
) -> None:
    """Run ``program`` once on a sample of each variable's type: what the CEL library checks
    only when it runs (a type error, a division by zero, a result that is not a boolean).

    Raises:
        ValueError: Which of those it was, with the sample context the declared variables had.
    """
    sample = {name: _SAMPLES[kind] for name, kind in known.items()}
    if declared.get("dtype") == "string":
        sample["dtype"] = "bfloat16"  # dtype_size() rejects "", so try a real dtype
    try:
        result = _binding(_execute, program, sample)
    except Exception as exc:  # any failure on the sample context: the rule can fail per call
        type_error = _type_error(exc, source, known)
        if type_error is not None:
            raise ValueError(type_error) from None
        shown_sample = ", ".join(f"{k}={v!r}" for k, v in sample.items() if k in declared)
        raise ValueError(
            f"CEL expression does not type-check or fails on the sample context "
            f"({shown_sample or 'no variables'}): {type(exc).__name__}: {shown(str(exc), 200)}"
        ) from None
    if not isinstance(result, bool):
        raise ValueError(f"CEL expression must be a boolean, got {type(result).__name__}")


class LazyProgram:
    """A program compiled on first use: what the compiled-pack cache hands the engine for an
    expression that was checked when the pack was first loaded (most resolutions never run
    one: the hot path runs their Python translation)."""

    __slots__ = ("_program", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self._program: Any = None

    def _compiled(self) -> Any:
        if self._program is None:
            self._program = _binding(cel_module().compile, self.source)
        return self._program

    def execute(self, context: Any) -> Any:
        return self._compiled().execute(context)

    def variables(self) -> Any:
        return self._compiled().variables()


def _type_error(exc: Exception, source: str, known: Mapping[str, str]) -> str | None:
    """For an operator applied to the wrong types: the library's first sentence, then the type
    of every operand, so the wrong one shows; None for any other failure.

    The CEL library says "the operation is not defined for the given operand types" without
    naming them; the operands of an expression of the common subset are its variables (whose
    types are declared) and its literals.
    """
    from kernelpolicy.policy.transpile import Untranslatable, tokens

    text = str(exc)
    if "overload" not in text and "Unsupported operation" not in text:
        return None
    first = shown(text.split(". ", 1)[0].rstrip("."), 200)
    literal_types = {"int": "int", "double": "double", "string": "string"}
    operands: list[str] = []
    try:
        for kind, token in tokens(source):
            if kind == "ident" and token in known:
                operands.append(f"{token} ({known[token]})")
            elif kind in literal_types:
                operands.append(f"{shown(token, 40)} ({literal_types[kind]})")
    except Untranslatable:
        pass  # outside the common subset: the library's sentence is all there is
    distinct = list(dict.fromkeys(operands))
    more = f" and {len(distinct) - 12} more" if len(distinct) > 12 else ""
    named = f"; operands: {', '.join(distinct[:12])}{more}" if distinct else ""
    return (
        f"CEL expression does not type-check: {first}{named}. CEL never converts between int, "
        "uint, double and string: convert explicitly with int(x), uint(x), double(x) or "
        "string(x)"
    )


def evaluate(program: Any, variables: Mapping[str, object]) -> bool:
    """Run a compiled program.

    Raises:
        TypeError, RuntimeError, ValueError: CEL's own errors, as the extension raises them.
        CelFailure: Anything else (a division by zero, an overflow, a panic); a RuntimeError.
    """
    return bool(_binding(_execute, program, variables))


def _execute(program: Any, variables: Mapping[str, object]) -> Any:
    # The context is built inside the binding call too: converting values is native code.
    cel = cel_module()
    return program.execute(cel.Context(dict(variables), FUNCTIONS))
