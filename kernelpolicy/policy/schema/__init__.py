"""The policy language: what a ``policies/*.toml`` file may say, validated with pydantic.

Every key is known (unknown keys are errors), every version range is a PEP 440 specifier checked
at load time, and every CEL expression is compiled and type-checked against the variables its
feature declares. Evaluation later only evaluates.

The document and its features, candidates and gates are in :mod:`.model`; the leaves a
candidate's conditions are made of in :mod:`.conditions`; the bridge's rules (how an inference
engine is told to run a choice, the ``engines`` tables) in :mod:`.bridge`; the per-call routing
keys in :mod:`.routes`; the keys allowed at each place (for the message about an unknown
one) in :mod:`.keys`. Each name below is imported from its module on first use.
"""

from typing import TYPE_CHECKING

from kernelpolicy._lazy import lazy_exports

if TYPE_CHECKING:
    from kernelpolicy.policy.schema.bridge import EngineRule
    from kernelpolicy.policy.schema.conditions import (
        KnownIssue,
        LibraryRequirement,
        LibrarySpec,
        LiftCondition,
        Switch,
        SwitchState,
        Vendor,
        Workaround,
    )
    from kernelpolicy.policy.schema.model import (
        POLICY_SCHEMA,
        Candidate,
        Disable,
        Feature,
        Gate,
        GateRequires,
        HaltOn,
        PolicyFile,
        Requirement,
        Rollout,
    )
    from kernelpolicy.policy.schema.routes import BatchRoute, ContextType, check_routes, dtype_names

_MODULES = {
    "kernelpolicy.policy.schema.bridge": ("EngineRule",),
    "kernelpolicy.policy.schema.conditions": (
        "KnownIssue",
        "LibraryRequirement",
        "LibrarySpec",
        "LiftCondition",
        "Switch",
        "SwitchState",
        "Vendor",
        "Workaround",
    ),
    "kernelpolicy.policy.schema.model": (
        "POLICY_SCHEMA",
        "Candidate",
        "Disable",
        "Feature",
        "Gate",
        "GateRequires",
        "HaltOn",
        "PolicyFile",
        "Requirement",
        "Rollout",
    ),
    "kernelpolicy.policy.schema.routes": (
        "BatchRoute",
        "ContextType",
        "check_routes",
        "dtype_names",
    ),
}

__all__ = [
    "POLICY_SCHEMA",
    "BatchRoute",
    "Candidate",
    "ContextType",
    "Disable",
    "EngineRule",
    "Feature",
    "Gate",
    "GateRequires",
    "HaltOn",
    "KnownIssue",
    "LibraryRequirement",
    "LibrarySpec",
    "LiftCondition",
    "PolicyFile",
    "Requirement",
    "Rollout",
    "Switch",
    "SwitchState",
    "Vendor",
    "Workaround",
    "check_routes",
    "dtype_names",
]

__getattr__, __dir__ = lazy_exports(
    __name__, {name: module for module, names in _MODULES.items() for name in names}
)
