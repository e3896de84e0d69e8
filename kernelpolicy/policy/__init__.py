"""Stage 2 of the flow: policy files -> a validated, compiled :class:`PolicySet`."""

from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.loader import (
    load_policies,
    load_policy_sources,
    load_policy_text,
    policy_files,
    read_policy_sources,
)

__all__ = [
    "PolicySet",
    "load_policies",
    "load_policy_sources",
    "load_policy_text",
    "policy_files",
    "read_policy_sources",
]
