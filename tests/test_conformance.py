"""The conformance suite: the torch fallbacks pass, planted bugs fail, the guard repairs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.verify import distribution, suite
from kernelpolicy.verify.profile import FULL, QUICK
from kernelpolicy.verify.reference import filtered_probs

BUGGY = "kernelpolicy.testing.buggy_kernels"

# The tests of the full suite's reports share one run of it (about 30 s of CPU): one
# pytest-xdist worker takes them all (--dist loadgroup), where each worker ran the suite before.
ON_THE_SUITE_S_RUN = pytest.mark.xdist_group("conformance-suite")


@pytest.fixture(scope="module")
def reports() -> dict[tuple[str, str], object]:
    return {(r.feature, r.impl): r for r in suite.run()}


@ON_THE_SUITE_S_RUN
@pytest.mark.parametrize(
    "target",
    [
        ("sampler.top_k_top_p", "torch"),
        ("sampler.greedy", "torch"),
        ("rmsnorm", "torch"),
        ("allreduce_rmsnorm", "torch"),
        ("topk_per_row", "torch"),
    ],
    ids="/".join,
)
def test_torch_fallbacks_pass(reports: dict, target: tuple[str, str]) -> None:  # type: ignore[type-arg]
    """Every torch implementation passes every check on CPU."""
    report = reports[target]
    failing = [o for o in report.outcomes if not o.passed]
    assert report.status == "passed", failing


@ON_THE_SUITE_S_RUN
def test_sampler_suite_covers_the_specified_cases(reports: dict) -> None:  # type: ignore[type-arg]
    """Per dtype (float32, bfloat16, float16): 9 patterns x 3 paths of robustness, 7 (k, p)
    cases of chi-square, a batch of mixed rows and a wide nucleus; 8 tie-heavy cases; 6 shapes
    (batch 1, large vocabularies, k above a kernel's limit). Every robustness and distribution
    check names its dtype, and the report says which dtypes passed."""
    report = reports[("sampler.top_k_top_p", "torch")]
    checks = [o.check for o in report.outcomes]
    for dtype in ("float32", "bfloat16", "float16"):
        assert len([c for c in checks if c.startswith(f"robustness/{dtype}/")]) == 27
        assert len([c for c in checks if c.startswith(f"distribution/{dtype}/")]) == 9
        assert f"distribution/{dtype}/wide-nucleus" in checks
    assert len([c for c in checks if c.startswith("ties/")]) == 8
    assert len([c for c in checks if c.startswith("shapes/")]) == 6
    assert report.to_dict()["dtypes_passed"] == ["bfloat16", "float16", "float32"]
    assert "accuracy/allreduce_rmsnorm/2-process-gloo/float32" in [
        o.check for o in reports[("allreduce_rmsnorm", "torch")].outcomes
    ]


@ON_THE_SUITE_S_RUN
@pytest.mark.parametrize(
    ("impl", "reason"), [("flashinfer", "needs a CUDA device"), ("aiter", "needs a ROCm device")]
)
def test_accelerated_kernels_are_skipped_with_a_reason(
    reports: dict, impl: str, reason: str
) -> None:  # type: ignore[type-arg]
    """What cannot run on this machine is skipped, saying why, not failed."""
    report = reports[("sampler.top_k_top_p", impl)]
    assert (report.status, report.skipped) == ("skipped", reason)


def test_planted_greedy_bug_fails() -> None:
    """The seed's bug (id == vocab_size for all-NaN / all -inf rows) fails the suite."""
    report = suite.run_one("sampler.greedy", "planted", f"{BUGGY}:greedy_out_of_range")
    assert report.status == "failed"
    assert {o.check for o in report.outcomes if not o.passed} == {
        "robustness/greedy/nan_one_row",
        "robustness/greedy/nan_all_rows",
        "robustness/greedy/neg_inf_one_row",
    }


def test_guard_makes_the_planted_bug_pass() -> None:
    """With the clamp_token_ids guard the same kernel passes."""
    report = suite.run_one(
        "sampler.greedy", "planted", f"{BUGGY}:greedy_out_of_range", guard="clamp_token_ids"
    )
    assert report.status == "passed"


# The full suite but for the wide nucleus's draws, which take the quick run's 2,000: a sampler
# drawing from the whole softmax puts about 10% of them outside the nucleus (a false pass of
# 0.9**2000); its 20,000 draws from the full softmax of 16,384 tokens were 36 s of this test's 42.
FULL_WIDE_QUICK = dataclasses.replace(FULL, wide_samples=QUICK.wide_samples)


def test_a_sampler_that_ignores_k_fails_robustness_and_distribution() -> None:
    """Filtering bugs are caught both by the support check and by chi-square, and draws
    outside the wide nucleus in every dtype."""
    report = suite.run_one(
        "sampler.top_k_top_p", "planted", f"{BUGGY}:top_k_ignores_k", profile=FULL_WIDE_QUICK
    )
    failing = {o.check.split("/")[0] for o in report.outcomes if not o.passed}
    assert failing == {"robustness", "distribution", "ties", "shapes"}
    wide = {o.check: o.detail for o in report.outcomes if o.check.endswith("/wide-nucleus")}
    assert len(wide) == 3
    assert all(detail.endswith("samples outside the nucleus") for detail in wide.values()), wide


def test_a_sampler_failing_for_one_dtype_is_recorded_per_dtype() -> None:
    """A kernel that breaks only on float16 fails that dtype's checks; the report (and so the
    evidence) lists float32 and bfloat16 as passed. The quick profile: its checks name their
    dtypes as the full run's do, and passing needs no power (a check's false failure stays
    alpha at any number of draws)."""
    report = suite.run_one(
        "sampler.top_k_top_p", "planted", f"{BUGGY}:top_k_top_p_fails_float16", profile=QUICK
    )
    document = report.to_dict()
    assert document["status"] == "failed"
    assert document["dtypes_passed"] == ["bfloat16", "float32"]
    assert document["dtypes_failed"] == ["float16"]


def test_unknown_feature() -> None:
    """Asking for a feature without checks names the checked ones."""
    with pytest.raises(KernelPolicyError, match="verify has no checks for feature 'mhc'"):
        suite.targets(["mhc"])


# The biased samplers below are given the wide-nucleus check's rows, every one the same row:
# they draw all their ids from that row's weights at once (the same draws in distribution as one
# per row from the expanded rows, without a pass over the 16,384 weights of each row).


def _nucleus(x: torch.Tensor) -> torch.Tensor:
    return filtered_probs(x[:1].float(), None, distribution.WIDE_P)[0] > 0


def _draws(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return torch.multinomial(weights, x.shape[0], replacement=True)


def _uniform_in_nucleus(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    return _draws(x, _nucleus(x).float())


def _tempered(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    """The right nucleus, drawn from the softmax at temperature 1.1."""
    return _draws(x, torch.softmax(x[0].float() / 1.1, -1) * _nucleus(x))


def _unfiltered(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    return _draws(x, torch.softmax(x[0].float(), -1))


def _wide_row() -> torch.Tensor:
    """The suite's float32 wide-nucleus row (distribution.distribution, seed 0)."""
    return torch.randn(1, distribution.WIDE_VOCAB, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    ("sampler", "passed", "detail"),
    [
        pytest.param(_uniform_in_nucleus, False, "< alpha", id="uniform-inside-the-nucleus"),
        pytest.param(_tempered, False, "< alpha", id="temperature-1.1"),
        pytest.param(_unfiltered, False, "outside the nucleus", id="no-top-p"),
    ],
)
def test_the_wide_nucleus_check_tells_exact_from_biased(
    sampler: Callable[..., torch.Tensor], passed: bool, detail: str
) -> None:
    """Bins of tokens ranked by probability catch a bias towards likelier or less likely
    tokens, which bins of contiguous ids would average away. The exact sampler's case on the
    same row is the next test's."""
    torch.manual_seed(0)
    outcome = distribution.wide_nucleus(sampler, _wide_row(), "cpu")
    assert (outcome.passed, outcome.check) == (passed, "distribution/float32/wide-nucleus")
    assert detail in outcome.detail


@ON_THE_SUITE_S_RUN
def test_the_wide_nucleus_check_passes_the_exact_sampler(reports: dict) -> None:  # type: ignore[type-arg]
    """The exact sampler (the torch one) passes the same check on the same row (as many
    tokens kept) in the suite's run, its draws binned as above: the check's 20,000 draws of the
    torch sampler are a third of a run's time, and were run twice."""
    (outcome,) = [
        o for o in reports[("sampler.top_k_top_p", "torch")].outcomes
        if o.check == "distribution/float32/wide-nucleus"
    ]  # fmt: skip
    kept = int(_nucleus(_wide_row()).sum())
    assert (outcome.passed, outcome.detail.split(",")[0]) == (True, f"{kept} tokens kept")
    assert "p-value" in outcome.detail
