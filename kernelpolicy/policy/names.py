"""Names other code depends on: the features and implementations kernelpolicy has adapters for.

A candidate whose implementation is not listed here must name its own ``entry`` point
(``package.module:function``); anything else is an "unknown implementation".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelpolicy.errors import PolicyIssue
from kernelpolicy.policy.locate import locate

if TYPE_CHECKING:  # pydantic: a Resolution loading an implementation reads only the tables
    from kernelpolicy.policy.schema import PolicyFile

KNOWN_IMPLEMENTATIONS: dict[str, frozenset[str]] = {
    "sampler.top_k_top_p": frozenset({"flashinfer", "aiter", "triton", "torch"}),
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
        if not feature.in_process:  # decided here, run by the engine: no callable to find
            continue
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


# (feature, implementation) -> "module:function" of the built-in implementations and adapters.
# Strings only: nothing here imports torch or a kernel library.
_TORCH = "kernelpolicy.kernels.torch_impl"
_ADAPTERS = "kernelpolicy.kernels.adapters"
BUILTIN_ENTRIES: dict[tuple[str, str], str] = {
    ("sampler.top_k_top_p", "torch"): f"{_TORCH}:top_k_top_p",
    ("sampler.top_k_top_p", "flashinfer"): f"{_ADAPTERS}:flashinfer_top_k_top_p",
    ("sampler.top_k_top_p", "aiter"): f"{_ADAPTERS}:aiter_top_k_top_p",
    ("sampler.top_k_top_p", "triton"): "kernelpolicy.kernels.sampling_triton:top_k_top_p",
    ("sampler.greedy", "torch"): f"{_TORCH}:greedy",
    ("sampler.greedy", "aiter"): f"{_ADAPTERS}:aiter_greedy",
    ("allreduce_rmsnorm", "torch"): f"{_TORCH}:allreduce_rmsnorm",
    ("rmsnorm", "torch"): f"{_TORCH}:rmsnorm",
    ("topk_per_row", "torch"): f"{_TORCH}:topk_per_row",
}

# Called once before an adapter is handed out, so that an import or build failure is found then.
PREPARE: dict[str, str] = {
    "flashinfer": f"{_ADAPTERS}:prepare_flashinfer",
    "aiter": f"{_ADAPTERS}:prepare_aiter",
}


# The libraries each accelerated implementation imports: its built-in entry is imported on its
# first call (engine.loading.LazyEntry), and impl() only checks that these are installed.
REQUIRES: dict[str, tuple[str, ...]] = {
    "flashinfer": ("flashinfer.sampling",),
    "aiter": ("aiter.ops.sampling",),
    "triton": ("triton",),
}


def builtin_entry(feature: str, impl: str) -> str | None:
    """The built-in callable for ``impl`` of ``feature``, if kernelpolicy ships one."""
    return BUILTIN_ENTRIES.get((feature, impl))
