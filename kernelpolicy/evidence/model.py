"""Results of the verify suite: what `kernelpolicy verify` reports, kept by the evidence store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelpolicy.dtypes import DTYPE_NAMES, dtype_name


@dataclass(frozen=True)
class Outcome:
    """One check of one implementation.

    ``convention`` names the convention a failed check encodes and the implementation does not
    follow, where it meets the weaker contract the check also tested (the same draws up to
    that convention): a difference, not an error. A policy whose feature needs the same draws
    on every implementation (``same_draws = true``) counts it as a failure.
    """

    check: str
    passed: bool
    detail: str
    convention: str | None = None

    @property
    def status(self) -> str:
        return "passed" if self.passed else "differs" if self.convention else "failed"


def check_dtypes(check: str) -> list[str]:
    """The dtypes a check's name carries (``robustness/bfloat16/nan_one_row`` -> bfloat16)."""
    found = [dtype_name(part) for part in check.split("/")]
    return [name for name in found if name in DTYPE_NAMES]


@dataclass
class ImplReport:
    """Every check of one implementation of one feature, or why it could not run here."""

    feature: str
    impl: str
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """No check failed (a convention difference is no failure)."""
        return self.skipped is None and all(o.status != "failed" for o in self.outcomes)

    @property
    def differs(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "differs"]

    @property
    def dtypes(self) -> dict[str, bool]:
        """dtype -> whether every check naming it passed or only differs (checks name their
        dtype)."""
        found: dict[str, bool] = {}
        for outcome in self.outcomes:
            for name in check_dtypes(outcome.check):
                found[name] = found.get(name, True) and outcome.status != "failed"
        return found

    @property
    def dtypes_differ(self) -> list[str]:
        return sorted({d for o in self.differs for d in check_dtypes(o.check)})

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        return "failed" if not self.passed else "differs" if self.differs else "passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "impl": self.impl,
            "status": self.status,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "dtypes_passed": sorted(d for d, ok in self.dtypes.items() if ok),
            "dtypes_failed": sorted(d for d, ok in self.dtypes.items() if not ok),
            "dtypes_differ": self.dtypes_differ,
            "checks": [_check_dict(o) for o in self.outcomes],
        }


def _check_dict(outcome: Outcome) -> dict[str, Any]:
    """A check as stored: ``convention`` only where the check differs (older files have none)."""
    out: dict[str, Any] = {
        "check": outcome.check,
        "passed": outcome.passed,
        "detail": outcome.detail,
    }
    if outcome.convention is not None:
        out["convention"] = outcome.convention
    return out
