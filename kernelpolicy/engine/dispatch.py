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
dtypes keep it. A feature that does not route by dtype switches as a whole, as a
:class:`CallTimeFallback` (the callable of a feature that is not routed per call, or of one
implementation ``select()`` named: one route) does on any failure.

An implementation that cannot be loaded (an import or JIT build failure on its first call)
costs only the calls routed to it: it leaves the decision's order and every batch row, so
those calls go to the next candidate of their row (the fallback last), recorded the same way.
That holds for the decision's own choice too: the choice becomes the next candidate of the
order (a broken FlashInfer install leaves the Triton sampler serving its batches, where the
whole feature used to go to torch).

A call whose kernel variant is still compiling in the background (the kernel raises
``Compiling``) is served by the next ready candidate of its row, the fallback last, and counted
(``Fallbacks.served_elsewhere``); its row keeps the kernel, which serves once built. A candidate
that fails on such a call (its own build failed, its library cannot be imported) leaves the
order as above, and the next candidate serves the call: it never reaches the caller.

"Run the kernel, else the fallback, else re-raise" is written once (:class:`Serving`); every
change it makes to the decision goes through the Resolution's
:class:`~kernelpolicy.engine.fallbacks.Fallbacks`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, TypeAlias

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.engine.loading import EntryUnloadable, Importing
from kernelpolicy.errors import ResolutionError
from kernelpolicy.kernels.builds import Compiling

if TYPE_CHECKING:
    import torch

    from kernelpolicy.engine.fallbacks import Fallbacks
    from kernelpolicy.kernels import TopKTopP

RoutedKernel: TypeAlias = "Callable[Concatenate[torch.Tensor, ...], Any]"
"""An implementation of a feature routed per call: called as the kernel is, with the input whose
rows and dtype choose it first. The sampler contract, :class:`~kernelpolicy.kernels.TopKTopP`
(a sampler's logits first), is one, which mypy checks (``_routable``); a feature that is not
routed may be any callable (``rmsnorm(x, weight, epsilon)``)."""

if TYPE_CHECKING:

    def _routable(sampler: TopKTopP) -> RoutedKernel:
        """Never called: mypy fails here if the sampler contract stops being routable."""
        return sampler


TABLE_LIMIT = 8192
"""(rows, dtype) pairs remembered before the table starts over (a server sees a few hundred)."""


class Serving:
    """Run an implementation; when it raises ``Compiling``, the next ready candidate serves
    that call; when it fails and the fallback succeeds on the same arguments, the decision
    changes (:meth:`_give_up`) and the fallback's result is returned; when the fallback fails
    too, the call itself is wrong (a bad shape, a wrong type): the kernel's error is raised
    and nothing changes."""

    def __init__(self, fallbacks: Fallbacks, feature: str) -> None:
        self._fallbacks = fallbacks
        self._feature = feature
        self._fallback = fallbacks.fallback(feature)
        self._loaded: dict[str, Callable[..., Any]] = {}

    def _function(self, impl: str) -> Callable[..., Any] | None:
        """``impl``'s callable, loaded once; None when it cannot be loaded here, after taking
        it out of the decision (choose again)."""
        function = self._loaded.get(impl)
        if function is not None:
            return function
        try:
            function = self._fallbacks.load(self._feature, impl)
        except ResolutionError as exc:
            if self._fallback is None or impl == self._fallback:
                raise
            self._fallbacks.refuse_impl(self._feature, impl, str(exc))
            return None
        self._loaded[impl] = function
        return function

    def _run(self, impl: str, function: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Importing as importing:
            if self._fallback is None or impl == self._fallback:  # nothing else can serve it
                importing.entry.load()  # wait for the import, as a blocking entry does
                return self._run(impl, function, args, kwargs)
            return self._elsewhere(impl, importing, args, kwargs)
        except Compiling as compiling:  # its variant builds in the background: not this call
            return self._elsewhere(impl, compiling, args, kwargs)
        except Exception as exc:  # a compile or launch failure inside the kernel
            return self._failed(impl, exc, args, kwargs)

    def _elsewhere(self, impl: str, compiling: Compiling, args: Any, kwargs: Any) -> Any:
        """Serve a call of ``impl``, whose variant is ``compiling``, by the first ready
        candidate of :meth:`_meanwhile` (one compiling too is passed over). A candidate that
        fails where a later one serves the call leaves the order as any call-time failure does
        (:meth:`_refuse`); where the fallback fails too, the call is at fault: the fallback's
        error is raised and nothing changes.

        Raises:
            Compiling: every candidate is compiling (none is the fallback).
        """
        failed: list[tuple[str, Exception]] = []
        for name in self._meanwhile(impl, args):
            function = self._function(name)
            if function is None:  # it cannot be loaded: it has left the order
                continue
            try:
                result = function(*args, **kwargs)
            except Compiling:
                continue
            except Exception as exc:
                if name == self._fallback:
                    raise
                failed.append((name, exc))
                continue
            for broken, error in failed:
                self._refuse(broken, error, args)
            self._fallbacks.served_elsewhere(self._feature, impl, compiling)
            return result
        raise compiling

    def _meanwhile(self, impl: str, args: tuple[Any, ...]) -> list[str]:
        """Who serves a call of ``impl`` while its variant compiles: the fallback."""
        if self._fallback is None or impl == self._fallback:
            raise ResolutionError(f"{self._feature}: {impl} is compiling, no fallback")
        return [self._fallback]

    def _failed(self, impl: str, error: Exception, args: Any, kwargs: Any) -> Any:
        if self._fallback is None or impl == self._fallback:
            raise error
        fallback = self._function(self._fallback)
        assert fallback is not None  # loading the fallback raises rather than refuse it
        try:
            result = fallback(*args, **kwargs)
        except Exception:
            raise error from None  # the fallback fails too: the call is at fault, not the kernel
        self._give_up(impl, error, _when_called(error), args)
        return result

    def _give_up(self, impl: str, error: Exception, why: str, args: tuple[Any, ...]) -> None:
        """``impl`` failed on a call the fallback served: the whole feature switches."""
        self._fallbacks.switch(self._feature, why)

    def _refuse(self, impl: str, error: Exception, args: tuple[Any, ...]) -> None:
        """``impl``, called while another candidate compiled, failed where a later candidate
        served the call: it serves no more calls of what it failed on (the rest of the order
        is untouched: the compiling kernel keeps its row)."""
        raise AssertionError(f"{impl} serves no call while another compiles")  # Routed only


class CallTimeFallback(Serving):
    """The callable of one implementation (a feature not routed per call, or what
    ``select()`` named): one route. After a failure every call goes to the fallback. Other
    attributes (a guard's counters) come from the wrapped function."""

    def __init__(
        self, fallbacks: Fallbacks, feature: str, impl: str, function: Callable[..., Any]
    ) -> None:
        super().__init__(fallbacks, feature)
        self._route = (impl, function)
        self._function_ = function
        self.__wrapped__ = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        impl, function = self._route
        return self._run(impl, function, args, kwargs)

    def _give_up(self, impl: str, error: Exception, why: str, args: tuple[Any, ...]) -> None:
        super()._give_up(impl, error, why, args)
        assert self._fallback is not None
        self._route = (self._fallback, self._loaded[self._fallback])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function_, name)

    def __repr__(self) -> str:
        return f"CallTimeFallback({self._feature}/{self._route[0]}: {self._function_!r})"


