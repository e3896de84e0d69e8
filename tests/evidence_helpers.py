"""What the evidence tests share (tests/test_evidence.py, tests/test_evidence_trust.py): a
passed conformance result of ``sampler.greedy``'s ``fast`` and a policy that prefers it."""

from __future__ import annotations

RESULT = {"feature": "sampler.greedy", "impl": "fast", "status": "passed", "checks": []}
POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:greedy"
verified = true
[[features."sampler.greedy".candidates]]
impl = "torch"
"""
