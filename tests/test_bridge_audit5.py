"""The fifth audit of what the bridge tells real engine releases, NVIDIA first (vLLM
0.7.3-0.33.0, SGLang 0.4.5-0.5.23, read from their release code), attention backends: each
finding fixed named cases that failed on the pack before it.

- vLLM on capability 8.x and 12.x: FlashAttention is the default backend and 2 its default
  version there in every release (0.10.2 platforms/cuda.py:354-364,
  attention/utils/fa_utils.py:36-37), and unpinned vLLM sends models with attention sinks
  (gpt-oss) to TRITON_ATTN (0.10.2 cuda.py:356-358), while before 0.13 the pin FLASH_ATTN +
  VLLM_FLASH_ATTN_VERSION=2 asserts "Sinks are only supported in FlashAttention 3" (0.10.2
  v1/attention/backends/flash_attn.py:415-417; 0.12.0 :548-551): nothing is sent for
  ``flash_attn_2`` there;
- vLLM 0.9.2-0.12 run FlashInfer by default on B200 (0.9.2 cuda.py:266-274, 0.10.2 :335-346,
  0.11.1 ``_get_backend_priorities`` :72-78): nothing is sent; 0.7.3 and 0.8.5.post1 run
  FlashAttention there, and their FlashInfer backend asserts that all layers share one sliding
  window (0.8.5.post1 v1/attention/backends/flashinfer.py:118-125): the pin stays with a
  warning naming Gemma 2 and Gemma 3;
- SGLang 0.4.5's fa3 backend is a beta (no multimodal, FP8 or speculative decoding:
  model_runner.py:883-891) that its default never picks (flashinfer): the fa3 pin starts at
  0.4.6.post5.
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_told

ATTN = "attention.backend"
FA_PIN = ("VLLM_ATTENTION_BACKEND", "VLLM_FLASH_ATTN_VERSION")
CASES = {
    "vllm-0.10.2-a100-fa2-not-pinned-sinks": Case(
        "a100", "vllm", "0.10.2", feature=ATTN, status=Status.DEFAULT, absent=FA_PIN,
    ),
    "vllm-0.12.0-l4-fa2-not-pinned": Case(
        "l4", "vllm", "0.12.0", feature=ATTN, status=Status.DEFAULT, absent=FA_PIN,
    ),
    "vllm-0.8.5.post1-a100-fa2-not-pinned": Case(
        "a100", "vllm", "0.8.5.post1", feature=ATTN, status=Status.DEFAULT, absent=FA_PIN,
    ),
    "vllm-0.7.3-a100-fa2-not-pinned": Case(
        "a100", "vllm", "0.7.3", feature=ATTN, status=Status.DEFAULT, absent=FA_PIN,
    ),
    # unchanged: on Hopper FA2 is not vLLM's choice, so only the pin gives it
    "vllm-0.12.0-h100-forced-fa2-still-pinned": Case(
        "h100-sxm", "vllm", "0.12.0", env={"KERNELPOLICY_FORCE_ATTENTION_BACKEND": "flash_attn_2"},
        feature=ATTN, present=dict(zip(FA_PIN, ("FLASH_ATTN", "2"), strict=True)),
    ),
    "vllm-0.9.2-b200-flashinfer-not-pinned": Case(
        "b200", "vllm", "0.9.2", feature=ATTN, status=Status.DEFAULT,
        absent=("VLLM_ATTENTION_BACKEND",),
    ),
    "vllm-0.11.0-b200-flashinfer-not-pinned": Case(
        "b200", "vllm", "0.11.0", feature=ATTN, status=Status.DEFAULT,
        absent=("VLLM_ATTENTION_BACKEND",),
    ),
    "vllm-0.12.0-b200-flashinfer-not-pinned": Case(
        "b200", "vllm", "0.12.0", feature=ATTN, status=Status.DEFAULT,
        absent=("VLLM_ATTENTION_BACKEND",),
    ),
    "vllm-0.8.5.post1-b200-flashinfer-pin-warns-gemma": Case(
        "b200", "vllm", "0.8.5.post1", feature=ATTN, status=Status.INEXPRESSIBLE,
        present={"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, warning="Gemma 2 and Gemma 3",
    ),
    "sglang-0.4.5-h100-fa3-beta-not-pinned": Case(
        "h100-sxm", "sglang", "0.4.5", feature=ATTN, status=Status.INEXPRESSIBLE,
        absent=("--attention-backend",), warning="beta",
    ),
    # unchanged: from 0.4.6.post5 to 0.5.7 the pin stays (the default picks fa3 for a list)
    "sglang-0.4.6.post5-h100-fa3-pinned": Case(
        "h100-sxm", "sglang", "0.4.6.post5", feature=ATTN, flags=("--attention-backend", "fa3"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_5(case: Case) -> None:
    """What each release is told, by the first audit's check."""
    assert_told(case)
