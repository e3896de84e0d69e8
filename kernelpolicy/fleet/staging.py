"""Which of a policy change's changes a staged rollout stages, and the rollouts a node is
placed in: a candidate's (``rollout = { percent = N }``) or a ``[[disable]]``'s. Pure functions of
the policies and of a group's cohorts, for :mod:`.diff`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kernelpolicy.fleet.outcomes import staged_disables
from kernelpolicy.fleet.result import Change
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.rollout import Cohort, CompiledRollout, disable_applies

DEFAULT_STEPS = (1.0, 5.0, 25.0, 50.0, 100.0)
"""The percents ``kernelpolicy diff`` counts a staged rollout's nodes at, by default."""


def rollouts(policies: PolicySet) -> list[tuple[str, str, CompiledRollout]]:
    """(feature, impl, rollout) of every candidate rolled out in stages, in policy order."""
    return [
        (name, c.impl, c.rollout)
        for name, feature in policies.features.items()
        for c in feature.candidates
        if c.rollout is not None
    ]


def staged_through(
    found: Sequence[Change],
    cohorts: Sequence[Cohort],
    staged: Mapping[tuple[str, str], int],
    disabled: Mapping[tuple[str, str], Sequence[int]],
) -> tuple[set[tuple[str, ...]], list[Change]]:
    """The staged candidates (feature, impl) a group's changes go through, and the changes no
    rollout stages (they land on all their nodes at the next reload).

    A decision is staged where it moves to a candidate that ``new`` stages, or off one whose
    cohort leaves the node out (a lowered percent, the kill switch); ``staged`` gives each
    staged candidate's index in ``cohorts``; or off a candidate that a staged disable of
    ``new`` switches off here, or onto one whose staged disables all leave the node out
    (``disabled``: their indices in ``cohorts``). An engine setting follows the decisions:
    staged where every decision that changes with it is."""
    through: set[tuple[str, ...]] = set()
    loose: list[Change] = []
    for change in found:
        if change.kind != "decision":
            continue
        onto, off = (change.name, change.new), (change.name, change.old)
        if onto in staged:
            through.add(onto)
        elif off in staged and cohorts[staged[off]] is not Cohort.IN:
            through.add(off)
        elif any(disable_applies(cohorts[n]) for n in disabled.get(off, ())):
            through.add((*off, "disable"))
        elif onto in disabled and not any(disable_applies(cohorts[n]) for n in disabled[onto]):
            through.add((*onto, "disable"))
        else:
            loose.append(change)
    if loose or not through:
        loose += [change for change in found if change.kind != "decision"]
    return through, loose


def placed_rollouts(policies: PolicySet) -> list[CompiledRollout]:
    """The rollouts of ``policies`` a node is placed in: its candidates', then its staged
    disables' (the cohorts of a :data:`~.outcomes.Group`)."""
    return [r for _, _, r in rollouts(policies)] + [d.rollout for d in staged_disables(policies)]


def rollout_of(policies: PolicySet, feature: str, impl: str) -> CompiledRollout | None:
    """The rollout of ``policies``' candidate ``impl`` of ``feature``, if it has one."""
    compiled = policies.features.get(feature)
    candidates = compiled.candidates if compiled is not None else ()
    return next((c.rollout for c in candidates if c.impl == impl), None)


def with_percent(policies: PolicySet, feature: str, impl: str, percent: float) -> PolicySet:
    """``policies`` with one candidate's rollout at ``percent`` (same cohort order)."""
    compiled = policies.features[feature]
    candidates = tuple(
        replace(c, rollout=c.rollout.with_percent(percent))
        if c.impl == impl and c.rollout is not None
        else c
        for c in compiled.candidates
    )
    features = {**policies.features, feature: replace(compiled, candidates=candidates)}
    return replace(policies, features=features)
