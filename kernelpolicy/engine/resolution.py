"""``Resolution``: the engine's answer, and the hot path workers call per kernel launch.

``select()`` and ``gate()`` evaluate compiled CEL once per distinct call context and cache the
answer, so a repeated call is one dictionary lookup. Platform facts are bound once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kernelpolicy.dtypes import ROUTING_VARIABLES
from kernelpolicy.engine.fallbacks import Fallbacks, Host
from kernelpolicy.engine.hotpath import (
    convert,
    hot_path,
    remember,
    show,
    show_context,
)
from kernelpolicy.engine.model import Decision
from kernelpolicy.errors import ResolutionError
from kernelpolicy.limits import shown
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.cel import evaluate
from kernelpolicy.policy.compiled import CompiledFeature, PolicySet

if TYPE_CHECKING:
    from kernelpolicy.engine.reporting import RuntimeReporter


class Resolution:
    """Every feature's decision for one platform, environment and policy set.

    Attributes:
        fingerprint: A stable hash of the inputs that mattered (see ``engine.fingerprint``).
        decisions: Feature name -> :class:`Decision`, in policy order.
        select: ``select(feature, **context) -> str``, the implementation to run for one call,
            per-call conditions applied (see :meth:`_select_miss` for the rules).
        gate: ``gate(name, **context) -> bool``, a call-time boolean gate such as
            ``allreduce_rmsnorm.one_stage``.

    ``select`` and ``gate`` raise :class:`ResolutionError` when the decision is an error, the
    name is unknown, or the context misses a declared variable or has one of the wrong type.
    They are per-instance closures over a cache: a repeated context is one dict lookup. They are
    marked for TorchDynamo as constant-result functions, so that inside
    ``torch.compile(fullgraph=True)`` they are evaluated at trace time with no graph break (the
    compiled graph is guarded on the Python values of the context).
    """

    select: Callable[..., str]
    gate: Callable[..., bool]

    def __init__(
        self,
        platform: Platform,
        policies: PolicySet,
        decisions: Mapping[str, Decision],
        fingerprint: str,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
        host: Host | None = None,
    ) -> None:
        self.platform = platform
        self.policies = policies
        self.decisions: dict[str, Decision] = dict(decisions)
        # Run-time changes to the decisions (a kernel that fails, one compiling) go through
        # this one object, which tells _changed.
        self.fallbacks = Fallbacks(policies, self.decisions, host or Host(), self._changed)
        self._impls: dict[str, Callable[..., Any]] = {}
        self.fingerprint = fingerprint
        self.env = dict(env or {})
        self.overrides = dict(overrides or {})
        device = platform.primary
        self._static: dict[str, object] = {
            "vendor": platform.vendor,
            "arch": device.arch if device else "",
            "compute_units": (device.compute_units or 0) if device else 0,
            "device_count": len(platform.devices),
        }
        self._gate_static: dict[str, bool | None] = {}
        self.select = self._build_select()
        self.gate = self._build_gate()

    def __repr__(self) -> str:
        chosen = ", ".join(f"{n}={d.impl or d.reason.value}" for n, d in self.decisions.items())
        return f"<Resolution {self.fingerprint} {chosen}>"

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
            from kernelpolicy.suggest import did_you_mean  # the error path only

            close = did_you_mean(feature, self.decisions) if isinstance(feature, str) else ""
            raise ResolutionError(
                f"unknown feature {show(feature)}{close}; "
                f"the policies define: {', '.join(self.decisions)}"
            ) from None

    def impl(self, feature: str) -> Callable[..., Any]:
        """The callable of the chosen implementation, imported (and prepared) on first use.

        A feature routed per call (``by_batch``, ``dtypes``) with more than one implementation
        to route between gets a :class:`~kernelpolicy.engine.dispatch.Routed` callable, which
        chooses by the rows and dtype of its first argument.

        If the chosen kernel's library cannot be imported or built here, or the kernel fails when
        called (a compile or launch error) where the fallback succeeds on the same call, the
        feature switches to its fallback for the rest of this Resolution, and the decision says
        so. Kernels with a
        known output bug come wrapped in their guard (``.repaired`` counts repaired rows).

        Raises:
            ResolutionError: The decision is an error, or nothing can be loaded for it.
        """
        cached = self._impls.get(feature)
        if cached is not None:
            return cached
        from kernelpolicy.engine.dispatch import Routed  # call-time code: not on resolve()'s path

        decision = self._usable(feature)
        spec = self.policies.features[feature].spec
        if (spec.by_batch or spec.dtypes) and len(decision.order) > 1:
            routed = Routed(self.fallbacks, feature)  # loads decision.impl: may fall back, as below
            if len(self.decisions[feature].order) > 1:
                self._impls[feature] = routed
                return routed
            decision = self.decisions[feature]
        assert decision.impl is not None
        try:
            function = self._serving(feature, decision.impl)
        except ResolutionError as exc:
            fallback = spec.fallback
            if fallback is None or fallback == decision.impl:
                raise
            self.fallbacks.switch(feature, str(exc))
            function = self._serving(feature, fallback)
        self._impls[feature] = function
        return function

    def implementation(self, feature: str, impl: str) -> Callable[..., Any]:
        """The callable of one implementation of ``feature`` by name (what ``select()`` returned
        for a call), loaded once, with its output guards and its call-time fallback.

        Raises:
            ResolutionError: ``impl`` is not one of the decision's candidates here, or it
                cannot be loaded.
        """
        key = f"{feature}\0{impl}"
        cached = self._impls.get(key)
        if cached is not None:
            return cached
        if impl not in self._usable(feature).order:
            raise ResolutionError(f"{feature}: {show(impl)} is not a candidate here")
        function = self._serving(feature, impl)
        self._impls[key] = function
        return function

    def _serving(self, feature: str, impl: str) -> Callable[..., Any]:
        """``impl`` loaded, and unless it is the fallback, switching to it when it fails."""
        from kernelpolicy.engine.dispatch import CallTimeFallback  # as impl()

        fallbacks = self.fallbacks
        if impl == fallbacks.fallback(feature):
            return fallbacks.load(feature, impl)
        return fallbacks.load(
            feature, impl, lambda function: CallTimeFallback(fallbacks, feature, impl, function)
        )

    def _changed(self, feature: str) -> None:
        """``feature``'s decision changed at run time: its routed callable chooses again, and
        both hot paths answer from the decisions (a gate that requires the failed
        implementation turns False; cached answers go with the old functions)."""
        routed = self._impls.get(feature)
        if routed is not None:  # impl() ran: engine.dispatch is imported
            from kernelpolicy.engine.dispatch import Routed

            if isinstance(routed, Routed):
                routed.reset()
        self.select = self._build_select()
        self.gate = self._build_gate()

    @property
    def runtime_fallbacks(self) -> dict[str, str]:
        """Feature -> what changed at run time (a kernel that failed, one compiling)."""
        return self.fallbacks.notes

    @property
    def compiling_calls(self) -> dict[str, int]:
        """Feature -> calls served by another candidate while a kernel variant compiled."""
        return self.fallbacks.compiling_calls

    @property
    def revision(self) -> int | None:
        """The daemon revision this came from (``connect()``; None in-process)."""
        return self.fallbacks.host.revision

    @property
    def policy_error(self) -> str | None:
        """The daemon's last policy reload error (``connect()``; None in-process)."""
        return self.fallbacks.host.policy_error

    @property
    def reporter(self) -> RuntimeReporter | None:
        """Where run-time events go (the node's daemon, where one listens), or None."""
        return self.fallbacks.host.reporter

    def to_dict(self) -> dict[str, Any]:
        """The ``explain --json`` document: the fingerprint (of every input that mattered, the
        node's hardware and environment included), the policy digest (of the policy files
        alone: equal on every node that runs the same files) and the decisions."""
        return {
            "fingerprint": self.fingerprint,
            "policy_digest": self.policies.digest,
            "decisions": {name: d.to_dict() for name, d in self.decisions.items()},
        }

    def log_fields(self) -> dict[str, Any]:
        """The fields of the decision log's ``kernelpolicy.resolved`` event (plain values)."""
        warnings = [w for d in self.decisions.values() for w in d.warnings]
        primary = self.platform.primary
        return {
            "fingerprint": self.fingerprint,
            "vendor": self.platform.vendor,
            "arch": primary.arch if primary else None,
            "decisions": {n: d.impl or f"<{d.reason.value}>" for n, d in self.decisions.items()},
            "errors": self.errors or None,
            "warnings": warnings or None,
            "policies": list(self.policies.files),
        }

    # The slow paths: validate the context, evaluate CEL, remember the answer.

    def _usable(self, feature: str) -> Decision:
        decision = self.decision(feature)
        if decision.error is not None:
            raise ResolutionError(f"{feature}: {decision.error}")
        if decision.impl is None:
            raise ResolutionError(f"{feature}: {decision.reasons[0]}")
        return decision

    def _build_gate(self) -> Callable[..., bool]:
        """The gate hot path; a gate whose required implementation is not the one chosen now
        is False for every call."""
        self._gate_static = {}
        for name, gate in self.policies.gates.items():
            req = gate.spec.requires
            chosen = self.decisions[req.feature].impl if req else None
            self._gate_static[name] = False if req and chosen != req.impl else None
        return hot_path(
            "gate", {name: tuple(g.spec.context) for name, g in self.policies.gates.items()},
            self._gate_miss,
        )  # fmt: skip

    def _build_select(self) -> Callable[..., str]:
        from kernelpolicy.engine.rules import compiled_rules, namespace, routing_variables

        contexts = {
            name: (*f.spec.context, *routing_variables(f))
            for name, f in self.policies.features.items()
        }
        scope = namespace()
        fast = compiled_rules(self.policies, self.decisions, self._static, scope)
        try:
            return hot_path("select", contexts, self._select_miss, fast=fast, namespace=scope)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            # Each rule compiled on its own in verify(); should the generated function as a
            # whole still not compile, every feature goes through the cache and CEL.
            return hot_path("select", contexts, self._select_miss)

    def _compiled_rules(self) -> dict[str, list[str]]:
        """Feature -> the Python body of its ``select`` rule (see ``engine.rules``)."""
        from kernelpolicy.engine.rules import compiled_rules, namespace

        return compiled_rules(self.policies, self.decisions, self._static, namespace())

    def _select_miss(
        self,
        cache: dict[Any, Any],
        feature: str,
        key: tuple[Any, ...] | None,
        context: Mapping[str, object],
    ) -> str:
        """Try the decision's order for this call's ``batch`` and ``dtype`` (when the feature
        routes on them and the call gives them) and return the first implementation whose
        ``when`` holds for this context (one without ``when`` always holds)."""
        decision = self._usable(feature)  # raises for an unknown feature or an error decision
        compiled = self.policies.features[feature]
        call = f"select({feature!r})"
        variables = self._variables(call, compiled.spec.context, context)
        batch, dtype = self._routing_values(call, compiled, context, variables)
        for impl in decision.order_for(batch, dtype):
            candidate = compiled.candidate(impl)
            if (
                candidate is None
                or candidate.when is None
                or self._holds(
                    f"select({feature!r})", candidate.when, variables, compiled.spec.context
                )
            ):
                return str(remember(cache, key, impl))
        raise ResolutionError(
            f"select({feature!r}): no implementation accepts this call ({show_context(context)})"
        )

    def _gate_miss(
        self,
        cache: dict[Any, Any],
        name: str,
        key: tuple[Any, ...] | None,
        context: Mapping[str, object],
    ) -> bool:
        gate = self.policies.gates.get(name)
        if gate is None or cache is None:
            from kernelpolicy.suggest import did_you_mean  # the error path only

            known = ", ".join(self.policies.gates) or "none"
            close = did_you_mean(name, self.policies.gates) if isinstance(name, str) else ""
            raise ResolutionError(f"unknown gate {show(name)}{close}; the policies define: {known}")
        variables = self._variables(f"gate({name!r})", gate.spec.context, context)
        static = self._gate_static[name]
        result = (
            static
            if static is not None
            else self._holds(f"gate({name!r})", gate.rule, variables, gate.spec.context)
        )
        return bool(remember(cache, key, result))

    @staticmethod
    def _routing_values(
        call: str,
        feature: CompiledFeature,
        context: Mapping[str, object],
        variables: Mapping[str, object],
    ) -> tuple[int | None, str | None]:
        """The call's ``batch`` and ``dtype`` where the feature routes on them (None: not
        routed on, or an optional one the call does not give)."""
        from kernelpolicy.engine.rules import routing_variables

        values: dict[str, object] = {}
        optional = routing_variables(feature)
        used = {"batch": bool(feature.spec.by_batch), "dtype": bool(feature.spec.dtypes)}
        for name, kind in ROUTING_VARIABLES.items():
            if not used[name]:
                continue
            if name in optional:
                if name in context:
                    values[name] = convert(call, name, kind, context[name])
            else:
                values[name] = variables[name]
        batch, dtype = values.get("batch"), values.get("dtype")
        return (batch if isinstance(batch, int) else None), (
            dtype if isinstance(dtype, str) else None
        )

    def _variables(
        self, call: str, declared: Mapping[str, str], context: Mapping[str, object]
    ) -> dict[str, object]:
        missing = [k for k in declared if k not in context]
        if missing:
            raise ResolutionError(f"{call}: missing context variable(s) {', '.join(missing)}")
        variables = dict(self._static)
        for name, kind in declared.items():
            variables[name] = convert(call, name, kind, context[name])
        return variables

    @staticmethod
    def _holds(
        call: str, program: Any, variables: Mapping[str, object], declared: Mapping[str, str]
    ) -> bool:
        try:
            return evaluate(program, variables)
        except Exception as exc:  # CEL's errors, a division by zero, an overflow, a panic
            context = show_context({name: variables[name] for name in declared})
            raise ResolutionError(
                f"{call}: condition failed to evaluate for {context}: "
                f"{type(exc).__name__}: {shown(str(exc), 200)}"
            ) from exc
