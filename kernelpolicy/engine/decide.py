"""The engine: ``resolve_policies(platform, env, policies) -> Resolution``.

A pure function. Same platform, environment, policies, overrides and evidence give the same
decisions and the same fingerprint; it reads no file, no environment variable and no clock.
This module gathers what the engine reads of its inputs and checks each candidate (its checks,
switches, rollout and halt); :mod:`kernelpolicy.engine.choice` chooses among the results.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernelpolicy.engine.checks import check_candidate
from kernelpolicy.engine.choice import choose, error_decision
from kernelpolicy.engine.cohort import (
    NodeDisables,
    disable_cohorts_of,
    place,
    place_disables,
    rollout_check,
    rollouts_of,
    staged_disables,
)
from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.fingerprint import fingerprint
from kernelpolicy.engine.model import (
    CandidateResult,
    Check,
    CheckKind,
    Decision,
    ErrorCode,
)
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.engine.routing import route
from kernelpolicy.engine.switches import (
    SwitchOutcome,
    evaluate_switches,
    force_variable,
    read_variables,
)
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.platform.envvars import carried, carried_env
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledCandidate, CompiledFeature, PolicySet


def resolve_policies(
    platform: Platform,
    env: Mapping[str, str],
    policies: PolicySet,
    overrides: Mapping[str, str] | None = None,
    evidence: Evidence | None = None,
    *,
    halts: Mapping[str, str] | None = None,
    host: Host | None = None,
) -> Resolution:
    """Decide every feature of ``policies`` for ``platform`` under ``env``.

    Args:
        platform: The probed (or loaded) platform.
        env: Environment variables, read only for the switches the policies name and for
            ``KERNELPOLICY_FORCE_<FEATURE>``.
        policies: A compiled policy set.
        overrides: Feature -> implementation to force (settings); env forces win.
        evidence: The stored ``verify`` results for this platform, for ``verified = true``.
        halts: ``feature/impl`` -> why, for the candidates halted on this node (the daemon's
            ``halt_on`` state, see :mod:`kernelpolicy.server.halts`): each is rejected with a
            ``halted`` check. Pairs the policies do not have are ignored.
        host: What the calling process gives the Resolution (its log, the node's daemon).
    """
    relevant_env, forced, halted = _engine_inputs(env, policies, overrides, halts)
    here = place_disables(policies.disables, platform)
    decisions = {
        name: decide(
            feature, platform, relevant_env, policies, forced.get(name),
            evidence=evidence, halts=halted, disables=here,
        )
        for name, feature in policies.features.items()
    }  # fmt: skip
    return Resolution(
        platform=platform, policies=policies, decisions=decisions,
        fingerprint=fingerprint(
            platform, relevant_env, policies, forced,
            # No entries is no evidence: the bundled pack reads the store for its dtype
            # routing, and a machine with nothing stored keeps the fingerprint it had.
            evidence.digest() if evidence is not None and evidence.entries else None,
            cohorts=cohorts_of(decisions), halted=halted,
        ),
        env=relevant_env, overrides=forced, host=host,
    )  # fmt: skip


def _engine_inputs(
    env: Mapping[str, str],
    policies: PolicySet,
    overrides: Mapping[str, str] | None,
    halts: Mapping[str, str] | None,
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What the engine reads of its inputs: the variables the policies read, what is forced
    (overrides, the environment's forces winning) and the halts of the policies' candidates."""
    # Only the variables the policies read, each in its carried form (cut, or not carried at
    # all over MAX_ENV_VALUE_CHARS): the engine never sees more, so no decision, error, log or
    # answer built from it can show more, and a client rebuilding this from the answer's inputs
    # decides the same (the carried form is stable).
    relevant_env = carried_env(env, read_variables(policies))
    forced = {name: carried(value) for name, value in (overrides or {}).items()}
    for name in policies.features:
        value = relevant_env.get(force_variable(name), "")
        if value:
            forced[name] = value
    halted = {key: why for key, why in (halts or {}).items() if _is_candidate(policies, key)}
    return relevant_env, forced, halted


def cohorts_of(decisions: Mapping[str, Decision]) -> dict[str, str]:
    """``feature/impl`` -> the node's cohort, for every candidate with a rollout; and for every
    staged disable, ``feature/impl disabled at FILE:LINE`` -> the node's cohort in it."""
    found = {f"{name}/{impl}": result.cohort.value for name, impl, result in rollouts_of(decisions)}
    found.update(disable_cohorts_of(decisions))
    return found


def halts_of(decisions: Mapping[str, Decision]) -> dict[str, str]:
    """``feature/impl`` -> why, for every candidate halted on this node: what
    :func:`resolve_policies` was given as ``halts`` (a client rebuilds the same decisions)."""
    return {
        f"{name}/{c.impl}": f.message.removeprefix(HALTED_PREFIX)
        for name, decision in decisions.items()
        for c in decision.candidates
        for f in c.failures
        if f.kind is CheckKind.HALTED
    }


HALTED_PREFIX = "halted on this node: "


def _is_candidate(policies: PolicySet, key: str) -> bool:
    feature, _, impl = key.rpartition("/")
    compiled = policies.features.get(feature)
    return compiled is not None and compiled.candidate(impl) is not None


def _halted_check(feature: str, why: str) -> Check:
    return Check(
        CheckKind.HALTED,
        HALTED_PREFIX + why,
        f"kernelpolicy status --clear-halt {feature} (or change its policy) to try it again",
    )


def decide(
    feature: CompiledFeature,
    platform: Platform,
    env: Mapping[str, str],
    policies: PolicySet,
    forced: str | None,
    *,
    evidence: Evidence | None = None,
    halts: Mapping[str, str] | None = None,
    disables: NodeDisables | None = None,
) -> Decision:
    """One feature's decision; see README "How a decision is made". ``disables``: the
    policies' disables placed on this node (:func:`place_disables`; placed here when not
    given)."""
    here = disables if disables is not None else place_disables(policies.disables, platform)
    results: list[CandidateResult] = []
    env_problem: tuple[ErrorCode, str] | None = None
    for candidate in feature.candidates:
        result, problem = _candidate_result(
            feature, candidate, platform, env, here, evidence=evidence, halts=halts
        )
        results.append(result)
        if env_problem is None:
            env_problem = problem  # the first candidate's problem is the one reported
    if env_problem is not None:
        return error_decision(feature, results, env_problem[0], env_problem[1], ())
    return route(feature, choose(feature, results, platform, forced), evidence)


def _candidate_result(
    feature: CompiledFeature,
    candidate: CompiledCandidate,
    platform: Platform,
    env: Mapping[str, str],
    disables: NodeDisables,
    *,
    evidence: Evidence | None,
    halts: Mapping[str, str] | None,
) -> tuple[CandidateResult, tuple[ErrorCode, str] | None]:
    """One candidate's checks (against the disables that apply on this node), switches,
    rollout and halt; and what its switches find wrong with the environment (``None``:
    nothing)."""
    checked = check_candidate(
        candidate, platform, disables.applying, evidence,
        by_dtype=bool(feature.spec.dtypes), same_draws=feature.spec.same_draws,
    )  # fmt: skip
    switch = evaluate_switches(candidate.spec.switches, env)
    failures = list(checked.failures)
    notes = list(checked.notes)
    staged_disables(disables, feature.name, candidate.impl, failures, notes)
    if switch.state == "off":
        failures.append(Check(CheckKind.SWITCH_OFF, f"switched off ({switch.source})"))
    rollout = place(candidate.rollout, platform) if candidate.rollout is not None else None
    said = rollout_check(rollout) if rollout is not None else None
    if isinstance(said, Check):
        failures.append(said)
    elif said is not None:
        notes.append(said)
    why = (halts or {}).get(f"{feature.name}/{candidate.impl}")
    if why is not None:
        failures.append(_halted_check(feature.name, why))
    result = CandidateResult(
        impl=candidate.impl, switch=switch.state, switch_source=switch.source,
        failures=tuple(failures), notes=tuple(notes), when=candidate.spec.when,
        guards=tuple(checked.guards), rollout=rollout,
    )  # fmt: skip
    return result, _switch_problem(candidate.impl, switch)


def _switch_problem(impl: str, switch: SwitchOutcome) -> tuple[ErrorCode, str] | None:
    """A switch variable with a bad value, else switches that disagree, else ``None``."""
    if switch.error:
        return ErrorCode.BAD_ENVIRONMENT, switch.error
    if switch.conflict:
        disagree = f"{impl}: switches disagree ({switch.source}): one says on, one says off"
        return ErrorCode.SWITCH_CONFLICT, disagree
    return None
