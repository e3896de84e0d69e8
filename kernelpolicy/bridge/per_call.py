"""A choice made per call, as the bridge reports it: what ``select()`` chooses per batch range
and per dtype, for the engines told one choice (and the plugin that carries it per call)."""

from __future__ import annotations

from kernelpolicy.bridge.model import NO_IMPL, BatchChoice, DtypeChoice
from kernelpolicy.engine.model import Decision
from kernelpolicy.engine.routing import uncovered
from kernelpolicy.policy.compiled import CompiledFeature


def per_batch(
    feature: CompiledFeature, decision: Decision
) -> tuple[tuple[BatchChoice, ...], tuple[str, ...]]:
    """What ``select()`` chooses per batch range (where ``by_batch`` changed the order), and
    the implementations it may return whose ``when`` reads ``batch``."""
    choices: tuple[BatchChoice, ...] = ()
    if decision.routes:
        ranges = [(r.low, r.high) for r in decision.routes] + uncovered(decision.routes)
        choices = tuple(
            BatchChoice(low, high, decision.order_for(low)[0]) for low, high in sorted(ranges)
        )
    conditions = tuple(
        c.impl
        for c in feature.candidates
        # order lists every implementation select() may return, by_batch rows included
        if c.impl in decision.order and c.when is not None and "batch" in c.when.variables()
    )
    return choices, conditions


def per_dtype(decision: Decision, impl: str) -> tuple[DtypeChoice, ...]:
    """What ``select()`` chooses per dtype (stored evidence or a run-time failure refused some
    dtype to an implementation), for calls without a batch and, where the feature routes by
    batch, per batch range; empty where no dtype changes a choice."""
    if not decision.dtype_rules:
        return ()
    ranges: list[tuple[int | None, int | None]] = [(None, None)]
    if decision.routes:
        covered = [(r.low, r.high) for r in decision.routes]
        ranges += sorted(covered + uncovered(decision.routes))
    choices = []
    for low, high in ranges:
        plain = impl if low is None else next(iter(decision.order_for(low)), NO_IMPL)
        for dtype in decision.dtypes:
            chosen = next(iter(decision.order_for(low, dtype)), NO_IMPL)
            choices.append(DtypeChoice(dtype, chosen, low, high, changed=chosen != plain))
    return tuple(choices) if any(c.changed for c in choices) else ()
