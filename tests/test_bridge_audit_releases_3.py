"""The third audit of what the bridge tells real engine releases (vLLM 0.13.0, 0.15.1, 0.24.0,
0.33.0; SGLang 0.5.20, 0.5.23, read from their release code): each finding fixed a named case
that failed on the pack before it.

- a pinned ``--attention-backend`` is checked alone, and vLLM stops where it does not fit the
  model instead of taking the next backend: FLASHINFER and (FA2, 0.13-0.23 everywhere)
  FLASH_ATTN refuse multimodal models whose image tokens attend bidirectionally (mm_prefix:
  Gemma 3 multimodal, PaliGemma, Molmo2), FA2 refuses gpt-oss's sinks; on NVIDIA, where vLLM's
  own order puts the chosen backend first, nothing is sent (status ``default``); on ROCm
  AITER FA must still be pinned (ROCM_ATTN comes first from 0.19), with a warning;
- SGLang's ``--moe-runner-backend triton`` stops ModelOpt NVFP4 MoE checkpoints (no triton
  path; left on auto SGLang runs Marlin on capability 8.0-9.x): not sent on NVIDIA.
"""

from __future__ import annotations

import pytest

import tests.test_bridge_audit_releases as first
from kernelpolicy.bridge import Status
from tests.test_bridge_audit_releases import AITER, Case

NOT_PINNED = ("--attention-backend",)
CASES = {
    "vllm-0.33.0-b200-flashinfer-not-pinned-mm-prefix": Case(
        "b200", "vllm", "0.33.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.13.0-b200-flashinfer-not-pinned-mm-prefix": Case(
        "b200", "vllm", "0.13.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.33.0-a100-flash-attn-not-pinned-sinks": Case(
        "a100", "vllm", "0.33.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.15.1-l4-flash-attn-not-pinned-sinks": Case(
        "l4", "vllm", "0.15.1", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.13.0-h100-flash-attn-not-pinned-mm-prefix": Case(
        "h100-sxm", "vllm", "0.13.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.33.0-mi300x-aiter-fa-pin-warns-mm-prefix": Case(
        "mi300x", "vllm", "0.33.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=("--attention-backend", "ROCM_AITER_FA"),
        warning="mm_prefix models: Gemma 3 multimodal, PaliGemma, Molmo2",
    ),
    "vllm-0.24.0-mi355x-aiter-fa-pin-warns-mm-prefix": Case(
        "mi355x", "vllm", "0.24.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=("--attention-backend", "ROCM_AITER_FA"),
        warning="pass --attention-backend TRITON_ATTN yourself",
    ),
    "sglang-0.5.23-h100-triton-moe-refuses-nvfp4": Case(
        "h100-sxm", "sglang", "0.5.23", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="NVFP4",
    ),
    "sglang-0.5.20-a100-triton-moe-refuses-nvfp4": Case(
        "a100", "sglang", "0.5.20", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="runs Marlin on capability 8.0-9.x",
    ),
    "sglang-0.5.23-cpu-triton-moe-not-sent": Case(
        "cpu", "sglang", "0.5.23", feature="moe.experts", status=Status.DEFAULT,
        absent=("--moe-runner-backend",),
    ),
    # unchanged (passes before the fix too): on ROCm the flag keeps the aiter MoE off and
    # SGLang honours it for MXFP8
    "sglang-0.5.23-mi300x-triton-moe-still-told": Case(
        "mi300x", "sglang", "0.5.23", feature="moe.experts",
        flags=("--moe-runner-backend", "triton"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_3(case: Case) -> None:
    """What each release is told, by the first audit's check."""
    first.test_what_each_release_is_told(case)
