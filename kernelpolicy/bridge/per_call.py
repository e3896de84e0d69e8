"""A choice made per call, as the bridge reports it: what ``select()`` chooses per batch range
and per dtype, for the engines told one choice (and the plugin that carries it per call), and
what else kernelpolicy checks per call that an engine told one implementation does not."""

from __future__ import annotations

import ast

from kernelpolicy.bridge.model import NO_IMPL, BatchChoice, DtypeChoice
from kernelpolicy.engine.model import Decision
from kernelpolicy.engine.routing import uncovered
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledFeature
from kernelpolicy.policy.transpile import Untranslatable, fold, translate

# The call variables an engine's own code checks before it runs what the bridge tells it, per
# feature: a candidate's condition on them holds in that engine too, so it is not reported.
ENGINE_CHECKS: dict[tuple[str, str], frozenset[str]] = {
    # vLLM's TopKTopPSampler sends seeded rows (generators) and rows with neither k nor p to
    # forward_native, and installs no accelerated path for the processed logprobs modes
    # (v1/sample/ops/topk_topp_sampler.py 0.12.0 :28-34, :69-80, :124, :178; 0.33.0 :246,
    # :272, :326, :419)
    ("vllm", "sampler.top_k_top_p"): frozenset(
        {"has_generators", "has_top_k", "has_top_p", "logprobs_mode"}
    ),
    # SGLang samples rows with neither k nor p with PyTorch whatever its backend (layers/
    # sampler.py 0.5.23 :225-229, :383-387); it seeds rows only under deterministic inference,
    # which sets the pytorch backend (sampling/sampling_batch_info.py 0.5.23 :157-170,
    # arg_groups/overrides.py :1030-1035); and it has no --logprobs-mode (vLLM's)
    ("sglang", "sampler.top_k_top_p"): frozenset(
        {"has_generators", "has_top_k", "has_top_p", "logprobs_mode"}
    ),
}


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


def unmet_checks(
    feature: CompiledFeature, decision: Decision, impl: str, engine: str, platform: Platform
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(variables, guards): the call variables other than ``batch`` that ``impl``'s condition
    still reads on ``platform`` (its facts inlined: ``arch == "gfx950" && ...`` reads nothing
    on a gfx942), less those ``engine`` checks itself (:data:`ENGINE_CHECKS`), and the output
    guards kernelpolicy runs on ``impl``'s results: what only ``select()`` applies in-process,
    where ``engine`` is told ``impl`` for every call."""
    candidate = feature.candidate(impl)
    result = next((r for r in decision.candidates if r.impl == impl), None)
    guards = result.guards if result is not None else ()
    if candidate is None or candidate.spec.when is None:
        return (), guards
    declared = set(feature.spec.context)
    try:
        python = fold(translate(candidate.spec.when, _static(platform), declared))
        read = {n.id for n in ast.walk(ast.parse(python, mode="eval")) if isinstance(n, ast.Name)}
    except (Untranslatable, SyntaxError, RecursionError):  # outside the subset: all it names
        read = set(candidate.when.variables())
    checked = ENGINE_CHECKS.get((engine, feature.name), frozenset())
    return tuple(sorted((read & declared) - checked - {"batch"})), guards


def unmet_note(
    feature: CompiledFeature, decision: Decision, impl: str, engine: str, platform: Platform
) -> str | None:
    """The warning for what only ``select()`` applies to ``impl`` per call
    (:func:`unmet_checks`), where ``engine`` is told ``impl`` for every call; None where
    nothing is."""
    variables, guards = unmet_checks(feature, decision, impl, engine, platform)
    what = [f"its condition on {', '.join(variables)}"] if variables else []
    if guards:
        what.append(f"its output guard{'s' if len(guards) > 1 else ''} {', '.join(guards)}")
    if not what:
        return None
    return (
        f"{feature.name}: {engine} is told {impl} for every call, but only resolve().select() "
        f"in-process (the worker bridge) applies {' and '.join(what)}, not {engine}; where "
        f"that matters, disable {impl} for {feature.name}"
    )


def _static(platform: Platform) -> dict[str, object]:
    """The platform facts a condition may read (the engine binds the same, once)."""
    device = platform.primary
    return {
        "vendor": platform.vendor,
        "arch": device.arch if device else "",
        "compute_units": (device.compute_units or 0) if device else 0,
        "device_count": len(platform.devices),
    }
