"""Never a crash: an accelerated kernel that fails when called (a compile or launch error) hands
that call and every later one to the feature's fallback, recorded as an import failure is."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.engine.dispatch import CallTimeFallback
from kernelpolicy.kernels.guards import ClampTokenIds
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.top_k_top_p"]
description = "a kernel that fails when called"
fallback = "torch"
[[features."sampler.top_k_top_p".candidates]]
impl = "planted"
entry = "kernelpolicy.testing.buggy_kernels:sampler_fails_when_called"
{issue}
[[features."sampler.top_k_top_p".candidates]]
impl = "torch"
"""
GUARD = """[[features."sampler.top_k_top_p".candidates.known_issues]]
reason = "planted"
action = "guard"
guard = "clamp_token_ids"
"""
FEATURE = "sampler.top_k_top_p"


@pytest.mark.parametrize("issue", [pytest.param("", id="plain"), pytest.param(GUARD, id="guarded")])
def test_a_kernel_failing_at_call_time_falls_back_for_the_process(issue: str) -> None:
    """The failing call is answered by torch; the feature is torch from then on, and
    runtime_fallbacks, the decision's warnings and explain say why."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(POLICY.format(issue=issue)))
    assert resolution.decision(FEATURE).impl == "planted"
    kernel = resolution.impl(FEATURE)
    assert isinstance(kernel, ClampTokenIds if issue else CallTimeFallback)
    logits = torch.randn(4, 100, dtype=torch.bfloat16)
    ids = kernel(logits, torch.full((4,), 5), None)
    assert ids.shape == (4,)
    assert bool(((ids >= 0) & (ids < 100)).all())
    note = resolution.runtime_fallbacks[FEATURE]
    assert "PassManager::run failed (planted) for torch.bfloat16" in note
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.reason) == ("torch", Reason.FALLBACK)
    assert note in decision.warnings
    assert note in resolution.to_dict()["decisions"][FEATURE]["warnings"]
    assert kernel(logits, None, torch.full((4,), 0.9)).shape == (4,)  # no second failure
    assert resolution.runtime_fallbacks[FEATURE] == note


def test_a_call_the_fallback_rejects_too_raises_and_switches_nothing() -> None:
    """A wrong call (1-D logits) fails in both: the kernel's error, and no switch."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(POLICY.format(issue="")))
    kernel = resolution.impl(FEATURE)
    with pytest.raises(RuntimeError, match="planted"):
        kernel(torch.randn(100), torch.full((1,), 5), None)
    assert FEATURE not in resolution.runtime_fallbacks
    assert resolution.decision(FEATURE).impl == "planted"
