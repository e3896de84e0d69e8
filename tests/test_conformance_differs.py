"""A check that encodes a convention (kernelpolicy's tie rule) tells "differs" from "failed":
a sampler that keeps exactly k tied tokens but not the lowest ids is right under its own rule;
evidence records the difference; a feature that needs the same draws counts it as a failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelpolicy.engine import CheckKind, resolve_policies
from kernelpolicy.evidence.model import ImplReport, Outcome
from kernelpolicy.evidence.store import load_evidence, store_evidence
from kernelpolicy.kernels import torch_impl
from kernelpolicy.policy import load_policy_text
from kernelpolicy.verify.distribution import TIE_RULE, _same_row, tie_row
from tests.helpers import fixture


def _any_tied(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """Exactly k tokens, ties broken by a random order of ids (as FlashInfer may): then
    kernelpolicy's torch sampler on the logits permuted so its lowest-id rule picks others."""
    generator = torch.Generator().manual_seed(5)
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int64)
    for start in range(0, rows, 1000):
        perm = torch.randperm(vocab, generator=generator)
        chunk = logits[start : start + 1000][:, perm]
        kk = None if k is None else k[start : start + 1000]
        pp = None if p is None else p[start : start + 1000]
        out[start : start + 1000] = perm[torch_impl.top_k_top_p(chunk, kk, pp)]
    return out


def _outside(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    """Broken: draws from the whole row whatever k is."""
    return torch_impl.top_k_top_p(logits, None, None)


@pytest.mark.parametrize(
    ("sampler", "k", "p", "status"),
    [
        pytest.param(torch_impl.top_k_top_p, 6, None, "passed", id="lowest-ids-passes"),
        pytest.param(_any_tied, 6, None, "differs", id="any-tied-ids-differs"),
        pytest.param(_any_tied, 3, 0.9, "differs", id="any-tied-ids-with-p-differs"),
        pytest.param(_outside, 6, None, "failed", id="outside-the-top-k-fails"),
    ],
)
def test_tie_checks_tell_a_convention_from_an_error(
    sampler: object, k: int | None, p: float | None, status: str
) -> None:
    outcome = _same_row(sampler, "ties/float32/tied-groups/x", tie_row(), k=k, p=p, device="cpu")  # type: ignore[arg-type]
    assert outcome.status == status, outcome.detail
    assert (outcome.convention == TIE_RULE) is (status == "differs")


def test_a_report_that_only_differs_passes_with_a_note() -> None:
    report = ImplReport("sampler.top_k_top_p", "flashinfer", [
        Outcome("distribution/float32/k=8,p=-", True, "ok"),
        Outcome("ties/float32/tied-groups/k=6,p=-", False, "chi2", convention=TIE_RULE),
    ])  # fmt: skip
    assert (report.passed, report.status, report.dtypes) == (True, "differs", {"float32": True})
    assert report.to_dict()["dtypes_differ"] == ["float32"]
    assert report.to_dict()["checks"][1]["convention"] == TIE_RULE


POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy"
fallback = "torch"
SAME
[[features."sampler.greedy".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:greedy"
verified = true
[[features."sampler.greedy".candidates]]
impl = "torch"
"""
DIFFERS = {
    "feature": "sampler.greedy", "impl": "fast", "status": "differs",
    "checks": [
        {"check": "ties/float32/tied-groups/k=6,p=-", "passed": False, "detail": "x",
         "convention": TIE_RULE},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("same_draws", "impl"),
    [
        pytest.param(False, "fast", id="a-difference-does-not-block"),
        pytest.param(True, "torch", id="same-draws-blocks-it"),
    ],
)
def test_a_policy_says_whether_a_difference_blocks(
    tmp_path: Path, same_draws: bool, impl: str
) -> None:
    platform = fixture("cpu")
    store_evidence(platform, [DIFFERS], "now", tmp_path)
    evidence = load_evidence(platform, tmp_path)
    entry = evidence.get("sampler.greedy", "fast")
    assert entry is not None
    assert (entry.passed, entry.conventions) == (True, (TIE_RULE,))
    text = POLICY.replace("SAME", f"same_draws = {str(same_draws).lower()}")
    decision = resolve_policies(platform, {}, load_policy_text(text), evidence=evidence).decision(
        "sampler.greedy"
    )
    assert decision.impl == impl
    if same_draws:
        assert decision.candidates[0].failures[0].kind is CheckKind.EVIDENCE
        assert "same_draws" in decision.candidates[0].failures[0].message
    else:
        assert any("differs from kernelpolicy's convention" in r for r in decision.reasons)
