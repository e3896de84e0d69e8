"""Each feature's count of checks (``suite.CHECKS[feature].count``, the total the progress
display draws) is what its checks yield, under every profile. The samplers' checks run on
stand-ins that answer at once (right-shaped ids, or a raise), with each profile's patterns and
cases but few draws, since the count depends on those and not on the draws; the accuracy
checks run on the torch fallbacks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelpolicy.policy.entries import load_entry
from kernelpolicy.policy.names import builtin_entry
from kernelpolicy.verify import accuracy, suite
from kernelpolicy.verify.profile import PROFILES, Profile


def _token_zero(logits: torch.Tensor, *args: Any) -> torch.Tensor:
    """A sampler (or greedy) that answers token 0 for every row."""
    return torch.zeros(logits.shape[0], dtype=torch.int64)


def _raises(logits: torch.Tensor, *args: Any) -> torch.Tensor:
    raise RuntimeError("a kernel that fails every call")


def _few_draws(profile: Profile) -> Profile:
    return dataclasses.replace(profile, samples=40, wide_samples=8)


SAMPLERS = ("sampler.top_k_top_p", "sampler.greedy")


# A failing check still yields its one outcome, so a raise counts like an answer; the answer is
# judged (the slow part, a float64 reference per check) on the quick profile's checks only.
RUNS = [
    pytest.param(feature, impl, name, id=f"{feature}-{label}-{name}")
    for feature in SAMPLERS
    for label, impl, names in (("raises", _raises, PROFILES), ("token-0", _token_zero, ["quick"]))
    for name in names
]


@pytest.mark.parametrize(("feature", "impl", "profile"), RUNS)
def test_a_samplers_count_is_what_its_checks_yield(
    feature: str, impl: Callable[..., torch.Tensor], profile: str
) -> None:
    checks = suite.CHECKS[feature]
    outcomes = list(checks.run(impl, "cpu", _few_draws(PROFILES[profile])))
    assert len(outcomes) == checks.count(PROFILES[profile])


@pytest.mark.parametrize("feature", [f for f in suite.CHECKS if f not in SAMPLERS])
def test_an_accuracy_features_count_is_what_its_checks_yield(feature: str) -> None:
    """The same under every profile: these checks take no profile."""
    entry = builtin_entry(feature, "torch")
    assert entry is not None
    checks = suite.CHECKS[feature]
    outcomes = list(checks.run(load_entry(entry), "cpu", PROFILES["full"]))
    assert {checks.count(profile) for profile in PROFILES.values()} == {len(outcomes)}


def test_counting_the_top_k_cases_builds_no_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress total is known before a tensor exists: each case is built when its check
    runs, never to be counted."""

    def no_tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("a tensor was built to count the cases")

    for build in ("randperm", "full", "tensor"):
        monkeypatch.setattr(torch, build, no_tensor)
    assert suite.CHECKS["topk_per_row"].count(PROFILES["full"]) == len(accuracy.TOPK_CASES) == 3
