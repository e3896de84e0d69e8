"""Stage 2 of the flow: policy files -> a validated, compiled :class:`PolicySet`."""

from typing import TYPE_CHECKING

from kernelpolicy._lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        name: "kernelpolicy.policy.compiled"
        if name == "PolicySet"
        else "kernelpolicy.policy.loader"
        for name in __all__
    },
)
