"""Staged rollout: ``rollout = { percent = N }`` on a candidate or a disable, compiled once.

A node is in a candidate's cohort when the bucket of its identity (one of
:data:`ROLLOUT_BUCKETS`, from a SHA-256 of the salt and the identity) is below the percent's
share of the buckets. The salt is the feature and the candidate (and the policy's own
``salt``, to draw a new cohort), so that cohorts differ between features; the bucket does not
depend on the percent, so raising it only adds nodes, and 0 leaves every node out: the kill
switch. A node without an identity (see :mod:`kernelpolicy.platform.identity`) is in no partial
rollout: when in doubt, the fallback. A ``[[disable]]``'s rollout places nodes the same way
with a salt of its own: the switch-off applies on the nodes in its cohort only (on a node
without an identity, only at 100%).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kernelpolicy.digest import sha256

__all__ = [
    "ROLLOUT_BUCKETS", "Cohort", "CompiledRollout", "compile_rollout", "disable_applies",
]  # fmt: skip

ROLLOUT_BUCKETS = 10_000
"""Buckets a node can fall in: a percent has two decimals (0.01% is one bucket)."""


class Cohort(StrEnum):
    """Where a node stands in one candidate's rollout (closed set; also the label values)."""

    IN = "in"  # its bucket is below the percent
    OUT = "out"  # its bucket is at or above the percent
    OFF = "off"  # percent 0: the kill switch, no node is in
    NO_IDENTITY = "no-identity"  # the snapshot names no machine ID and no GPU UUID


def disable_applies(cohort: Cohort) -> bool:
    """Whether a staged ``[[disable]]`` switches its candidate off on a node of ``cohort``: in
    its cohort, and also with no identity to place the node by (in doubt, the switch-off, never
    the kernel it was written against; a candidate's rollout in doubt is the fallback)."""
    return cohort is Cohort.IN or cohort is Cohort.NO_IDENTITY


@dataclass(frozen=True)
class CompiledRollout:
    """One candidate's rollout, ready to place nodes.

    Attributes:
        percent: The share of nodes, as the policy wrote it.
        threshold: Buckets in the cohort (``percent`` of :data:`ROLLOUT_BUCKETS`).
        salt: What the bucket hash is salted with (feature, candidate, the policy's salt).
    """

    percent: float
    threshold: int
    salt: bytes

    def bucket(self, identity: str) -> int:
        """The node's bucket for this candidate: the same whatever the percent."""
        digest = sha256(self.salt + identity.encode("utf-8", "replace")).digest()
        return int.from_bytes(digest[:8], "big") % ROLLOUT_BUCKETS

    def place(self, identity: str | None) -> tuple[Cohort, int | None]:
        """The node's cohort and bucket (``None`` without an identity)."""
        if self.threshold == 0:
            return Cohort.OFF, None if identity is None else self.bucket(identity)
        if identity is None:
            # Nothing to hash: in only where every node is.
            return (Cohort.IN if self.threshold >= ROLLOUT_BUCKETS else Cohort.NO_IDENTITY), None
        bucket = self.bucket(identity)
        return (Cohort.IN if bucket < self.threshold else Cohort.OUT), bucket

    def with_percent(self, percent: float) -> CompiledRollout:
        """The same cohort order at another percent (``diff`` counts each step with it)."""
        return CompiledRollout(percent, _threshold(percent), self.salt)


def _threshold(percent: float) -> int:
    return round(percent * ROLLOUT_BUCKETS / 100)


def compile_rollout(
    feature: str, impl: str, spec: Any, *, disable: bool = False
) -> CompiledRollout | None:
    """The candidate's rollout (``spec`` a validated ``Rollout`` or its record), or ``None``.

    ``disable``: the rollout of a ``[[disable]]`` of that candidate, salted apart from the
    candidate's own (a "disable" part: no field holds a NUL, so no candidate's salt equals
    it), so that staging a switch-off does not pick the nodes its candidate's rollout picked.
    """
    if spec is None:
        return None
    part = "disable\0" if disable else ""
    salt = f"kernelpolicy rollout\0{part}{feature}\0{impl}\0{spec.salt}\0".encode()
    return CompiledRollout(float(spec.percent), _threshold(spec.percent), salt)
