"""Names other code depends on: the features and implementations kernelpolicy has adapters for.

A candidate whose implementation is not listed here must name its own ``entry`` point
(``package.module:function``); anything else is an "unknown implementation".
"""

from __future__ import annotations

from kernelpolicy.errors import PolicyIssue
from kernelpolicy.policy.locate import locate
from kernelpolicy.policy.schema import PolicyFile

KNOWN_IMPLEMENTATIONS: dict[str, frozenset[str]] = {
    "sampler.top_k_top_p": frozenset({"flashinfer", "aiter", "torch"}),
    "sampler.greedy": frozenset({"aiter", "torch"}),
    "allreduce_rmsnorm": frozenset({"aiter", "torch"}),
    "mhc": frozenset({"aiter", "torch"}),
    "sparse_attn_indexer": frozenset({"aiter"}),
    "topk_per_row": frozenset({"torch", "triton"}),
    "rmsnorm": frozenset({"torch"}),
}


def check_names(name: str, text: str, model: PolicyFile, issues: list[PolicyIssue]) -> None:
    """Report implementations that have neither a known adapter nor an ``entry`` point."""
    for feature_name, feature in model.features.items():
        known = KNOWN_IMPLEMENTATIONS.get(feature_name, frozenset())
        for index, candidate in enumerate(feature.candidates):
            if candidate.impl in known or candidate.entry:
                continue
            expected = ", ".join(sorted(known)) if known else "none built in"
            issues.append(
                PolicyIssue(
                    name,
                    f"unknown implementation {candidate.impl!r} (known for this feature: "
                    f"{expected}); give it an 'entry = \"module:function\"' to add your own",
                    locate(text, ("features", feature_name, "candidates", index, "impl")),
                    feature_name,
                    f"candidates.{index}.impl",
                )
            )


# (feature, implementation) -> "module:function" of the built-in adapters.
BUILTIN_ENTRIES: dict[tuple[str, str], str] = {}


def builtin_entry(feature: str, impl: str) -> str | None:
    """The built-in callable for ``impl`` of ``feature``, if kernelpolicy ships one."""
    return BUILTIN_ENTRIES.get((feature, impl))
