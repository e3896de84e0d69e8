"""``Resolution.impl()`` of a feature routed per call (``by_batch``, ``dtypes``): one callable
that an engine calls as it would the kernel, choosing the implementation by the rows and the
dtype of its first argument (the logits).

No policy is evaluated per call: the implementation for a (rows, dtype) pair is worked out on
its first call (:meth:`Decision.order_for`, the same order ``select()`` uses) and then looked up
in a bounded table, so a call costs an attribute read, a tuple and a dictionary lookup more than
calling the kernel (``benchmarks/bench_dispatch.py`` measures it).

A kernel that fails when called (a compile error for one dtype) where the fallback succeeds
on the same arguments stops serving that dtype for the rest of the process, recorded as any
call-time fallback is (``runtime_fallbacks``, the decision's warnings, ``explain``); the other
dtypes keep it. A feature that does not route by dtype switches as a whole, as
:class:`~kernelpolicy.engine.runtime.CallTimeFallback` does.

An implementation that cannot be loaded (an import or JIT build failure on its first call)
costs only the calls routed to it: it leaves the decision's order and every batch row, so
those calls go to the next candidate of their row (the fallback last), recorded the same way.
That holds for the decision's own choice too: the choice becomes the next candidate of the
order (a broken FlashInfer install leaves the Triton sampler serving its batches, where the
whole feature used to go to torch).

A call whose kernel variant is still compiling in the background (the kernel raises
``Compiling``) is served by the next ready candidate of its row, the fallback last, and counted
(``engine.runtime.served_elsewhere``); its row keeps the kernel, which serves once built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.engine.model import Decision, DtypeRule
from kernelpolicy.engine.runtime import EntryUnloadable
from kernelpolicy.errors import ResolutionError
from kernelpolicy.kernels.builds import Compiling
from kernelpolicy.limits import shown

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution

TABLE_LIMIT = 8192
"""(rows, dtype) pairs remembered before the table starts over (a server sees a few hundred)."""
_REASON_CHARS = 300  # of the kernel's error kept in runtime_fallbacks and the decision


class Routed:
    """Call the implementation chosen for ``logits.shape[0]`` rows of ``logits.dtype``."""

    def __init__(self, resolution: Resolution, feature: str) -> None:
        self._resolution = resolution
        self._feature = feature
        self._fallback = resolution.policies.features[feature].spec.fallback
        # dtype -> rows -> (impl, function): two lookups are cheaper than hashing a tuple.
        self._table: dict[object, dict[int, tuple[str, Callable[..., Any]]]] = {}
        self._size = 0
        self._loaded: dict[str, Callable[..., Any]] = {}
        # an import failure shows now, as impl() always did; a choice that cannot be loaded
        # leaves the order, and the next one is tried
        while self._function(self._chosen()) is None:
            pass

    def _chosen(self) -> str:
        impl = self._resolution.decisions[self._feature].impl
        assert impl is not None
        return impl

    def __call__(self, logits: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            impl, function = self._table[logits.dtype][logits.shape[0]]
        except KeyError:
            impl, function = self._choose((logits.shape[0], logits.dtype))
        try:
            return function(logits, *args, **kwargs)
        except Compiling as compiling:  # its variant builds in the background: not this call
            return self._meanwhile(impl, compiling, (logits, *args), kwargs)
        except Exception as exc:  # a compile or launch failure inside the kernel
            return self._failed(impl, logits.dtype, exc, (logits, *args), kwargs)

    def _meanwhile(
        self, impl: str, compiling: Compiling, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``impl`` is compiling this call's variant: the next ready candidate of the call's
        row serves it (the fallback last); the table keeps ``impl``, so the calls after the
        build run it."""
        from kernelpolicy.engine.runtime import served_elsewhere

        logits = args[0]
        decision = self._resolution.decisions[self._feature]
        order = list(decision.order_for(logits.shape[0], dtype_name(logits.dtype)))
        rest = order[order.index(impl) + 1 :] if impl in order else order
        if self._fallback is not None and self._fallback not in rest:
            rest.append(self._fallback)
        loaded = [self._function(name) for name in rest if name != impl]
        candidates = [function for function in loaded if function is not None]
        return served_elsewhere(
            self._resolution,
            self._feature,
            impl,
            compiling,
            candidates=candidates,
            call=(args, kwargs),
        )

    def reset(self) -> None:
        """Forget every choice: the decision changed."""
        self._table.clear()
        self._size = 0

    def choice(self, batch: int, dtype: object) -> str:
        """The implementation a call of ``batch`` rows of ``dtype`` runs (loads it)."""
        return self._choose((batch, dtype))[0]

    def _choose(self, key: tuple[int, object]) -> tuple[str, Callable[..., Any]]:
        while True:  # each implementation that fails to load leaves the order: this ends
            decision = self._resolution.decisions[self._feature]
            order = decision.order_for(key[0], dtype_name(key[1]))
            if not order:
                raise ResolutionError(f"{self._feature}: no implementation serves {key}")
            function = self._function(order[0])
            if function is not None:
                break
        chosen = (order[0], function)
        if self._size >= TABLE_LIMIT:
            self.reset()
        self._table.setdefault(key[1], {})[key[0]] = chosen
        self._size += 1
        return chosen

    def _function(self, impl: str) -> Callable[..., Any] | None:
        """``impl``'s callable, loaded once; None when it cannot be loaded here, after taking
        it out of the decision (choose again)."""
        function = self._loaded.get(impl)
        if function is not None:
            return function
        resolution = self._resolution
        try:
            function = resolution._load(self._feature, impl, wrap=False)
        except ResolutionError as exc:
            if self._fallback is None or impl == self._fallback:
                raise
            self._refuse(impl, str(exc))
            return None
        self._loaded[impl] = function
        return function

    def _refuse(self, impl: str, why: str) -> None:
        """``impl`` cannot be loaded: it leaves the order (with nothing but the fallback left,
        the feature falls back as a whole)."""
        assert self._fallback is not None
        resolution = self._resolution
        decision = resolution.decisions[self._feature]
        rest = [name for name in decision.order if name != impl]
        if impl == decision.impl and rest == [self._fallback]:
            resolution._fall_back(self._feature, decision, self._fallback, why)
        else:
            refuse_impl(resolution, self._feature, impl, why)

    def _fallback_function(self) -> Callable[..., Any]:
        assert self._fallback is not None
        function = self._function(self._fallback)
        assert function is not None  # loading the fallback raises rather than refuse it
        return function

    def _failed(
        self,
        impl: str,
        dtype: object,
        error: Exception,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if self._fallback is None or impl == self._fallback:
            raise error
        try:
            result = self._fallback_function()(*args, **kwargs)
        except Exception:
            raise error from None  # the fallback fails too: the call is at fault, not the kernel
        why = shown(f"{type(error).__name__} when called: {error}", _REASON_CHARS)
        resolution = self._resolution
        decision = resolution.decisions[self._feature]
        if isinstance(error, EntryUnloadable):  # imported on its first call, and it failed
            self._loaded.pop(impl, None)
            self._refuse(impl, str(error))
        elif decision.dtypes:
            refuse_dtype(resolution, self._feature, impl, dtype_name(dtype), why)
        else:
            resolution._fall_back(self._feature, decision, self._fallback, why)
        self.reset()
        return result

    def __repr__(self) -> str:
        return f"Routed({self._feature}: {', '.join(self._loaded)})"


def refuse_dtype(resolution: Resolution, feature: str, impl: str, dtype: str, why: str) -> None:
    """``impl`` serves ``dtype`` no more in this process: calls of it go to the next candidate,
    in ``impl()`` and ``select()`` alike."""
    decision = resolution.decisions[feature]
    note = f"{impl} failed at run time for {dtype} ({why}); {dtype} calls go to the next candidate"
    rules = {rule.impl: rule for rule in decision.dtype_rules}
    old = rules.get(impl, DtypeRule(impl, None))
    rules[impl] = dataclasses.replace(old, refuses=(*old.refuses, dtype), why=note)
    changed = dataclasses.replace(decision, dtype_rules=tuple(rules.values()))
    _record(resolution, feature, changed, f"dtype: {note}", note, failed=impl)


def refuse_impl(resolution: Resolution, feature: str, impl: str, why: str) -> None:
    """``impl``, one of the decision's routed implementations, cannot be loaded: it leaves the
    order and every batch row, so the calls routed to it go to the next candidate of their
    row (the fallback last), in ``impl()`` and ``select()`` alike. Where it was the decision's
    choice, the next of the order becomes the choice."""
    decision = resolution.decisions[feature]
    note = f"{impl} failed at run time ({why}); the calls routed to it go to the next candidate"

    def without(order: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name for name in order if name != impl)

    order = without(decision.order)
    changed = dataclasses.replace(
        decision,
        impl=order[0] if impl == decision.impl and order else decision.impl,
        order=order,
        routes=tuple(dataclasses.replace(r, order=without(r.order)) for r in decision.routes),
        dtype_rules=tuple(rule for rule in decision.dtype_rules if rule.impl != impl),
    )
    _record(resolution, feature, changed, note, note, failed=impl)


def _record(
    resolution: Resolution, feature: str, changed: Decision, reason: str, note: str, *, failed: str
) -> None:
    """Store ``changed`` with ``reason`` and a fresh account of who serves what, add ``note``
    to ``runtime_fallbacks`` and the warnings, log it (and report that ``failed`` failed), and
    rebuild ``select()``."""
    from kernelpolicy.engine.routing import serving_lines

    resolution.note_runtime(feature, note, failed=failed)
    kept = tuple(line for line in changed.reasons if not line.startswith(_SERVING))
    resolution.decisions[feature] = dataclasses.replace(
        changed,
        reasons=(*kept, reason, *serving_lines(changed)),
        warnings=(*changed.warnings, note),
    )
    resolution.select = resolution._build_select()


_SERVING = "serves batch "  # the lines of routing.serving_lines, redone after each change
