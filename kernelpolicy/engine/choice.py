"""The choice among a feature's checked candidates, written as its Decision.

Given each candidate's checks (:mod:`kernelpolicy.engine.decide` works them out), this picks
what runs (forced, else requested by a switch, else the first accepted) or the error, and
writes the lines, warnings and hints ``explain`` prints. Pure, as the engine is.
"""

from __future__ import annotations

from kernelpolicy.engine.cohort import UnappliedDisableNote
from kernelpolicy.engine.model import (
    DEVICE_CHECKS,
    CandidateResult,
    CheckKind,
    Decision,
    ErrorCode,
    Reason,
)
from kernelpolicy.engine.switches import force_variable, over_limit_message
from kernelpolicy.limits import shown
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledFeature
from kernelpolicy.suggest import did_you_mean


def choose(
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
        return error_decision(
            feature, results, ErrorCode.REQUIRED_UNSUPPORTED, message, requested.hints
        )
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
        return error_decision(feature, results, ErrorCode.NO_IMPLEMENTATION, message, hints)
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
    return error_decision(feature, results, ErrorCode.ALL_DISABLED, message, hints)


def _only_disabled(result: CandidateResult) -> bool:
    """Rejected by [[disable]] entries and nothing else: it would run here otherwise."""
    return bool(result.failures) and all(f.kind is CheckKind.DISABLED for f in result.failures)


def _forced(feature: CompiledFeature, results: list[CandidateResult], forced: str) -> Decision:
    """What ``forced`` gives. A name the feature lacks gets here only where the forces were not
    checked against these policies (a daemon's reload of files that dropped it): the front
    doors refuse it first (:func:`kernelpolicy.engine.forces.check_forces`)."""
    variable = force_variable(feature.name)
    match = next((r for r in results if r.impl == forced), None)
    if match is None:
        names = ", ".join(r.impl for r in results)
        message = over_limit_message(variable, forced, f"one of {names}") or (
            f"{variable}={shown(forced)!r} is not an implementation of {feature.name}"
            f"{did_you_mean(forced, (r.impl for r in results))}; expected one of {names}"
        )
        return error_decision(feature, results, ErrorCode.UNKNOWN_IMPLEMENTATION, message, ())
    if not match.supported:
        message = f"{variable}={forced} forces {forced}, which is not supported here: " + "; ".join(
            f.message for f in match.failures if f.kind not in _NOT_REFUSALS
        )
        return error_decision(
            feature, results, ErrorCode.REQUIRED_UNSUPPORTED, message, match.hints
        )
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
    warnings = tuple(_fallback_warning(r, chosen) for r in results[:index] if _warn_about(r))
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


def _warn_about(result: CandidateResult) -> bool:
    """Warn when a candidate meant for this machine's hardware, left on auto, was rejected for
    a reason someone can fix (not a workaround or an operator's switch-off).

    A candidate that fails a check of the device itself (:data:`DEVICE_CHECKS`: another vendor,
    no GPU, a compute capability, arch or compute-unit count the device lacks, such as a
    Blackwell-only kernel on a Hopper node) is not meant for it: nothing installed or set
    makes it run, so it is the policy working, never a warning. ``explain`` still shows it
    among the rejected candidates, with no hint (:attr:`CandidateResult.hints`)."""
    kinds = {f.kind for f in result.failures}
    return (
        result.switch == "auto"
        and bool(kinds)
        and not kinds & DEVICE_CHECKS
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
    """Why ``result`` was rejected; then each staged disable of it that does not apply on this
    node (a note of the candidate's, which a chosen candidate shows on a line of its own)."""
    line = f"{result.impl} rejected: " + "; ".join(map(str, result.failures))
    staged = [n for n in result.notes if isinstance(n, UnappliedDisableNote)]
    return line + "".join(f"; note: {n.message}" for n in staged)


def error_decision(
    feature: CompiledFeature,
    results: list[CandidateResult],
    code: ErrorCode,
    message: str,
    hints: tuple[str, ...],
) -> Decision:
    """The feature's error: ``message`` with its code and hints, and every rejected candidate."""
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
