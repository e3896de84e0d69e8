"""What the evidence tests share (tests/test_evidence.py, tests/test_evidence_trust.py): a
passed verify result of ``sampler.greedy``'s ``fast``, a policy that prefers it, and the pieces
of such a pack (its feature's head, a candidate to format) for tests that build their own."""

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

GREEDY = "sampler.greedy"
HEAD = f"""
schema = "kernelpolicy.policy/v1"
[features."{GREEDY}"]
description = "greedy"
fallback = "torch"
"""
CANDIDATE = f"""
[[features."{GREEDY}".candidates]]
impl = "{{impl}}"
entry = "kernelpolicy.kernels.torch_impl:greedy"
{{extra}}
"""
