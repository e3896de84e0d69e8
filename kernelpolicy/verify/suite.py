"""The verify suite (``kernelpolicy verify``): run the checks of every implementation that can
run here; what it finds is stored as evidence (:mod:`kernelpolicy.evidence`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.evidence.model import ImplReport, Outcome
from kernelpolicy.kernels.guards import GUARDS
from kernelpolicy.policy.entries import load_prepared
from kernelpolicy.policy.names import BUILTIN_ENTRIES, PREPARE
from kernelpolicy.verify import accuracy, distribution, samplers
from kernelpolicy.verify.profile import FULL, Profile

Checks = Callable[[Callable[..., Any], str, Profile], Iterator[Outcome]]


@dataclass(frozen=True)
class FeatureChecks:
    """A feature's checks, and how many outcomes they yield under a profile (the progress
    display's total), kept side by side; ``tests/test_verify_counts.py`` runs the checks and
    holds the two equal."""

    run: Checks
    count: Callable[[Profile], int]


def _sampler_checks(impl: Callable[..., Any], device: str, profile: Profile) -> Iterator[Outcome]:
    yield from samplers.robustness(impl, device, profile.patterns)
    yield from samplers.distribution(
        impl, device, samples=profile.samples, wide_samples=profile.wide_samples,
        cases=profile.cases, tie_cases=profile.tie_cases,
    )  # fmt: skip


def _sampler_count(profile: Profile) -> int:
    robust = len(samplers.DTYPES) * len(samplers.PATHS) * len(profile.patterns)
    per_dtype = len(profile.cases) + 2  # the mixed rows and the wide nucleus
    shapes = len(distribution.SHAPES) + 2 * len(distribution.BIG_K)  # BIG_K: without p, with p
    return robust + len(distribution.DTYPES) * per_dtype + 2 * len(profile.tie_cases) + shapes


def _greedy(impl: Callable[..., Any], device: str, profile: Profile) -> Iterator[Outcome]:
    return samplers.greedy_robustness(impl, device, profile.patterns)


def _greedy_count(profile: Profile) -> int:
    return len(profile.patterns)


def _same_in_every_profile(
    checks: Callable[[Callable[..., Any], str], Iterator[Outcome]], count: int
) -> FeatureChecks:
    return FeatureChecks(lambda impl, device, profile: checks(impl, device), lambda _: count)


CHECKS: dict[str, FeatureChecks] = {
    "sampler.top_k_top_p": FeatureChecks(_sampler_checks, _sampler_count),
    "sampler.greedy": FeatureChecks(_greedy, _greedy_count),
    "rmsnorm": _same_in_every_profile(accuracy.rmsnorm, accuracy.RMSNORM_CHECKS),
    "allreduce_rmsnorm": _same_in_every_profile(
        accuracy.allreduce_rmsnorm, accuracy.ALLREDUCE_RMSNORM_CHECKS
    ),
    "topk_per_row": _same_in_every_profile(accuracy.topk_per_row, accuracy.TOPK_PER_ROW_CHECKS),
}


class Progress(Protocol):
    """What a run reports as it goes (the CLI draws it): the total number of checks first, then
    each implementation as it starts and each check as it ends. The checks of an implementation
    that will not run here are reported with why (``skipped``) and taken off the total: before
    anything runs for those known to need what this machine lacks, when its load fails for the
    others."""

    def begin(self, total: int) -> None: ...

    def target(self, feature: str, impl: str) -> None: ...

    def check(self, outcome: Outcome) -> None: ...

    def skipped(self, checks: int, impl: str, why: str) -> None: ...


def _cuda() -> bool:
    return bool(torch.cuda.is_available() and torch.version.cuda)


def _rocm() -> bool:
    return bool(torch.cuda.is_available() and getattr(torch.version, "hip", None))


# What each accelerated library needs besides importing.
_NEEDS: dict[str, tuple[str, Callable[[], bool]]] = {
    "flashinfer": ("a CUDA device", _cuda),
    "aiter": ("a ROCm device", _rocm),
    "triton": ("a CUDA device", _cuda),
}


def unavailable(impl: str) -> str | None:
    """Why ``impl`` cannot run here, known without loading it (its library needs a device this
    machine lacks), or None when it may run."""
    if impl in _NEEDS:
        what, available = _NEEDS[impl]
        if not available():
            return f"needs {what}"
    return None


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def targets(
    features: Iterable[str] | None = None, impls: Iterable[str] | None = None
) -> list[tuple[str, str, str]]:
    """(feature, impl, entry) for the built-in implementations, filtered."""
    wanted_features = set(features) if features else None
    wanted_impls = set(impls) if impls else None
    unknown = (wanted_features or set()) - set(CHECKS)
    if unknown:
        raise KernelPolicyError(
            f"verify has no checks for feature {sorted(unknown)[0]!r}; "
            f"checked features: {', '.join(CHECKS)}"
        )
    return [
        (feature, impl, entry)
        for (feature, impl), entry in BUILTIN_ENTRIES.items()
        if feature in CHECKS
        and (wanted_features is None or feature in wanted_features)
        and (wanted_impls is None or impl in wanted_impls)
    ]


def run_one(
    feature: str,
    impl: str,
    entry: str,
    *,
    device: str | None = None,
    guard: str | None = None,
    profile: Profile = FULL,
    on_check: Callable[[Outcome], None] | None = None,
) -> ImplReport:
    """Load ``entry`` (skipping when it cannot run here) and run ``feature``'s checks on it,
    sized by ``profile``; ``on_check`` is called as each check ends."""
    report = ImplReport(feature, impl)
    device = device or default_device()
    why = unavailable(impl)
    if why is not None:
        report.skipped = why
        return report
    try:
        function = load_prepared(entry, PREPARE.get(impl), serving=False).function
    except Exception as exc:  # cannot run here: say why, do not fail the suite
        report.skipped = f"cannot load {entry}: {exc}"
        return report
    if guard is not None:
        function = GUARDS[guard](function)
    start = time.perf_counter()
    for outcome in CHECKS[feature].run(function, device, profile):
        report.outcomes.append(outcome)
        if on_check is not None:
            on_check(outcome)
    report.seconds = time.perf_counter() - start
    return report


def run(
    features: Iterable[str] | None = None,
    impls: Iterable[str] | None = None,
    *,
    device: str | None = None,
    progress: Progress | None = None,
    profile: Profile = FULL,
) -> list[ImplReport]:
    """Every selected built-in implementation that can run here, checked."""
    return list(iter_run(features, impls, device=device, progress=progress, profile=profile))


def iter_run(
    features: Iterable[str] | None = None,
    impls: Iterable[str] | None = None,
    *,
    device: str | None = None,
    progress: Progress | None = None,
    profile: Profile = FULL,
) -> Iterator[ImplReport]:
    """:func:`run`, one report at a time as each implementation finishes (so a caller can
    keep what finished when a long run is cut short)."""
    selected = targets(features, impls)
    if progress is None:
        for feature, impl, entry in selected:
            yield run_one(feature, impl, entry, device=device, profile=profile)
        return
    progress.begin(sum(CHECKS[feature].count(profile) for feature, _, _ in selected))
    known = {(f, i): why for f, i, _ in selected if (why := unavailable(i)) is not None}
    for (feature, impl), why in known.items():  # off the total before any ETA is worked out
        progress.skipped(CHECKS[feature].count(profile), impl, why)
    for feature, impl, entry in selected:
        progress.target(feature, impl)
        report = run_one(
            feature, impl, entry, device=device, profile=profile, on_check=progress.check
        )
        if report.skipped and (feature, impl) not in known:  # its load failed
            progress.skipped(CHECKS[feature].count(profile), impl, report.skipped)
        yield report
