"""The second audit of what the bridge tells real engine releases (vLLM 0.10.2, 0.14.1, 0.18.1,
0.19.1, 0.20.2, 0.28.0, 0.32.0; SGLang 0.4.10.post2, 0.5.6.post2, 0.5.13, 0.5.17, read from
their wheels): each finding a named case that failed on the pack before it.

- a FlashInfer MoE switch that stopped FP8 MoE models (vLLM 0.10.2-0.11.0: the CUTLASS path
  asserts ``block_quant is None`` on a bool) or refused per-channel FP8 checkpoints (0.16-0.23),
  and ran TRT-LLM where explain said CUTLASS (0.11.1-0.23);
- ``--moe-runner-backend flashinfer_cutlass``, which SGLang refuses for any quantization but
  ModelOpt's or none, and SGLang itself sets fp8 for FP8 DeepSeek checkpoints on SM100;
- AITER MLA on vLLM 0.10-0.11.0 without ``--block-size 1`` (the selector refuses 16, the
  default);
- vLLM 0.10's MLA backend names, which it reads (arg_utils.py V1_BACKENDS: TRITON_MLA from
  0.10.0, CUTLASS_MLA from 0.10.1, FLASHINFER_MLA from 0.10.2), told as inexpressible;
- SGLang 0.4.3's FlashInfer sampler, which calls the API of before FlashInfer 0.2.3;
- the FlashInfer sampler with a FlashInfer older than 0.2.3, which vLLM ignores (0.10-0.11.0)
  or raises on at the first sample (0.11.1-0.22);
- the sparse indexer's requirement refusing vLLM releases that have no indexer layer (0.10) or
  run their own (0.11-0.14).
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import AITER, Case, assert_told

MOE_FP = ("VLLM_USE_FLASHINFER_MOE_FP8", "VLLM_USE_FLASHINFER_MOE_FP4")
CASES = {
    "vllm-0.10.2-b200-fp8-moe-not-switched": Case(
        "b200", "vllm", "0.10.2", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=MOE_FP, warning="asserts block_quant is None",
    ),
    "vllm-0.18.1-b200-fp8-moe-not-switched": Case(
        "b200", "vllm", "0.18.1", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=MOE_FP, warning="refuse per-channel FP8 checkpoints",
    ),
    "vllm-0.20.2-b200-fp8-moe-not-switched": Case(
        "b200", "vllm", "0.20.2", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=MOE_FP, warning="TRT-LLM on SM100",
    ),
    "sglang-0.5.13-b200-no-flashinfer-cutlass-runner": Case(
        "b200", "sglang", "0.5.13", "mla", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="modelopt_fp4, modelopt_fp8 or none",
    ),
    "sglang-0.5.6.post2-b200-no-flashinfer-cutlass-runner": Case(
        "b200", "sglang", "0.5.6.post2", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",),
    ),
    "vllm-0.10.2-mi300x-aiter-mla-block-size-1": Case(
        "mi300x", "vllm", "0.10.2", "mla", AITER, feature="attention.mla",
        present={"VLLM_ROCM_USE_AITER_MLA": "1"}, flags=("--block-size", "1"),
    ),
    "vllm-0.11.0-mi355x-aiter-mla-block-size-1": Case(
        "mi355x", "vllm", "0.11.0", "mla", AITER, feature="attention.mla",
        present={"VLLM_ROCM_USE_AITER_MLA": "1"}, flags=("--block-size", "1"),
    ),
    "vllm-0.14.1-mi300x-aiter-mla-any-block-size": Case(
        "mi300x", "vllm", "0.14.1", "mla", AITER, feature="attention.mla",
        present={"VLLM_ROCM_USE_AITER_MLA": "1"}, absent=("--block-size",),
    ),
    # the fifth audit: still named, with a warning (0.10.2's FLASHINFER_MLA refuses FP8 KV)
    "vllm-0.10.2-b200-flashinfer-mla-named": Case(
        "b200", "vllm", "0.10.2", "mla", feature="attention.mla", status=Status.INEXPRESSIBLE,
        present={"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"},
    ),
    "vllm-0.10.2-a100-triton-mla-named": Case(
        "a100", "vllm", "0.10.2", "mla", feature="attention.mla",
        present={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"},
    ),
    "vllm-0.10.1-b200-no-flashinfer-mla-yet": Case(
        "b200", "vllm", "0.10.1", "mla", feature="attention.mla", status=Status.INEXPRESSIBLE,
        absent=("VLLM_ATTENTION_BACKEND",), warning="no FLASHINFER_MLA backend",
    ),
    "vllm-0.10.0-a100-triton-mla-named": Case(  # 0.10.0's V1_BACKENDS has TRITON_MLA
        "a100", "vllm", "0.10.0", "mla", feature="attention.mla",
        present={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"},
    ),
    "sglang-0.4.3-old-flashinfer-api-samples-with-pytorch": Case(
        "h100-sxm", "sglang", "0.4.3", feature="sampler.top_k_top_p", status=Status.INEXPRESSIBLE,
        flags=("--sampling-backend", "pytorch"), warning="uniform_samples",
    ),
    # SGLang's own sampling backend there (FlashInfer imports on CUDA): nothing sent since the
    # sixth audit (tests/test_bridge_audit6_sampler.py)
    "sglang-0.4.10.post2-flashinfer-sampler": Case(
        "h100-sxm", "sglang", "0.4.10.post2", feature="sampler.top_k_top_p",
        status=Status.DEFAULT, absent=("--sampling-backend",),
    ),
    "vllm-0.10.2-a100-old-flashinfer-no-sampler": Case(
        "a100", "vllm", "0.10.2", feature="sampler.top_k_top_p", status=Status.INEXPRESSIBLE,
        present={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
    ),
    "vllm-0.18.1-l4-old-flashinfer-no-sampler": Case(
        "l4", "vllm", "0.18.1", feature="sampler.top_k_top_p", status=Status.INEXPRESSIBLE,
        present={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
    ),
    # the indexer's requirement holds from vLLM 0.15 (its layer raises on ROCm without aiter):
    # 0.10 has no indexer, 0.11-0.14's DeepSeek V3.2 indexer runs its own ROCm path; the
    # indexer is for sparse-MLA models only (--model-kind mla-sparse, the third audit)
    "vllm-0.10.2-mi300x-no-indexer-not-refused": Case(
        "mi300x", "vllm", "0.10.2", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.NOT_APPLICABLE, warning="runs its own path for it",
    ),
    "vllm-0.14.1-mi300x-own-indexer-not-refused": Case(
        "mi300x", "vllm", "0.14.1", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.NOT_APPLICABLE, warning="required for vllm >=0.15",
    ),
    "vllm-0.16.0-mi300x-indexer-needs-aiter": Case(
        "mi300x", "vllm", "0.16.0", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.ERROR, ok=False,
    ),
    "vllm-0.18.1-h100-flashinfer-sampler-kept": Case(
        "h100-sxm", "vllm", "0.18.1", feature="sampler.top_k_top_p",
        present={"VLLM_USE_FLASHINFER_SAMPLER": "1"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told(case: Case) -> None:
    assert_told(case)
