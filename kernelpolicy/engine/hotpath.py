"""The generated ``select``/``gate`` functions of a :class:`Resolution`, and their one error
boundary.

Per call they do a lookup, not a parse: a feature's rule compiled to Python (with type guards)
or a cache keyed by the tuple of its context values. Whatever goes wrong in a call (a division by
zero or an overflow in a rule, a value whose hash or comparison raises, a type CEL refuses)
reaches the caller as a :class:`ResolutionError` naming the feature or gate and the context, its
values cut to a safe length.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernelpolicy.code_cache import compile_kept
from kernelpolicy.dtypes import dtype_name
from kernelpolicy.errors import ResolutionError
from kernelpolicy.limits import MAX_CALL_CACHE_ENTRIES, shown

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "double": (float, int),
    "string": (str,),
}


def show(value: object) -> str:
    """``repr(value)`` cut to a safe length; never raises (a broken ``__repr__`` included)."""
    try:
        text = repr(value)
    except Exception:  # a value's own __repr__ failing must not replace the real error
        text = f"<{type(value).__name__} object>"
    return shown(text)


def show_context(context: Mapping[str, object]) -> str:
    """``name=value, ...`` of a call context, each value cut (see :func:`show`)."""
    return ", ".join(f"{name}={show(value)}" for name, value in context.items()) or "no context"


def _message(exc: BaseException) -> str:
    try:
        return shown(str(exc), 200)
    except Exception:
        return "<unprintable>"


def _failed(kind: str, name: object, exc: BaseException) -> ResolutionError:
    return ResolutionError(f"{kind}({show(name)}) failed: {type(exc).__name__}: {_message(exc)}")


def guarded(kind: str, miss: Callable[..., Any]) -> Callable[..., Any]:
    """``miss`` with every exception but ResolutionError turned into one (the call-time
    translation point of ``select`` and ``gate``)."""

    def call(cache: Any, name: str, key: Any, context: Mapping[str, object]) -> Any:
        try:
            return miss(cache, name, key, context)
        except ResolutionError:
            raise
        except Exception as exc:
            raise ResolutionError(
                f"{kind}({name!r}) failed for {show_context(context)}: "
                f"{type(exc).__name__}: {_message(exc)}"
            ) from exc

    return call


def remember(cache: dict[Any, Any], key: tuple[Any, ...] | None, value: Any) -> Any:
    """``value``, kept in ``cache`` under ``key`` (None: not kept); a full cache starts over
    (``MAX_CALL_CACHE_ENTRIES``)."""
    if key is not None:
        if len(cache) >= MAX_CALL_CACHE_ENTRIES:
            cache.clear()
        cache[key] = value
    return value


class _Missing:
    """The default of every context parameter: any use of it in a compiled rule raises, so a
    missing variable always ends in the CEL path's clear error."""

    def __bool__(self) -> bool:
        raise TypeError("missing context variable")

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


_GUARDS = {
    "bool": "type({v}) is bool",
    "int": "type({v}) is int",
    "double": "(type({v}) is float or type({v}) is int)",
    "string": "type({v}) is str",
}


def type_guard(variable: str, kind: str) -> str:
    return _GUARDS[kind].format(v=variable)


FEATURES_PER_FUNCTION = 64
"""Names one generated function tests in turn. A larger set is split into such functions behind
a dict lookup, so that a call compares at most this many names and each ``compile()`` is short:
compiling one function for 10,000 features held the interpreter (and so every answer of a
daemon reloading in a thread) for seconds."""


