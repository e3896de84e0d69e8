"""Staged rollout in a decision: is this node in the candidate's cohort, and why.

Pure: the node's identity comes from the platform snapshot, the cohort from the compiled
rollout (:mod:`kernelpolicy.policy.rollout`). A node out of the cohort rejects the candidate
with a ``rollout`` check, so the decision falls through to the next candidate; an explicit
request (a switch set to on, a force) still wins, as for a switch left on auto.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from kernelpolicy.engine.model import Check, CheckKind, Decision, Note, RolloutResult
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.rollout import ROLLOUT_BUCKETS, Cohort, CompiledRollout


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
    without an identity) for each of the decision's candidates with a rollout."""
    metadata: dict[str, str | float | int] = {}
    for _, impl, result in rollouts_of({"": decision}):
        metadata[f"rollout.{impl}.cohort"] = result.cohort.value
        metadata[f"rollout.{impl}.percent"] = result.percent
        if result.bucket is not None:
            metadata[f"rollout.{impl}.bucket"] = result.bucket
    return metadata


def _percent(value: float) -> str:
    """``10``, ``0.5``, ``12.34``: as a policy would write it."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
