"""Run the conformance checks for every implementation that can run here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from kernelpolicy.conformance import accuracy, samplers
from kernelpolicy.conformance.model import ImplReport, Outcome
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.kernels.guards import GUARDS
from kernelpolicy.policy.names import BUILTIN_ENTRIES, PREPARE

Checks = Callable[[Callable[..., Any], str], Iterator[Outcome]]


def _sampler_checks(impl: Callable[..., Any], device: str) -> Iterator[Outcome]:
    yield from samplers.robustness(impl, device)
    yield from samplers.distribution(impl, device)


CHECKS: dict[str, Checks] = {
    "sampler.top_k_top_p": _sampler_checks,
    "sampler.greedy": samplers.greedy_robustness,
    "rmsnorm": accuracy.rmsnorm,
    "allreduce_rmsnorm": accuracy.allreduce_rmsnorm,
    "topk_per_row": accuracy.topk_per_row,
}


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _load(entry: str) -> Callable[..., Any]:
    from kernelpolicy.engine.resolution import _resolve_entry

    return _resolve_entry(entry)


def targets(
    features: Iterable[str] | None = None, impls: Iterable[str] | None = None
) -> list[tuple[str, str, str]]:
    """(feature, impl, entry) for the built-in implementations, filtered."""
    wanted_features = set(features) if features else None
    wanted_impls = set(impls) if impls else None
    unknown = (wanted_features or set()) - set(CHECKS)
    if unknown:
        raise KernelPolicyError(
            f"no conformance checks for feature {sorted(unknown)[0]!r}; "
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
    feature: str, impl: str, entry: str, *, device: str | None = None, guard: str | None = None
) -> ImplReport:
    """Load ``entry`` (skipping when it cannot run here) and run ``feature``'s checks on it."""
    report = ImplReport(feature, impl)
    device = device or default_device()
    if impl in _NEEDS:
        what, available = _NEEDS[impl]
        if not available():
            report.skipped = f"needs {what}"
            return report
    try:
        if impl in PREPARE:
            _load(PREPARE[impl])()
        function = _load(entry)
    except Exception as exc:  # cannot run here: say why, do not fail the suite
        report.skipped = f"cannot load {entry}: {exc}"
        return report
    if guard is not None:
        function = GUARDS[guard](function)
    start = time.perf_counter()
    report.outcomes = list(CHECKS[feature](function, device))
    report.seconds = time.perf_counter() - start
    return report


def run(
    features: Iterable[str] | None = None,
    impls: Iterable[str] | None = None,
    *,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ImplReport]:
    """Every selected built-in implementation that can run here, checked."""
    return list(iter_run(features, impls, device=device, progress=progress))


def iter_run(
    features: Iterable[str] | None = None,
    impls: Iterable[str] | None = None,
    *,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator[ImplReport]:
    """:func:`run`, one report at a time as each implementation finishes (so a caller can
    keep what finished when a long run is cut short)."""
    for feature, impl, entry in targets(features, impls):
        if progress:
            progress(f"verifying {feature}/{impl} ...")
        yield run_one(feature, impl, entry, device=device)