def hot_path(
    kind: str,
    contexts: Mapping[str, tuple[str, ...]],
    miss: Callable[..., Any],
    fast: Mapping[str, list[str]] | None = None,
    namespace: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Generate ``kind(name, /, *, <every declared context variable>)``.

    Explicit keyword parameters (instead of ``**context``) spare a dict per call. Where
    ``fast`` has a body for a feature (its rule compiled to Python, with type guards), a call
    runs that body; otherwise, or when a guard fails or the body raises, the feature's cache is
    looked up by the tuple of its variables, and a miss hands every given variable to ``miss``
    (which validates them, evaluates the CEL and fills the cache). Python itself raises
    ``TypeError`` for a keyword no policy declares; a variable declared only by another feature
    is ignored. Past ``FEATURES_PER_FUNCTION`` names, a dict picks the function that knows one.
    """
    # In the order the features declare them (the first feature's first): CPython matches each
    # keyword of a call by a scan of the parameters, so the first features' calls, the hot
    # ones of a policy pack (its sampler), scan least (about 5 ns a call, measured).
    params = list(dict.fromkeys(v for variables in contexts.values() for v in variables))
    scope: dict[str, Any] = {
        "_M": _MISSING,
        "_P": _NO_POSITIONAL,
        "_positional": _positional,
        "_miss": guarded(kind, miss),
        "_given": lambda values: {k: v for k, v in values.items() if v is not _MISSING},
        "_ResolutionError": ResolutionError,
        "_failed": _failed,
        **(namespace or {}),
    }
    if len(contexts) <= FEATURES_PER_FUNCTION:
        function = _generate(kind, kind, contexts, params, fast=fast, scope=scope)
    else:
        function = _dispatched(kind, contexts, params, fast=fast, scope=scope)
    # Seen by TorchDynamo (what torch.compiler.assume_constant_result sets, without importing
    # torch): call it at trace time and bake the result in, instead of tracing the CEL call.
    function._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return function


def _dispatched(
    kind: str,
    contexts: Mapping[str, tuple[str, ...]],
    params: list[str],
    *,
    fast: Mapping[str, list[str]] | None,
    scope: dict[str, Any],
) -> Callable[..., Any]:
    """``kind`` for more than ``FEATURES_PER_FUNCTION`` names: a function per chunk of them
    (:func:`_generate`), and one that picks the chunk's function from a dict by the name (a name
    in none, or one that is no key, goes to a function that knows no name: the slow path)."""
    names = list(contexts)
    table: dict[str, Callable[..., Any]] = {}
    for start in range(0, len(names), FEATURES_PER_FUNCTION):
        chunk = {n: contexts[n] for n in names[start : start + FEATURES_PER_FUNCTION]}
        part = _generate(
            f"_{kind}_{start}", kind, chunk, params, fast=fast, scope=scope, offset=start
        )
        table.update(dict.fromkeys(chunk, part))
    scope["_T"] = table
    scope["_rest"] = _generate(f"_{kind}_rest", kind, {}, params, fast=fast, scope=scope)
    passed = "".join(f", {p}={p}" for p in params)
    lines = [
        _signature(kind, kind, params),
        "    try:",
        "        _f = _T[_name]",
        "    except Exception:  # unknown or unhashable: the slow path says so",
        "        _f = _rest",
        f"    return _f(_name{passed})",
    ]
    return _compile(kind, lines, scope)


def _generate(
    function_name: str,
    kind: str,
    contexts: Mapping[str, tuple[str, ...]],
    params: list[str],
    *,
    fast: Mapping[str, list[str]] | None,
    scope: dict[str, Any],
    offset: int = 0,
) -> Callable[..., Any]:
    """One function that tests the names of ``contexts`` in turn (see :func:`hot_path`)."""
    given = "{" + ", ".join(f"{p!r}: {p}" for p in params) + "}"
    lines = [_signature(function_name, kind, params)]
    for index, (name, variables) in enumerate(contexts.items(), start=offset):
        scope[f"_c{index}"] = {}
        key = "(" + "".join(f"{v}, " for v in variables) + ")"
        lines.append(f"    if _name == {name!r}:")
        if fast and name in fast:
            lines += ["        try:", *(f"            {line}" for line in fast[name])]
            lines += ["        except Exception:", "            pass  # CEL decides, below"]
        lines += [
            "        try:",
            f"            return _c{index}[{key}]",
            "        except KeyError:",
            f"            return _miss(_c{index}, _name, {key}, _given({given}))",
            "        except Exception:  # unhashable, or a hash/eq that raises: evaluate, no cache",
            f"            return _miss(_c{index}, _name, None, _given({given}))",
        ]
    lines.append(f"    return _miss(None, _name, None, _given({given}))")
    # The whole body in one more try (free in Python 3.11 until something raises): a name whose
    # comparison raises, or anything else, still ends as a ResolutionError.
    lines = [lines[0], "    try:", *(f"    {line}" for line in lines[1:])]
    lines += [
        "    except _ResolutionError:",
        "        raise",
        "    except Exception as _exc:",
        f"        raise _failed({kind!r}, _name, _exc) from _exc",
    ]
    return _compile(function_name, lines, scope)


class _NoPositional:
    def __repr__(self) -> str:
        return "<no positional>"


_NO_POSITIONAL = _NoPositional()


def _positional(kind: str) -> TypeError:
    return TypeError(
        f"{kind}() takes the name as its only positional argument; give the context as keywords"
    )


def _signature(function_name: str, kind: str, params: list[str]) -> str:
    """``def f(_name, _p=_P, /, a=_M, b=_M):`` and a check that nothing else came positionally.

    Keyword-or-positional parameters instead of keyword-only ones: CPython fills a missing
    keyword-only parameter from a dict, one lookup each, and a call gives only its feature's
    variables, so every other feature's variables cost a lookup in every call (about 6 ns each,
    measured). Defaults of positional parameters come from a tuple. ``_p`` catches a second
    positional argument (a third would land in the first variable and still sets ``_p``).
    """
    names = "".join(f", {p}=_M" for p in params)
    return (
        f"def {function_name}(_name, _p=_P, /{names}):\n"
        f"    if _p is not _P:\n"
        f"        raise _positional({kind!r})"
    )


def _compile(function_name: str, lines: list[str], scope: dict[str, Any]) -> Callable[..., Any]:
    # Generated from validated identifiers only; compiled once per node (kernelpolicy.code_cache).
    exec(compile_kept("\n".join(lines), f"<kernelpolicy {function_name}>"), scope)
    function: Callable[..., Any] = scope[function_name]
    return function


def convert(call: str, name: str, kind: str, value: object) -> object:
    """Check a context value against its declared type; dtypes become their names."""
    if kind == "string" and not isinstance(value, str) and type(value).__module__ == "torch":
        return dtype_name(value)  # torch.bfloat16 -> "bfloat16"
    if kind in ("int", "double") and isinstance(value, bool):
        ok = False
    else:
        ok = isinstance(value, _PY_TYPES[kind])
    if not ok:
        raise ResolutionError(
            f"{call}: context variable {name!r} must be {kind}, "
            f"got {type(value).__name__} {show(value)}"
        )
    return float(value) if kind == "double" else value  # type: ignore[arg-type]
