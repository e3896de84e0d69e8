"""Guards, and Resolution.impl(): built-in callables, run-time fallback, guarded kernels."""

from __future__ import annotations

import torch

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.kernels.guards import ClampTokenIds
from kernelpolicy.kernels.torch_impl import greedy, top_k_top_p
from kernelpolicy.policy import load_policy_text
from kernelpolicy.testing.buggy_kernels import greedy_out_of_range
from tests.helpers import fixture, resolve_on


def test_clamp_repairs_out_of_range_ids_and_counts_them() -> None:
    """Out-of-range ids become 0, valid ids are untouched, repaired rows are counted."""
    logits = torch.randn(4, 100)
    logits[1] = float("nan")
    logits[3] = float("-inf")
    guarded = ClampTokenIds(greedy_out_of_range)
    ids = guarded(logits)
    assert greedy_out_of_range(logits).tolist()[1] == 100  # the planted bug
    assert ids[1].item() == 0
    assert ids[3].item() == 0
    assert ids[0] == logits[0].argmax()
    assert int(guarded.repaired) == 2
    guarded(logits)
    assert int(guarded.repaired) == 4


def test_impl_returns_the_torch_fallbacks() -> None:
    """Built-in callables load by feature and implementation."""
    resolution = resolve_on("cpu")
    assert resolution.impl("sampler.top_k_top_p") is top_k_top_p
    assert resolution.impl("sampler.greedy") is greedy


def test_missing_library_falls_back_for_the_process() -> None:
    """flashinfer chosen but not importable here: torch from then on, and the decision says so."""
    resolution = resolve_on("h100-sxm")
    assert resolution.decision("sampler.top_k_top_p").impl == "flashinfer"
    assert resolution.impl("sampler.top_k_top_p") is top_k_top_p
    decision = resolution.decision("sampler.top_k_top_p")
    assert (decision.impl, decision.reason) == ("torch", Reason.FALLBACK)
    note = resolution.runtime_fallbacks["sampler.top_k_top_p"]
    assert "cannot import flashinfer.sampling" in note
    assert note in decision.warnings
    ctx = {"has_generators": False, "has_top_k": True, "has_top_p": True, "logprobs_mode": "raw"}
    assert resolution.select("sampler.top_k_top_p", **ctx) == "torch"
    assert resolution.to_dict()["decisions"]["sampler.top_k_top_p"]["impl"] == "torch"


GUARDED = """
schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy with a planted bug"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "planted"
entry = "kernelpolicy.testing.buggy_kernels:greedy_out_of_range"
[[features."sampler.greedy".candidates.known_issues]]
reason = "returns vocab_size for all-NaN rows"
action = "guard"
guard = "clamp_token_ids"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""


def test_guarded_kernel_comes_wrapped() -> None:
    """A candidate with a guard known issue is handed out inside its guard."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(GUARDED))
    kernel = resolution.impl("sampler.greedy")
    assert isinstance(kernel, ClampTokenIds)
    logits = torch.randn(2, 10)
    logits[0] = float("nan")
    assert kernel(logits)[0].item() == 0
    assert int(kernel.repaired) == 1
    assert resolution.impl("sampler.greedy") is kernel  # loaded once
