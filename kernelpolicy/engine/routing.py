"""Per-call routing of one decision: by the call's ``batch`` (a policy's ``by_batch`` rows,
the measured winners per batch range) and by its ``dtype`` (stored ``kernelpolicy verify``
evidence per dtype).

Worked out once, when the decision is made; a call only looks its order up
(:meth:`Decision.order_for`). The rules:

- ``by_batch`` applies to a decision the policy made (``preferred`` or ``fallback``); a forced
  or switch-requested implementation serves every batch, as asked.
- An implementation whose evidence names dtypes serves only the dtypes it passed; one with no
  evidence, or evidence that names no dtype, serves every dtype (as before per-dtype evidence
  existed). ``verified = true`` still needs evidence to be chosen at all.
- The feature's fallback serves every dtype whatever its evidence says: something must.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kernelpolicy.engine.model import BatchRoute, Decision, DtypeRule, Reason
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.policy.compiled import CompiledFeature


def route(feature: CompiledFeature, decision: Decision, evidence: Evidence | None) -> Decision:
    """``decision`` with its batch routes, dtype rules and their explanation added."""
    spec = feature.spec
    if decision.impl is None or not (spec.by_batch or spec.dtypes):
        return decision
    if len(decision.order) == 1:  # one implementation serves every call: nothing to route
        return dataclasses.replace(decision, dtypes=tuple(spec.dtypes))
    lines: list[str] = []
    routes: tuple[BatchRoute, ...] = ()
    if spec.by_batch and decision.reason in (Reason.PREFERRED, Reason.FALLBACK):
        routes = _batch_routes(feature, decision.order)
        if all(r.order == decision.order for r in routes):
            routes = ()  # what the rows prefer is not usable here: the same order everywhere
    elif spec.by_batch:
        lines.append(f"by batch: not applied, {decision.impl} is {decision.reason.value}")
    rules, rule_lines = _dtype_rules(feature, decision.order, evidence) if spec.dtypes else ((), [])
    routed = dataclasses.replace(
        decision, routes=routes, dtype_rules=rules, dtypes=tuple(spec.dtypes)
    )
    lines += [f"by batch {r.label}: {_then(r.order)}" + _ref(r.reference) for r in routes]
    if routes and uncovered(routes):
        gaps = ", ".join(label(low, high) for low, high in uncovered(routes))
        lines.append(f"by batch {gaps}: {_then(decision.order)} (no by_batch row)")
    lines += rule_lines
    lines += serving_lines(routed)
    return dataclasses.replace(routed, reasons=(*decision.reasons, *lines))


def _then(order: Sequence[str]) -> str:
    return " then ".join(order)


def _ref(reference: str | None) -> str:
    return f" ({reference})" if reference else ""


def label(low: int, high: int | None) -> str:
    if high is None:
        return f"{low}+"
    return str(low) if low == high else f"{low}-{high}"


def _batch_routes(feature: CompiledFeature, order: tuple[str, ...]) -> tuple[BatchRoute, ...]:
    """Each row's ``prefer`` (those usable here) first, then the rest of ``order``."""
    routes = []
    for row in feature.spec.by_batch:
        first = [impl for impl in row.prefer if impl in order]
        routed = (*first, *(impl for impl in order if impl not in first))
        routes.append(BatchRoute(row.min, row.max, routed, row.reference))
    return tuple(routes)


def uncovered(routes: Sequence[BatchRoute]) -> list[tuple[int, int | None]]:
    """The batch ranges (from 1) that no route covers, in order."""
    gaps: list[tuple[int, int | None]] = []
    low = 1
    for start, end in sorted((r.low, r.high) for r in routes):
        if start > low:
            gaps.append((low, start - 1))
        if end is None:
            return gaps
        low = max(low, end + 1)
    gaps.append((low, None))
    return gaps


def _dtype_rules(
    feature: CompiledFeature, order: tuple[str, ...], evidence: Evidence | None
) -> tuple[tuple[DtypeRule, ...], list[str]]:
    """A rule for every usable implementation whose evidence names dtypes; lines that say
    which dtypes each serves, and which implementations no evidence limits."""
    rules: list[DtypeRule] = []
    lines: list[str] = []
    unlimited: list[str] = []
    for impl in order:
        entry = (
            evidence.get(feature.name, impl, same_draws=feature.spec.same_draws)
            if evidence is not None
            else None
        )
        if entry is None or not entry.names_dtypes:
            if impl != feature.spec.fallback:
                unlimited.append(impl)
            continue
        failed = f", failed {', '.join(entry.dtypes_failed)}" if entry.dtypes_failed else ""
        why = (
            f"kernelpolicy verify on {entry.created} passed "
            f"{', '.join(entry.dtypes_passed) or 'no dtype'}{failed}"
        )
        if impl == feature.spec.fallback:
            if entry.dtypes_failed:
                lines.append(f"dtype: {impl} serves every dtype as the fallback ({why})")
            continue
        rules.append(DtypeRule(impl, entry.dtypes_passed, (), why))
        lines.append(f"dtype: {impl} serves {', '.join(entry.dtypes_passed) or 'none'} ({why})")
    if unlimited:
        lines.append(
            f"dtype: no stored evidence per dtype for {', '.join(unlimited)}: "
            "served for every dtype (kernelpolicy verify records it)"
        )
    return tuple(rules), lines


def serving_lines(decision: Decision) -> list[str]:
    """Who serves each batch range and dtype (before per-call ``when`` conditions)."""
    ranges = [(r.low, r.high) for r in decision.routes] + (
        uncovered(decision.routes) if decision.routes else [(1, None)]
    )
    dtypes: Sequence[str | None] = decision.dtypes or (None,)
    lines = []
    for low, high in sorted(ranges):
        served: dict[str, list[str]] = {}
        for dtype in dtypes:
            order = decision.order_for(low, dtype)
            served.setdefault(order[0] if order else "(none)", []).append(dtype or "")
        text = "; ".join(
            f"{impl}" + (f" for {', '.join(names)}" if decision.dtypes else "")
            for impl, names in served.items()
        )
        lines.append(f"serves batch {label(low, high)}: {text}")
    return lines
