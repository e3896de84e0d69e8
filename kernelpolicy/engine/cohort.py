"""Staged rollout in a decision: is this node in the candidate's (or the disable's) cohort.

Pure: the node's identity comes from the platform snapshot, the cohort from the compiled
rollout (:mod:`kernelpolicy.policy.rollout`). A node out of the cohort rejects the candidate
with a ``rollout`` check, so the decision falls through to the next candidate; an explicit
request (a switch set to on, a force) still wins, as for a switch left on auto.

A staged ``[[disable]]`` applies on the nodes of its own cohort only: there its ``disabled``
check says so (:class:`StagedDisableCheck`), elsewhere the candidate carries a note that it
does not apply here (:class:`UnappliedDisableNote`); both hold where the node stands, which
front-ends read (:func:`disable_rollouts_of`), never work out again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelpolicy.engine.model import Check, CheckKind, Decision, Note, RolloutResult
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledDisable
from kernelpolicy.policy.rollout import ROLLOUT_BUCKETS, Cohort, CompiledRollout, disable_applies


def place(rollout: CompiledRollout, platform: Platform) -> RolloutResult:
    """Where ``platform``'s node stands in ``rollout``."""
    cohort, bucket = rollout.place(platform.identity)
    return RolloutResult(rollout.percent, cohort, bucket)


def rollout_check(result: RolloutResult) -> Check | Note:
    """A failed ``rollout`` check for a node out of the cohort, else a note saying it is in."""
    share = f"{_percent(result.percent)}% rollout cohort"
    where = "" if result.bucket is None else f"bucket {result.bucket} of {ROLLOUT_BUCKETS}"
    if result.cohort is Cohort.IN:
        return Note(f"in the {share}" + (f" ({where})" if where else ""))
    if result.cohort is Cohort.OFF:
        return Check(CheckKind.ROLLOUT, "rollout at 0%: switched off on every node (kill switch)")
    if result.cohort is Cohort.NO_IDENTITY:
        return Check(
            CheckKind.ROLLOUT,
            f"not in the {share}: the snapshot names no machine ID or GPU UUID to place the "
            "node by",
            "probe the node with /etc/machine-id readable",
        )
    joins = _percent(((result.bucket or 0) + 1) * 100 / ROLLOUT_BUCKETS)
    return Check(CheckKind.ROLLOUT, f"not in the {share} ({where}; in from {joins}%)")


def rollouts_of(
    decisions: Mapping[str, Decision],
) -> Iterator[tuple[str, str, RolloutResult]]:
    """``(feature, impl, where the node stands)`` for every candidate with a rollout, in the
    policies' order: what the resolution decided, for front-ends to show, never to recompute."""
    for feature, decision in decisions.items():
        for candidate in decision.candidates:
            if candidate.rollout is not None:
                yield feature, candidate.impl, candidate.rollout


def rollout_metadata(decision: Decision) -> dict[str, str | float | int]:
    """Flat flag metadata for OFREP and flagd (values are strings or numbers there):
    ``rollout.<impl>.cohort`` (in, out, off, no-identity), ``.percent`` and ``.bucket`` (absent
    without an identity) for each of the decision's candidates with a rollout, and
    ``disable.<impl>.cohort``, ``.percent`` and ``.bucket`` for each a staged disable names
    (``in``: the disable applies here)."""
    metadata: dict[str, str | float | int] = {}
    for kind, found in (("rollout", rollouts_of), ("disable", disable_rollouts_of)):
        for _, impl, result in found({"": decision}):
            metadata[f"{kind}.{impl}.cohort"] = result.cohort.value
            metadata[f"{kind}.{impl}.percent"] = result.percent
            if result.bucket is not None:
                metadata[f"{kind}.{impl}.bucket"] = result.bucket
    return metadata


