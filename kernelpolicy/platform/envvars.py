"""The environment variables a resolution may depend on, captured once at probe time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

# Until policies name their own: kernelpolicy's switches, the legacy switches users already set,
# and the variables that change what the probe or the runtimes see.
DEFAULT_ENV_PATTERNS: tuple[str, ...] = (
    "KERNELPOLICY_*",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_ROCM_USE_AITER*",
    "SGLANG_USE_AITER",
    "SGLANG_DISABLE_AITER_GREEDY_SAMPLE",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)


def capture_env(environ: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """The variables whose names match a pattern (shell-style, case-sensitive), sorted by name."""
    pats = tuple(patterns)
    return {
        name: environ[name]
        for name in sorted(environ)
        if any(fnmatchcase(name, pat) for pat in pats)
    }
