"""Call-time fallback: an accelerated kernel that fails when called (a Triton compile error for
a dtype, a launch failure, a JIT build that only happens on first use) hands the call, and every
later one in this process, to the feature's fallback, as an import failure does at load time.

No call waits on a compiler: a kernel whose serving form (``kernels.builds.nonblocking_form``)
raises :class:`~kernelpolicy.kernels.builds.Compiling` for a variant still building in the
background has that call served by the next ready candidate (:func:`served_elsewhere`), counted
in ``Resolution.compiling_calls`` and said in ``runtime_fallbacks`` and the decision's reasons
("compiling", then "built"); later calls switch to the kernel once built. A variant whose
build fails raises ``BuildFailed`` from then on: a call-time failure like any other.

Accelerated implementations kernelpolicy ships (Triton, FlashInfer, aiter) are imported on
their first call, not by ``impl()`` (:class:`LazyEntry`): ``impl()`` only checks that their
libraries are installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernelpolicy.errors import ResolutionError
from kernelpolicy.kernels.builds import Compiling, nonblocking_form
from kernelpolicy.limits import shown

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution

_REASON_CHARS = 300  # of the kernel's error kept in runtime_fallbacks and the decision


class EntryUnloadable(ResolutionError):
    """An implementation imported on its first call could not be imported or prepared."""


class CallTimeFallback:
    """Run ``function``; when it raises and the fallback succeeds on the same arguments, switch
    the feature to the fallback for the rest of the process (recorded by the Resolution in
    ``runtime_fallbacks``, the decision's warnings and ``explain``). When it raises
    ``Compiling``, the fallback serves that call alone.

    When the fallback raises too, the call itself is wrong (a bad shape, a wrong type): the
    kernel's error is raised and nothing is switched. Other attributes (a guard's counters)
    come from the wrapped function.
    """

    def __init__(
        self, resolution: Resolution, feature: str, impl: str, function: Callable[..., Any]
    ) -> None:
        self._resolution = resolution
        self._feature = feature
        self._impl = impl
        self._function = function
        self._fallback: Callable[..., Any] | None = None
        self.__wrapped__ = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fallback = self._fallback
        if fallback is not None:
            return fallback(*args, **kwargs)
        try:
            return self._function(*args, **kwargs)
        except Compiling as compiling:
            serve = self._fallback_function()
            return served_elsewhere(
                self._resolution,
                self._feature,
                self._impl,
                compiling,
                candidates=[serve],
                call=(args, kwargs),
            )
        except Exception as exc:  # a compile or launch failure inside the kernel
            return self._switch(exc, args, kwargs)

    def _fallback_name(self, error: Exception) -> str:
        name = self._resolution.policies.features[self._feature].spec.fallback
        if name is None or name == self._impl:
            raise error
        return name

    def _fallback_function(self) -> Callable[..., Any]:
        resolution = self._resolution
        name = resolution.policies.features[self._feature].spec.fallback
        if name is None or name == self._impl:
            raise ResolutionError(f"{self._feature}: {self._impl} is compiling, no fallback")
        return resolution._load(self._feature, name)

    def _switch(self, error: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        resolution, feature = self._resolution, self._feature
        name = self._fallback_name(error)
        fallback = resolution._load(feature, name)
        try:
            result = fallback(*args, **kwargs)
        except Exception:
            raise error from None  # the fallback fails too: the call is at fault, not the kernel
        self._fallback = fallback
        why = shown(f"{type(error).__name__} when called: {error}", _REASON_CHARS)
        resolution._fall_back(feature, resolution.decisions[feature], name, why)
        resolution._impls[feature] = fallback
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __repr__(self) -> str:
        return f"CallTimeFallback({self._feature}/{self._impl}: {self._function!r})"


def served_elsewhere(
    resolution: Resolution,
    feature: str,
    impl: str,
    compiling: Compiling,
    *,
    candidates: list[Callable[..., Any]],
    call: tuple[tuple[Any, ...], dict[str, Any]],
) -> Any:
    """Serve one call of ``impl``, whose variant is ``compiling``, by the first of
    ``candidates`` that is ready (one compiling too is passed over; the last, the fallback,
    never compiles); count it, and say so once per variant (and once more when it is built).

    Raises:
        Compiling: every candidate is compiling (none is the fallback).
    """
    args, kwargs = call
    for serve in candidates:
        try:
            result = serve(*args, **kwargs)
        except Compiling:
            continue
        _count(resolution, feature, impl, compiling)
        return result
    raise compiling


_NOTES_LOCK = threading.Lock()  # notes come from the serving threads and the build threads


def _count(resolution: Resolution, feature: str, impl: str, compiling: Compiling) -> None:
    with _NOTES_LOCK:
        calls = resolution.compiling_calls
        calls[feature] = calls.get(feature, 0) + 1
        key = (feature, impl, compiling.what)
        if key in resolution.compiling_noted:
            return
        resolution.compiling_noted.add(key)
    note = (
        f"{impl} is compiling {compiling.what} in the background; its calls go to the next "
        "ready candidate until it is built"
    )
    resolution.note_compiling(feature, note)

    def built(why: str | None) -> None:
        if why is None:  # a failure is said by the call that meets it, as any call-time failure
            done = f"{impl} built {compiling.what}; its calls switch to it"
            resolution.note_compiling(feature, done)

    compiling.when_built(built)


class LazyEntry:
    """An accelerated implementation's callable, imported on its first call (or :meth:`load`),
    not when ``impl()`` hands it out: ``impl()`` only checks that ``requires`` (the libraries it
    imports) are installed. A kernel with a serving form (``nonblocking_form``) is served by
    that form, and its library is imported by its background build, not here.

    Raises (on the first call):
        EntryUnloadable: the import, or the preparation, failed.
    """

    def __init__(
        self,
        entry: str,
        prepare: str | None,
        requires: tuple[str, ...],
        on_load: Callable[[Callable[..., Any]], None],
    ) -> None:
        missing = [name for name in requires if not _installed(name)]
        if missing:
            raise ResolutionError(
                f"cannot load {entry}: cannot import {missing[0]}: "
                f"ModuleNotFoundError: No module named {missing[0].partition('.')[0]!r}"
            )
        self.entry = entry
        self._prepare = prepare
        self._on_load = on_load
        self._function: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def load(self) -> Callable[..., Any]:
        """Import the implementation now (a warm step), once; returns what serves its calls."""
        function = self._function
        if function is not None:
            return function
        with self._lock:
            if self._function is None:
                self._function = self._import()
            return self._function

    def _import(self) -> Callable[..., Any]:
        try:
            function = resolve_entry(self.entry)
            form = nonblocking_form(function)
            if form is None and self._prepare is not None:
                resolve_entry(self._prepare)()
        except Exception as exc:  # import errors, missing CUDA/ROCm runtimes, build errors
            raise EntryUnloadable(f"cannot load {self.entry}: {exc}") from exc
        self._on_load(function)
        return form or function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (self._function or self.load())(*args, **kwargs)

    def __repr__(self) -> str:
        state = "loaded" if self._function is not None else "not imported yet"
        return f"LazyEntry({self.entry}: {state})"


def _installed(name: str) -> bool:
    """Whether the top-level package of ``name`` can be imported (found, not imported)."""
    top = name.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def resolve_entry(entry: str) -> Callable[..., Any]:
    """The callable at ``module:attribute``, imported."""
    module, _, attr = entry.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return function
