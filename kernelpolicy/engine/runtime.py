"""Call-time fallback: an accelerated kernel that fails when called (a Triton compile error for
a dtype, a launch failure, a JIT build that only happens on first use) hands the call, and every
later one in this process, to the feature's fallback, as an import failure does at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernelpolicy.limits import shown

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution

_REASON_CHARS = 300  # of the kernel's error kept in runtime_fallbacks and the decision


class CallTimeFallback:
    """Run ``function``; when it raises and the fallback succeeds on the same arguments, switch
    the feature to the fallback for the rest of the process (recorded by the Resolution in
    ``runtime_fallbacks``, the decision's warnings and ``explain``).

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
        except Exception as exc:  # a compile or launch failure inside the kernel
            return self._switch(exc, args, kwargs)

    def _switch(self, error: Exception, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        resolution, feature = self._resolution, self._feature
        name = resolution.policies.features[feature].spec.fallback
        if name is None or name == self._impl:
            raise error
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
