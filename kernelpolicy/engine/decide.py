"""The engine: ``resolve_policies(platform, env, policies) -> Resolution``.

A pure function. Same platform, environment, policies, overrides and evidence give the same
decisions and the same fingerprint; it reads no file, no environment variable and no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernelpolicy.engine.checks import check_candidate
from kernelpolicy.engine.cohort import place, rollout_check, rollouts_of
from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.fingerprint import fingerprint
from kernelpolicy.engine.model import (
    DEVICE_CHECKS,
    CandidateResult,
    Check,
    CheckKind,
    Decision,
    ErrorCode,
    Reason,
)
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.engine.routing import route
from kernelpolicy.engine.switches import (
    SwitchOutcome,
    evaluate_switches,
    force_variable,
    over_limit_message,
    read_variables,
)
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.limits import shown
from kernelpolicy.platform.envvars import carried, carried_env
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledCandidate, CompiledFeature, PolicySet
from kernelpolicy.suggest import did_you_mean


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
        evidence: Stored conformance results for this platform, for ``verified = true``.
        halts: ``feature/impl`` -> why, for the candidates halted on this node (the daemon's
            ``halt_on`` state, see :mod:`kernelpolicy.server.halts`): each is rejected with a
            ``halted`` check. Pairs the policies do not have are ignored.
        host: What the calling process gives the Resolution (its log, the node's daemon).
    """
    relevant_env, forced, halted = _engine_inputs(env, policies, overrides, halts)
    decisions = {
        name: decide(
            feature, platform, relevant_env, policies, forced.get(name),
            evidence=evidence, halts=halted,
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
    """``feature/impl`` -> the node's cohort, for every candidate with a rollout."""
    return {f"{name}/{impl}": result.cohort.value for name, impl, result in rollouts_of(decisions)}


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
) -> Decision:
    """One feature's decision; see README "How a decision is made"."""
    results: list[CandidateResult] = []
    env_problem: tuple[ErrorCode, str] | None = None
    for candidate in feature.candidates:
        result, problem = _candidate_result(
            feature, candidate, platform, env, policies, evidence=evidence, halts=halts
        )
        results.append(result)
        if env_problem is None:
            env_problem = problem  # the first candidate's problem is the one reported
    if env_problem is not None:
        return _error(feature, results, env_problem[0], env_problem[1], ())
    return route(feature, _choose(feature, results, platform, forced), evidence)


def _candidate_result(
    feature: CompiledFeature,
    candidate: CompiledCandidate,
    platform: Platform,
    env: Mapping[str, str],
    policies: PolicySet,
    *,
    evidence: Evidence | None,
    halts: Mapping[str, str] | None,
) -> tuple[CandidateResult, tuple[ErrorCode, str] | None]:
    """One candidate's checks, switches, rollout and halt; and what its switches find wrong
    with the environment (``None``: nothing)."""
    checked = check_candidate(
        candidate, platform, policies.disables, evidence,
        by_dtype=bool(feature.spec.dtypes), same_draws=feature.spec.same_draws,
    )  # fmt: skip
    switch = evaluate_switches(candidate.spec.switches, env)
    failures = list(checked.failures)
    notes = list(checked.notes)
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


def _choose(
    feature: CompiledFeature,
    results: list[CandidateResult],
    platform: Platform,
    forced: str | None,
) -> Decision:
    """Forced, else requested by a switch, else the first accepted, else required or n/a."""
    if forced is not None:
        return _forced(feature, results, forced)
    requested = next((r for r in results if r.switch == "on"), None)
    if requested is not None:
        if requested.supported:
            return _chosen(feature, results, requested, Reason.REQUESTED)
        message = (
            f"{requested.switch_source} requires {requested.impl}, which is not supported here: "
            + "; ".join(f.message for f in requested.failures)
        )
        return _error(feature, results, ErrorCode.REQUIRED_UNSUPPORTED, message, requested.hints)
    accepted = next((r for r in results if r.accepted), None)
    if accepted is not None:
        reason = (
            Reason.FALLBACK
            if accepted.impl == feature.spec.fallback and accepted is not results[0]
            else Reason.PREFERRED
        )
        return _chosen(feature, results, accepted, reason)
    return _none_accepted(feature, results, platform)


def _none_accepted(
    feature: CompiledFeature, results: list[CandidateResult], platform: Platform
) -> Decision:
    """No candidate is accepted: an error when disables took them or the feature is required
    here, else not applicable."""
    disabled = [r for r in results if _only_disabled(r)]
    if disabled:
        return _all_disabled(feature, results, disabled)
    required = feature.spec.required
    if required is not None and required.vendor in (None, platform.vendor):
        message = f"{feature.name} is required here and no implementation is usable: " + "; ".join(
            f"{r.impl}: {', '.join(f.message for f in r.failures)}" for r in results
        )
        hints = (required.hint, *(h for r in results for h in r.hints))
        return _error(feature, results, ErrorCode.NO_IMPLEMENTATION, message, hints)
    lines = [f"no implementation applies on this platform (vendor {platform.vendor})"]
    lines += [_rejected_line(r) for r in results]
    return Decision(feature.name, None, Reason.NOT_APPLICABLE, tuple(lines), tuple(results))


def _all_disabled(
    feature: CompiledFeature, results: list[CandidateResult], disabled: list[CandidateResult]
) -> Decision:
    """An operator's [[disable]] took away what would have run: never "not applicable" (the
    feature applies here, and its caller would silently lose it)."""
    message = f"{feature.name}: every implementation usable here is disabled by policy: " + (
        "; ".join(f"{r.impl}: {', '.join(f.message for f in r.failures)}" for r in disabled)
    )
    hints = tuple(h for r in disabled for h in r.hints)
    return _error(feature, results, ErrorCode.ALL_DISABLED, message, hints)


def _only_disabled(result: CandidateResult) -> bool:
    """Rejected by [[disable]] entries and nothing else: it would run here otherwise."""
    return bool(result.failures) and all(f.kind is CheckKind.DISABLED for f in result.failures)


def _forced(feature: CompiledFeature, results: list[CandidateResult], forced: str) -> Decision:
    variable = force_variable(feature.name)
    match = next((r for r in results if r.impl == forced), None)
    if match is None:
        names = ", ".join(r.impl for r in results)
        message = over_limit_message(variable, forced, f"one of {names}") or (
            f"{variable}={shown(forced)!r} is not an implementation of {feature.name}"
            f"{did_you_mean(forced, (r.impl for r in results))}; expected one of {names}"
        )
        return _error(feature, results, ErrorCode.UNKNOWN_IMPLEMENTATION, message, ())
    if not match.supported:
        message = f"{variable}={forced} forces {forced}, which is not supported here: " + "; ".join(
            f.message for f in match.failures if f.kind not in _NOT_REFUSALS
        )
        return _error(feature, results, ErrorCode.REQUIRED_UNSUPPORTED, message, match.hints)
    return _chosen(feature, results, match, Reason.FORCED)


def _chosen(
    feature: CompiledFeature,
    results: list[CandidateResult],
    chosen: CandidateResult,
    reason: Reason,
) -> Decision:
    index = results.index(chosen)
    later = [r.impl for r in results[index + 1 :] if r.accepted]
    fallback = feature.spec.fallback
    order = [chosen.impl, *later]
    if fallback and fallback not in order:
        order.append(fallback)
    lines = [_chosen_line(chosen, reason, results[:index])]
    lines += [_rejected_line(r) for r in results if r is not chosen and not r.accepted]
    warnings = tuple(
        _fallback_warning(r, chosen)
        for r in results[:index]
        if _warn_about(r) and (feature.spec.in_process or not _hardware_only(r))
    )
    if chosen.when:
        lines.append(
            f"per call: {chosen.impl} only where `{chosen.when}`, "
            f"else {' then '.join(order[1:]) or 'error'}"
        )
    lines += [
        f"note: {n.message}" + (f" ({n.reference})" if n.reference else "") for n in chosen.notes
    ]
    return Decision(
        feature.name, chosen.impl, reason, tuple(lines), tuple(results), order=tuple(order),
        warnings=warnings,
    )  # fmt: skip


_POLICY_DECISIONS = (CheckKind.WORKAROUND, CheckKind.DISABLED, CheckKind.ROLLOUT)
_NOT_REFUSALS = (CheckKind.SWITCH_OFF, CheckKind.ROLLOUT)


def _hardware_only(result: CandidateResult) -> bool:
    """Rejected for the device alone: for an engine-only feature (an attention backend for
    another GPU generation) that is the policy working, not something to fix."""
    return {f.kind for f in result.failures} <= DEVICE_CHECKS


def _warn_about(result: CandidateResult) -> bool:
    """Warn when a candidate meant for this kind of machine, left on auto, was rejected for a
    reason someone can fix (not a workaround or an operator's switch-off)."""
    kinds = {f.kind for f in result.failures}
    return (
        result.switch == "auto"
        and bool(kinds)
        and not kinds & {CheckKind.VENDOR, CheckKind.NO_DEVICE}
        and not kinds <= set(_POLICY_DECISIONS)
    )


def _fallback_warning(result: CandidateResult, chosen: CandidateResult) -> str:
    text = (
        f"{result.impl} is not supported here ({'; '.join(map(str, result.failures))}); "
        f"falling back to {chosen.impl}"
    )
    source = result.switch_source or ""
    if source.endswith(" unset"):
        text += f". Set {source.removesuffix(' unset')}=0 to silence this warning"
    return text


def _chosen_line(chosen: CandidateResult, reason: Reason, before: list[CandidateResult]) -> str:
    switch = f" ({chosen.switch_source}: {chosen.switch})" if chosen.switch_source else ""
    # A rollout that keeps the candidate off this node (out of the cohort, or the 0% kill
    # switch) yields to an explicit request: said, so that nobody takes the node for a canary.
    rollout = next((f for f in chosen.failures if f.kind is CheckKind.ROLLOUT), None)
    overridden = f"; its rollout would keep it off ({rollout.message})" if rollout else ""
    if reason is Reason.FORCED:
        return f"{chosen.impl}: forced{switch}{overridden}"
    if reason is Reason.REQUESTED:
        return f"{chosen.impl}: requested by {chosen.switch_source}, and supported{overridden}"
    if reason is Reason.FALLBACK:
        return f"{chosen.impl}: fallback, {len(before)} preferred candidate(s) rejected"
    return f"{chosen.impl}: first supported candidate{switch}"


def _rejected_line(result: CandidateResult) -> str:
    return f"{result.impl} rejected: " + "; ".join(map(str, result.failures))


def _error(
    feature: CompiledFeature,
    results: list[CandidateResult],
    code: ErrorCode,
    message: str,
    hints: tuple[str, ...],
) -> Decision:
    lines = [f"error: {message}", *(_rejected_line(r) for r in results if not r.accepted)]
    return Decision(
        feature.name,
        None,
        Reason.ERROR,
        tuple(lines),
        tuple(results),
        error=message,
        error_code=code,
        hints=tuple(dict.fromkeys(hints)),
    )
