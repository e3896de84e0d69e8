"""Guards, and Resolution.impl(): built-in callables, run-time fallback, guarded kernels."""

from __future__ import annotations

import torch

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.engine.dispatch import Routed
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


def test_missing_library_hands_the_choice_to_the_next_candidate() -> None:
    """flashinfer chosen but not importable here: the next candidate of the order (triton,
    installed with the test extras) serves the sampler from then on, and the decision says
    so; the feature does not drop to torch while triton can serve."""
    resolution = resolve_on("h100-sxm")
    assert resolution.decision("sampler.top_k_top_p").impl == "flashinfer"
    routed = resolution.impl("sampler.top_k_top_p")
    assert isinstance(routed, Routed)
    assert routed.choice(4, torch.float32) == "triton"
    decision = resolution.decision("sampler.top_k_top_p")
    assert decision.impl == "triton"
    assert "flashinfer" not in decision.order
    note = resolution.runtime_fallbacks["sampler.top_k_top_p"]
    assert "cannot import flashinfer.sampling" in note
    assert note.count("cannot load ") == 1  # said once, with the entry it could not load
    assert note.startswith("flashinfer cannot be loaded (")
    assert note.endswith("the calls routed to it go to the next candidate")
    assert note in decision.warnings
    ctx = {"has_generators": False, "has_top_k": True, "has_top_p": True, "logprobs_mode": "raw"}
    assert resolution.select("sampler.top_k_top_p", **ctx) == "triton"
    assert resolution.to_dict()["decisions"]["sampler.top_k_top_p"]["impl"] == "triton"


def test_missing_library_falls_back_for_the_process() -> None:
    """An unrouted feature whose choice cannot be imported: its fallback from then on."""
    policies = load_policy_text(UNLOADABLE)
    resolution = resolve_policies(fixture("h100-sxm"), {}, policies)
    assert resolution.impl("demo.unloadable") is greedy
    decision = resolution.decision("demo.unloadable")
    assert (decision.impl, decision.reason) == ("torch", Reason.FALLBACK)
    note = resolution.runtime_fallbacks["demo.unloadable"]
    assert "cannot load kernelpolicy_no_such_library.kernels:greedy" in note
    assert note.endswith("using torch in this process")
    assert note in decision.warnings


UNLOADABLE = """
schema = "kernelpolicy.policy/v1"
[features."demo.unloadable"]
description = "a chosen kernel whose library is missing"
fallback = "torch"
[[features."demo.unloadable".candidates]]
impl = "missing"
entry = "kernelpolicy_no_such_library.kernels:greedy"
[[features."demo.unloadable".candidates]]
impl = "torch"
entry = "kernelpolicy.kernels.torch_impl:greedy"
"""


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
