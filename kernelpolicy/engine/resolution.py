"""``Resolution``: the engine's answer, and the hot path workers call per kernel launch.

``select()`` and ``gate()`` evaluate compiled CEL once per distinct call context and cache the
answer, so a repeated call is one dictionary lookup. Platform facts are bound once, here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelpolicy.engine.model import Decision
from kernelpolicy.errors import ResolutionError
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.cel import evaluate
from kernelpolicy.policy.compiled import PolicySet

_CACHE_LIMIT = 8192  # distinct call contexts per Resolution before the cache starts over
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "double": (float, int),
    "string": (str,),
}


@dataclass(eq=False)
class Resolution:
    """Every feature's decision for one platform, environment and policy set.

    Attributes:
        fingerprint: A stable hash of the inputs that mattered (see ``engine.fingerprint``).
        decisions: Feature name -> :class:`Decision`, in policy order.
    """

    platform: Platform
    policies: PolicySet
    decisions: Mapping[str, Decision]
    fingerprint: str
    env: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        device = self.platform.primary
        self._static: dict[str, object] = {
            "vendor": self.platform.vendor,
            "arch": device.arch if device else "",
            "compute_units": device.compute_units or 0 if device else 0,
            "device_count": len(self.platform.devices),
        }
        self._select_cache: dict[tuple[Any, ...], str] = {}
        self._gate_cache: dict[tuple[Any, ...], bool] = {}
        # A gate whose required implementation was not chosen is False for every call.
        self._gate_static: dict[str, bool | None] = {}
        for name, gate in self.policies.gates.items():
            req = gate.spec.requires
            chosen = self.decisions[req.feature].impl if req else None
            self._gate_static[name] = False if req and chosen != req.impl else None

    @property
    def errors(self) -> dict[str, str]:
        """Feature -> error message, for every decision that is an error."""
        return {n: d.error for n, d in self.decisions.items() if d.error is not None}

    def decision(self, feature: str) -> Decision:
        """The decision for ``feature``.

        Raises:
            ResolutionError: No policy defines ``feature``.
        """
        try:
            return self.decisions[feature]
        except KeyError:
            raise ResolutionError(
                f"unknown feature {feature!r}; the policies define: {', '.join(self.decisions)}"
            ) from None

    def select(self, feature: str, /, **context: object) -> str:
        """The implementation to run for one call, per-call conditions applied.

        Args:
            feature: A feature name.
            **context: The call context the feature declares (``has_generators=...``).

        Raises:
            ResolutionError: The decision is an error, the feature is unknown, or the context
                is missing a variable or has one of the wrong type.
        """
        key = (feature, *context.items())
        try:
            return self._select_cache[key]
        except KeyError:
            return self._select_miss(feature, key, context)
        except TypeError:  # an unhashable context value: evaluate without caching
            return self._select_miss(feature, None, context)

    def gate(self, name: str, /, **context: object) -> bool:
        """A call-time boolean gate such as ``allreduce_rmsnorm.one_stage``.

        Raises:
            ResolutionError: The gate is unknown or the context does not fit its declaration.
        """
        key = (name, *context.items())
        try:
            return self._gate_cache[key]
        except KeyError:
            return self._gate_miss(name, key, context)
        except TypeError:
            return self._gate_miss(name, None, context)

    def impl(self, feature: str) -> Callable[..., Any]:
        """The callable of the chosen implementation (imported on first use).

        Raises:
            ResolutionError: The decision is an error, or no entry point is known for it.
        """
        decision = self._usable(feature)
        assert decision.impl is not None
        candidate = self.policies.features[feature].candidate(decision.impl)
        entry = candidate.spec.entry if candidate else None
        if entry is None:
            from kernelpolicy.policy.names import builtin_entry

            entry = builtin_entry(feature, decision.impl)
        if entry is None:
            raise ResolutionError(
                f"{feature}: no callable is registered for implementation {decision.impl!r}; "
                "give the candidate an 'entry = \"module:function\"'"
            )
        module, _, attr = entry.partition(":")
        try:
            function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ResolutionError(f"{feature}/{decision.impl}: cannot load {entry}: {exc}") from exc
        return function

    def to_dict(self) -> dict[str, Any]:
        """The ``explain --json`` document."""
        return {
            "fingerprint": self.fingerprint,
            "decisions": {name: d.to_dict() for name, d in self.decisions.items()},
        }

    # The slow paths: validate the context, evaluate CEL, remember the answer.

    def _usable(self, feature: str) -> Decision:
        decision = self.decision(feature)
        if decision.error is not None:
            raise ResolutionError(f"{feature}: {decision.error}")
        if decision.impl is None:
            raise ResolutionError(f"{feature}: {decision.reasons[0]}")
        return decision

    def _select_miss(self, feature: str, key: tuple[Any, ...] | None, context: Mapping[str, object]) -> str:
        decision = self._usable(feature)
        compiled = self.policies.features[feature]
        variables = self._variables(f"select({feature!r})", compiled.spec.context, context)
        for impl in decision.order:
            candidate = compiled.candidate(impl)
            if candidate is None or candidate.when is None or self._holds(feature, candidate.when, variables):
                return self._remember(self._select_cache, key, impl)
        raise ResolutionError(f"{feature}: no implementation accepts this call ({dict(context)})")

    def _gate_miss(self, name: str, key: tuple[Any, ...] | None, context: Mapping[str, object]) -> bool:
        gate = self.policies.gates.get(name)
        if gate is None:
            known = ", ".join(self.policies.gates) or "none"
            raise ResolutionError(f"unknown gate {name!r}; the policies define: {known}")
        variables = self._variables(f"gate({name!r})", gate.spec.context, context)
        static = self._gate_static[name]
        result = static if static is not None else self._holds(name, gate.rule, variables)
        return self._remember(self._gate_cache, key, result)

    def _variables(self, call: str, declared: Mapping[str, str], context: Mapping[str, object]) -> dict[str, object]:
        unknown = [k for k in context if k not in declared]
        if unknown:
            raise ResolutionError(
                f"{call}: unknown context variable {unknown[0]!r}; declared: {', '.join(declared) or 'none'}"
            )
        missing = [k for k in declared if k not in context]
        if missing:
            raise ResolutionError(f"{call}: missing context variable(s) {', '.join(missing)}")
        variables = dict(self._static)
        for name, kind in declared.items():
            variables[name] = _convert(call, name, kind, context[name])
        return variables

    @staticmethod
    def _holds(name: str, program: Any, variables: Mapping[str, object]) -> bool:
        try:
            return evaluate(program, variables)
        except (TypeError, RuntimeError, ValueError) as exc:
            raise ResolutionError(f"{name}: condition failed to evaluate: {exc}") from exc

    @staticmethod
    def _remember(cache: dict[Any, Any], key: tuple[Any, ...] | None, value: Any) -> Any:
        if key is not None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = value
        return value


def _convert(call: str, name: str, kind: str, value: object) -> object:
    """Check a context value against its declared type; dtypes become their names."""
    if kind == "string" and not isinstance(value, str) and type(value).__module__ == "torch":
        return str(value).removeprefix("torch.")  # torch.bfloat16 -> "bfloat16"
    if kind in ("int", "double") and isinstance(value, bool):
        ok = False
    else:
        ok = isinstance(value, _PY_TYPES[kind])
    if not ok:
        raise ResolutionError(
            f"{call}: context variable {name!r} must be {kind}, got {type(value).__name__} {value!r}"
        )
    return float(value) if kind == "double" else value  # type: ignore[arg-type]
