"""Results of the conformance suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """One check of one implementation."""

    check: str
    passed: bool
    detail: str


DTYPE_NAMES = ("float32", "bfloat16", "float16")


def check_dtypes(check: str) -> list[str]:
    """The dtypes a check's name carries (``robustness/bfloat16/nan_one_row`` -> bfloat16)."""
    found = [part.removeprefix("torch.") for part in check.split("/")]
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
        return self.skipped is None and all(o.passed for o in self.outcomes)

    @property
    def dtypes(self) -> dict[str, bool]:
        """dtype -> whether every check naming it passed (checks name their dtype)."""
        found: dict[str, bool] = {}
        for outcome in self.outcomes:
            for name in check_dtypes(outcome.check):
                found[name] = found.get(name, True) and outcome.passed
        return found

    @property
    def status(self) -> str:
        return "skipped" if self.skipped else "passed" if self.passed else "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "impl": self.impl,
            "status": self.status,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "dtypes_passed": sorted(d for d, ok in self.dtypes.items() if ok),
            "dtypes_failed": sorted(d for d, ok in self.dtypes.items() if not ok),
            "checks": [o.__dict__ for o in self.outcomes],
        }
