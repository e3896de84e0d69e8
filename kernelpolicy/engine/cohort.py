"""Staged rollout in a decision: is this node in the candidate's cohort, and why.

Pure: the node's identity comes from the platform snapshot, the cohort from the compiled
rollout (:mod:`kernelpolicy.policy.rollout`). A node out of the cohort rejects the candidate
with a ``rollout`` check, so the decision falls through to the next candidate; an explicit
request (a switch set to on, a force) still wins, as for a switch left on auto.
"""

from __future__ import annotations

from kernelpolicy.engine.model import Check, CheckKind, Note, RolloutResult
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


def _percent(value: float) -> str:
    """``10``, ``0.5``, ``12.34``: as a policy would write it."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
