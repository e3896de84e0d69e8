"""The conformance suite: the torch fallbacks pass, planted bugs fail, the guard repairs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.kernels import torch_impl
from kernelpolicy.verify import distribution, suite
from kernelpolicy.verify.reference import filtered_probs

BUGGY = "kernelpolicy.testing.buggy_kernels"


@pytest.fixture(scope="module")
def reports() -> dict[tuple[str, str], object]:
    return {(r.feature, r.impl): r for r in suite.run()}


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


def test_a_sampler_that_ignores_k_fails_robustness_and_distribution() -> None:
    """Filtering bugs are caught both by the support check and by chi-square."""
    report = suite.run_one("sampler.top_k_top_p", "planted", f"{BUGGY}:top_k_ignores_k")
    failing = {o.check.split("/")[0] for o in report.outcomes if not o.passed}
    assert failing == {"robustness", "distribution", "ties", "shapes"}


def test_a_sampler_failing_for_one_dtype_is_recorded_per_dtype() -> None:
    """A kernel that breaks only on float16 fails that dtype's checks; the report (and so the
    evidence) lists float32 and bfloat16 as passed."""
    report = suite.run_one("sampler.top_k_top_p", "planted", f"{BUGGY}:top_k_top_p_fails_float16")
    document = report.to_dict()
    assert document["status"] == "failed"
    assert document["dtypes_passed"] == ["bfloat16", "float32"]
    assert document["dtypes_failed"] == ["float16"]


def test_unknown_feature() -> None:
    """Asking for a feature without checks names the checked ones."""
    with pytest.raises(KernelPolicyError, match="verify has no checks for feature 'mhc'"):
        suite.targets(["mhc"])


def _nucleus(x: torch.Tensor) -> torch.Tensor:
    return filtered_probs(x[:1].float(), None, distribution.WIDE_P)[0] > 0


def _uniform_in_nucleus(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    return torch.multinomial(_nucleus(x).float().expand(x.shape[0], -1), 1)[:, 0]


def _tempered(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    """The right nucleus, drawn from the softmax at temperature 1.1."""
    w = torch.softmax(x[:1].float() / 1.1, -1)[0] * _nucleus(x)
    return torch.multinomial(w.expand(x.shape[0], -1), 1)[:, 0]


def _unfiltered(x: torch.Tensor, k: object, p: object) -> torch.Tensor:
    return torch.multinomial(torch.softmax(x.float(), -1), 1)[:, 0]


@pytest.mark.parametrize(
    ("sampler", "passed", "detail"),
    [
        pytest.param(torch_impl.top_k_top_p, True, "p-value", id="exact"),
        pytest.param(_uniform_in_nucleus, False, "< alpha", id="uniform-inside-the-nucleus"),
        pytest.param(_tempered, False, "< alpha", id="temperature-1.1"),
        pytest.param(_unfiltered, False, "outside the nucleus", id="no-top-p"),
    ],
)
def test_the_wide_nucleus_check_tells_exact_from_biased(
    sampler: Callable[..., torch.Tensor], passed: bool, detail: str
) -> None:
    """Bins of tokens ranked by probability catch a bias towards likelier or less likely
    tokens, which bins of contiguous ids would average away."""
    torch.manual_seed(0)
    row = torch.randn(1, distribution.WIDE_VOCAB, generator=torch.Generator().manual_seed(1))
    outcome = distribution.wide_nucleus(sampler, row, "cpu")
    assert (outcome.passed, outcome.check) == (passed, "distribution/float32/wide-nucleus")
    assert detail in outcome.detail