class Routed(Serving):
    """Call the implementation chosen for ``logits.shape[0]`` rows of ``logits.dtype``."""

    def __init__(self, fallbacks: Fallbacks, feature: str) -> None:
        super().__init__(fallbacks, feature)
        # dtype -> rows -> (impl, function): two lookups are cheaper than hashing a tuple.
        self._table: dict[object, dict[int, tuple[str, RoutedKernel]]] = {}
        self._size = 0
        # an import failure shows now, as impl() always did; a choice that cannot be loaded
        # leaves the order, and the next one is tried
        while self._function(self._chosen()) is None:
            pass
        # What another batch range or dtype runs first starts its import now, in the
        # background, as the chosen one's did: not on the first call that needs it.
        decision = self._fallbacks.decisions[feature]
        for impl in decision.first_choices():
            if self._fallbacks.imported_on_first_call(feature, impl):
                self._function(impl)

    def _chosen(self) -> str:
        impl = self._fallbacks.decisions[self._feature].impl
        assert impl is not None
        return impl

    def __call__(self, logits: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        try:
            impl, function = self._table[logits.dtype][logits.shape[0]]
        except KeyError:
            impl, function = self._choose((logits.shape[0], logits.dtype))
        return self._run(impl, function, (logits, *args), kwargs)

    def _meanwhile(self, impl: str, args: tuple[Any, ...]) -> list[str]:
        """The rest of the call's row after ``impl`` (the fallback last); the table keeps
        ``impl``, so the calls after the build run it."""
        logits = args[0]
        decision = self._fallbacks.decisions[self._feature]
        order = list(decision.order_for(logits.shape[0], dtype_name(logits.dtype)))
        rest = order[order.index(impl) + 1 :] if impl in order else order
        if self._fallback is not None and self._fallback not in rest:
            rest.append(self._fallback)
        return [name for name in rest if name != impl]

    def reset(self) -> None:
        """Forget every choice: the decision changed."""
        self._table.clear()
        self._size = 0

    def choice(self, batch: int, dtype: object) -> str:
        """The implementation a call of ``batch`` rows of ``dtype`` runs (loads it)."""
        return self._choose((batch, dtype))[0]

    def _choose(self, key: tuple[int, object]) -> tuple[str, RoutedKernel]:
        while True:  # each implementation that fails to load leaves the order: this ends
            decision = self._fallbacks.decisions[self._feature]
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

    def _give_up(self, impl: str, error: Exception, why: str, args: tuple[Any, ...]) -> None:
        """What failed leaves as :meth:`_leave_part` says; else the feature switches as a
        whole."""
        if not self._leave_part(impl, error, why, args):
            self._fallbacks.switch(self._feature, why)
        self.reset()

    def _refuse(self, impl: str, error: Exception, args: tuple[Any, ...]) -> None:
        why = _when_called(error)
        if not self._leave_part(impl, error, why, args):
            self._fallbacks.refuse_impl(self._feature, impl, why, how="failed at run time")
        self.reset()

    def _leave_part(self, impl: str, error: Exception, why: str, args: tuple[Any, ...]) -> bool:
        """An implementation imported on its first call that failed leaves the order; a
        kernel that failed for a dtype the feature routes on stops serving that dtype. Whether
        either applied (else the caller takes out more)."""
        fallbacks, feature = self._fallbacks, self._feature
        if isinstance(error, EntryUnloadable):
            self._loaded.pop(impl, None)
            fallbacks.refuse_impl(feature, impl, str(error))
            return True
        if fallbacks.decisions[feature].dtypes:
            fallbacks.refuse_dtype(feature, impl, dtype_name(args[0].dtype), why)
            return True
        return False

    def __repr__(self) -> str:
        return f"Routed({self._feature}: {', '.join(self._loaded)})"


def _when_called(error: Exception) -> str:
    """Why an implementation stops serving: the error its call raised (``Fallbacks`` cuts it)."""
    return f"{type(error).__name__} when called: {error}"