def _percent(value: float) -> str:
    """``10``, ``0.5``, ``12.34``: as a policy would write it."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class StagedDisableCheck(Check):
    """The ``disabled`` check of a staged disable that applies on this node (in its cohort);
    ``written``: where the disable is (the file's base name and line)."""

    rollout: RolloutResult | None = None
    written: str = ""

    def to_dict(self) -> dict[str, Any]:
        found = super().to_dict()
        if self.rollout is not None:
            found["disable_rollout"] = self.rollout.to_dict()
        return found


@dataclass(frozen=True)
class UnappliedDisableNote(Note):
    """A staged disable of the candidate that does not apply on this node (out of its cohort,
    at 0%, or no identity to place the node by); ``written`` as :class:`StagedDisableCheck`'s."""

    rollout: RolloutResult | None = None
    written: str = ""


@dataclass(frozen=True)
class NodeDisables:
    """The policies' disables as they stand on one node.

    Attributes:
        applying: Those that apply here (unstaged, or staged with the node in the cohort), in
            the policies' order: what candidates are checked against.
        staged: (feature, impl) -> each staged disable of that candidate and where the node
            stands in it, in the policies' order (empty where no disable is staged).
    """

    applying: tuple[CompiledDisable, ...]
    staged: Mapping[tuple[str, str], tuple[tuple[CompiledDisable, RolloutResult], ...]] = field(
        default_factory=dict
    )


def place_disables(disables: tuple[CompiledDisable, ...], platform: Platform) -> NodeDisables:
    """Which of ``disables`` apply on ``platform``'s node (all of them when none is staged)."""
    if all(d.rollout is None for d in disables):
        return NodeDisables(disables)
    applying: list[CompiledDisable] = []
    staged: dict[tuple[str, str], list[tuple[CompiledDisable, RolloutResult]]] = {}
    for disable in disables:
        if disable.rollout is None:
            applying.append(disable)
            continue
        result = place(disable.rollout, platform)
        staged.setdefault((disable.spec.feature, disable.spec.impl), []).append((disable, result))
        if disable_applies(result.cohort):
            applying.append(disable)
    return NodeDisables(tuple(applying), {key: tuple(found) for key, found in staged.items()})


def staged_disables(
    here: NodeDisables, feature: str, impl: str, failures: list[Check], notes: list[Note]
) -> None:
    """The candidate's checks with its staged disables said: each ``disabled`` check of one
    that applies here names its cohort, and a note tells of each that does not (in place)."""
    placed = here.staged.get((feature, impl))
    if not placed:
        return
    cohorts = {id(disable): result for disable, result in placed}
    # check_candidate adds one ``disabled`` check per applying disable of the candidate, in
    # the policies' order: the same order as ``matching``.
    matching = iter(d for d in here.applying if (d.spec.feature, d.spec.impl) == (feature, impl))
    for index, failure in enumerate(failures):
        if failure.kind is not CheckKind.DISABLED:
            continue
        disable = next(matching, None)
        result = cohorts.get(id(disable))
        if disable is not None and result is not None:
            message = f"{failure.message}; in the {_in_cohort(result)}"
            hint = f"{failure.hint} (or lower its rollout percent)" if failure.hint else None
            failures[index] = StagedDisableCheck(
                failure.kind, message, hint, failure.reference, result, _written(disable)
            )
    notes += [
        UnappliedDisableNote(
            _not_applied(disable, result), disable.spec.reference, result, _written(disable)
        )
        for disable, result in placed
        if not disable_applies(result.cohort)
    ]


def _written(disable: CompiledDisable) -> str:
    """``ops.toml:3``: the same on nodes that keep their policy files at other paths."""
    place = disable.source
    name = place.file.replace("\\", "/").rpartition("/")[2]
    return name if place.line is None else f"{name}:{place.line}"


def _in_cohort(result: RolloutResult) -> str:
    if result.cohort is Cohort.NO_IDENTITY:
        return (
            f"{_percent(result.percent)}% rollout of this disable by doubt: the snapshot names "
            "no machine ID or GPU UUID to place the node by, and a staged switch-off applies "
            "where it cannot be placed"
        )
    bucket = result.bucket
    where = "every node" if bucket is None else f"bucket {bucket} of {ROLLOUT_BUCKETS}"
    return f"{_percent(result.percent)}% cohort of this disable ({where})"


def _not_applied(disable: CompiledDisable, result: RolloutResult) -> str:
    """Why a staged disable leaves the candidate alone here, and what it would say."""
    staged = f"a disable staged at {_percent(result.percent)}% does not apply here"
    said = f"{disable.source}: {disable.spec.reason}"
    if result.cohort is Cohort.OFF:
        return f"{staged} (nor on any node): {said}"
    joins = _percent(((result.bucket or 0) + 1) * 100 / ROLLOUT_BUCKETS)
    return f"{staged} (bucket {result.bucket}; in from {joins}%): {said}"


def disable_rollouts_of(
    decisions: Mapping[str, Decision],
) -> Iterator[tuple[str, str, RolloutResult]]:
    """``(feature, impl, where the node stands)`` for every candidate that a staged disable
    names, in the policies' order, as the resolution decided it. Where several staged
    disables name one candidate: the first that applies here, else the first."""
    for feature, decision in decisions.items():
        for candidate in decision.candidates:
            found = [
                item.rollout
                for item in (*candidate.failures, *candidate.notes)
                if isinstance(item, StagedDisableCheck | UnappliedDisableNote)
                and item.rollout is not None
            ]
            if found:
                applying = (r for r in found if disable_applies(r.cohort))
                yield feature, candidate.impl, next(applying, found[0])


def disable_cohorts_of(decisions: Mapping[str, Decision]) -> dict[str, str]:
    """``feature/impl disabled at FILE:LINE`` -> the node's cohort in that staged disable,
    every one (for the fingerprint: a staged disable decides by node)."""
    return {
        f"{feature}/{candidate.impl} disabled at {item.written}": item.rollout.cohort.value
        for feature, decision in decisions.items()
        for candidate in decision.candidates
        for item in (*candidate.failures, *candidate.notes)
        if isinstance(item, StagedDisableCheck | UnappliedDisableNote) and item.rollout is not None
    }
