"""How much of the suite runs: the full profile (what evidence is made of) or a quick smoke run.

A profile is a value threaded through the checks; the module constants of
:mod:`~kernelpolicy.verify.distribution` and :mod:`~kernelpolicy.verify.patterns`
stay the full suite's sizes, and :data:`FULL` is built from them so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelpolicy.verify import distribution
from kernelpolicy.verify.patterns import PATTERNS

Case = tuple[int | None, float | None]


@dataclass(frozen=True)
class Profile:
    """The sizes of one run of the suite.

    Args:
        name: "full" or "quick", shown in the table and the JSON output.
        patterns: the pathological-logit patterns of the robustness checks.
        samples: draws per distribution case (chi-square).
        wide_samples: draws of the wide-nucleus check.
        cases: the (k, p) cases of the distribution checks, per dtype.
        tie_cases: the (k, p) cases of the tie checks.
        evidence: whether a run of this profile may be stored as evidence.
    """

    name: str
    patterns: tuple[str, ...]
    samples: int
    wide_samples: int
    cases: tuple[Case, ...]
    tie_cases: tuple[Case, ...]
    evidence: bool


FULL = Profile(
    name="full",
    patterns=PATTERNS,
    samples=distribution.SAMPLES,
    wide_samples=distribution.WIDE_SAMPLES,
    cases=distribution.CASES,
    tie_cases=distribution.TIE_CASES,
    evidence=True,
)
# A smoke run: every dtype, path and kind of check still runs, on fewer patterns, (k, p) cases
# and draws. 10,000 draws keep the expected counts of the vocab-32 rows above a few; the wide
# nucleus (a sort of 16,384 logits per draw, most of a CPU run's time) gets 2,000: a few draws
# per bin, enough to catch a draw outside the nucleus, a coarse test of the rest.
QUICK = Profile(
    name="quick",
    patterns=("clean", "nan_one_row", "nan_all_rows", "mixed_inf_nan"),
    samples=10_000,
    wide_samples=2_000,
    cases=((8, None), (None, 0.7), (4, 0.5)),
    tie_cases=((6, None), (16, 0.8)),
    evidence=False,
)
PROFILES = {profile.name: profile for profile in (FULL, QUICK)}
