"""What the engine decides: frozen values with reasons from closed sets.

``explain``, the gRPC API and the decision log render these; none of them works an answer out a
second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kernelpolicy.policy.rollout import Cohort


class Reason(StrEnum):
    """Why a decision came out as it did (closed set)."""

    PREFERRED = "preferred"  # the first supported candidate in the policy's order
    REQUESTED = "requested"  # a switch set to on asked for this candidate, and it is supported
    FORCED = "forced"  # KERNELPOLICY_FORCE_<FEATURE> or settings.overrides named it
    FALLBACK = "fallback"  # every preferred candidate was rejected: the always-available one
    NOT_APPLICABLE = "not_applicable"  # no candidate fits and the feature is not required here
    ERROR = "error"  # see ErrorCode


class ErrorCode(StrEnum):
    """What kind of error a decision is (closed set)."""

    REQUIRED_UNSUPPORTED = "required_unsupported"  # a switch says on, the platform says no
    NO_IMPLEMENTATION = "no_implementation"  # a required feature has no usable candidate
    BAD_ENVIRONMENT = "bad_environment"  # a switch variable holds a non-boolean value
    UNKNOWN_IMPLEMENTATION = "unknown_implementation"  # a force names no candidate
    SWITCH_CONFLICT = "switch_conflict"  # one switch says on, another off
    ALL_DISABLED = "all_disabled"  # [[disable]] entries removed every implementation usable here


class CheckKind(StrEnum):
    """The kinds of check a candidate can fail (closed set)."""

    VENDOR = "vendor"
    NO_DEVICE = "no_device"
    ARCH = "arch"
    CAPABILITY = "capability"
    COMPUTE_UNITS = "compute_units"
    DRIVER = "driver"
    CUDA = "cuda"
    ROCM = "rocm"
    TORCH = "torch"
    LIBRARY_MISSING = "library_missing"
    LIBRARY_VERSION = "library_version"
    UNREADABLE_VERSION = "unreadable_version"
    KNOWN_ISSUE = "known_issue"
    WORKAROUND = "workaround"
    DISABLED = "disabled"
    EVIDENCE = "evidence"
    SWITCH_OFF = "switch_off"
    ROLLOUT = "rollout"  # the node is out of the candidate's staged-rollout cohort
    HALTED = "halted"  # its guard trips or run-time failures on this node passed halt_on


@dataclass(frozen=True)
class Check:
    """One failed check, in words a person understands, with a hint where one exists."""

    kind: CheckKind
    message: str
    hint: str | None = None
    reference: str | None = None

    def __str__(self) -> str:
        return f"{self.message} ({self.reference})" if self.reference else self.message

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "hint": self.hint,
            "reference": self.reference,
        }


@dataclass(frozen=True)
class Note:
    """Something true of an accepted candidate that a reader should know (guards, notes)."""

    message: str
    reference: str | None = None


@dataclass(frozen=True)
class RolloutResult:
    """Where the node stands in a candidate's staged rollout.

    Attributes:
        percent: The rollout's share of nodes.
        cohort: In, out, off (percent 0) or no identity to place the node by.
        bucket: The node's bucket (``None`` without an identity); it is in below
            ``percent`` of :data:`~kernelpolicy.policy.rollout.ROLLOUT_BUCKETS`.
    """

    percent: float
    cohort: Cohort
    bucket: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"percent": self.percent, "cohort": self.cohort.value, "bucket": self.bucket}


# Rejections that say what the policy chose, not what the platform cannot do: an explicit
# request or force still gets the candidate.
_NOT_UNSUPPORTED = frozenset({CheckKind.SWITCH_OFF, CheckKind.ROLLOUT})
DEVICE_CHECKS = frozenset(
    {CheckKind.VENDOR, CheckKind.NO_DEVICE, CheckKind.ARCH, CheckKind.CAPABILITY,
     CheckKind.COMPUTE_UNITS}
)  # fmt: skip
"""Checks of the device itself: nothing installed, upgraded or set makes a candidate pass them."""


@dataclass(frozen=True)
class CandidateResult:
    """How one candidate fared: its switch state and every check it failed."""

    impl: str
    switch: str  # auto | on | off
    switch_source: str | None
    failures: tuple[Check, ...]
    notes: tuple[Note, ...] = ()
    when: str | None = None
    guards: tuple[str, ...] = ()
    rollout: RolloutResult | None = None

    @property
    def supported(self) -> bool:
        """The platform allows it (switches and rollout cohorts aside)."""
        return not any(f.kind not in _NOT_UNSUPPORTED for f in self.failures)

    @property
    def accepted(self) -> bool:
        return not self.failures

    @property
    def hints(self) -> tuple[str, ...]:
        """What to do so that it is accepted: its failed checks' hints, unless one of them is a
        check of the device itself (:data:`DEVICE_CHECKS`: another vendor, no GPU, a capability
        or arch the device lacks), which leaves it rejected whatever is done: then none (a T4
        is not told to install FlashInfer, which needs capability 8.0)."""
        if any(f.kind in DEVICE_CHECKS for f in self.failures):
            return ()
        return tuple(f.hint for f in self.failures if f.hint)

    def to_dict(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "accepted": self.accepted,
            "switch": self.switch,
            "switch_source": self.switch_source,
            "when": self.when,
            "guards": list(self.guards),
            "failures": [f.to_dict() for f in self.failures],
            "notes": [{"message": n.message, "reference": n.reference} for n in self.notes],
            # Only for candidates with a rollout: answers without one keep their shape.
            **({"rollout": self.rollout.to_dict()} if self.rollout is not None else {}),
        }


@dataclass(frozen=True)
class BatchRoute:
    """A batch range (``high`` None: no upper bound) and the order tried there."""

    low: int
    high: int | None
    order: tuple[str, ...]
    reference: str | None = None

    def covers(self, batch: int) -> bool:
        return self.low <= batch and (self.high is None or batch <= self.high)

    @property
    def label(self) -> str:
        """``1-511``, ``512+`` or ``256``."""
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.high == self.low else f"{self.low}-{self.high}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": [self.low, self.high],
            "order": list(self.order),
            "reference": self.reference,
        }


@dataclass(frozen=True)
class DtypeRule:
    """Which dtypes one implementation serves (``serves`` None: every dtype it does not
    ``refuse``), and why: stored evidence, or a failure at call time."""

    impl: str
    serves: tuple[str, ...] | None
    refuses: tuple[str, ...] = ()
    why: str = ""

    def allows(self, dtype: str) -> bool:
        return dtype not in self.refuses and (self.serves is None or dtype in self.serves)

    def to_dict(self) -> dict[str, Any]:
        serves = None if self.serves is None else list(self.serves)
        return {"serves": serves, "refuses": list(self.refuses), "why": self.why}


@dataclass(frozen=True)
class Decision:
    """The resolved choice for one feature.

    Attributes:
        impl: The implementation chosen when every per-call condition holds, or ``None``.
        error: Why there is no acceptable choice, or ``None``.
        reason: One of :class:`Reason`.
        reasons: The explanation, one sentence per line, in order.
        candidates: Every candidate in the policy's order and how it fared.
        order: The implementations ``select()`` may return, in the order it tries them.
        routes: Per batch range, the order tried instead of ``order`` (``by_batch``).
        dtype_rules: The implementations that serve only some dtypes (``dtypes``); the
            fallback never has one.
        dtypes: The dtypes the feature routes on (explain shows who serves each).
    """

    feature: str
    impl: str | None
    reason: Reason
    reasons: tuple[str, ...]
    candidates: tuple[CandidateResult, ...]
    error: str | None = None
    error_code: ErrorCode | None = None
    hints: tuple[str, ...] = ()
    order: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = ()
    routes: tuple[BatchRoute, ...] = ()
    dtype_rules: tuple[DtypeRule, ...] = ()
    dtypes: tuple[str, ...] = ()

    def order_for(self, batch: int | None = None, dtype: str | None = None) -> tuple[str, ...]:
        """The order tried for a call of ``batch`` rows and ``dtype`` (None: not given)."""
        order = self.order
        if batch is not None:
            for route in self.routes:
                if route.covers(batch):
                    order = route.order
                    break
        if dtype is not None and self.dtype_rules:
            refused = {r.impl for r in self.dtype_rules if not r.allows(dtype)}
            order = tuple(impl for impl in order if impl not in refused)
        return order

    def first_choices(self) -> tuple[str, ...]:
        """Every implementation some call tries first (per batch range and routed dtype), in
        order: what a call can need before any fallback."""
        batches = [None, *(route.low for route in self.routes)]
        found = dict.fromkeys(
            order[0]
            for batch in batches
            for dtype in (None, *self.dtypes)
            if (order := self.order_for(batch, dtype))
        )
        return tuple(found)

    def to_dict(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "error": self.error,
            "error_code": self.error_code.value if self.error_code else None,
            "reason": self.reason.value,
            "reasons": list(self.reasons),
            "hints": list(self.hints),
            "warnings": list(self.warnings),
            "order": list(self.order),
            "routes": [r.to_dict() for r in self.routes],
            "dtypes": {r.impl: r.to_dict() for r in self.dtype_rules},
            "candidates": [c.to_dict() for c in self.candidates],
        }
