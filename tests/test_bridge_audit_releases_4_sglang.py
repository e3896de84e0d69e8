"""The fourth audit's SGLang findings (0.4.3-0.5.23, read from their release code): each fixed a
named case that failed on the pack before it.

- SGLang's per-model attention-backend lists refuse a pinned ``--attention-backend``; where
  SGLang's own default picks the chosen backend nothing is sent (the third audit's rule), else
  the pin stays with a warning naming the models it stops: ``flashinfer`` on B200 (SGLang's
  default until 0.5.6.post1, trtllm_mha after: gpt-oss, Llama 4, Gemma 4, Exaone 4 SWA,
  Olmo2/3), ``fa3`` on H100 (the default for every architecture from 0.5.8; Gemma 4's list
  lacks it), ``aiter`` on ROCm (the MHA default there from 0.4.10; gpt-oss's list lacked it in
  0.5.3-0.5.7), ``triton`` (NemotronH from 0.5.7, Lfm2 from 0.5.9 refuse it);
- dense MLA on ROCm with SGLANG_USE_AITER=1: ``--attention-backend aiter`` asserts for head
  counts per rank outside aiter MLA's (0.5.13 aiter_backend.py:289-297, 0.5.23 :580-607), and
  SGLang's default picks aiter for 16 or 128 heads per rank: only SGLANG_USE_AITER=1 is sent;
- ``--moe-runner-backend triton`` on ROCm stops Quark MXFP4 MoE (AMD's amd/*-MXFP4) from 0.5.11
  (quark_w4a4_mxfp4_moe.py: 0.5.11-0.5.20 fail at the first forward, 0.5.21-0.5.23 raise
  NotImplementedError; auto picks AITER): not sent from 0.5.11, with a warning where the aiter
  switch is on (SGLang's auto then runs the aiter MoE for unquantized models too);
- SGLang >= 0.5.13 imports aiter at start whenever SGLANG_USE_AITER is set on an AMD GPU
  (layers/sampler.py, 0.5.23 :63-65): an operator's switch on an RX 7900 XTX, where amd-aiter is
  absent, stops it, and a warning says so;
- SGLang 0.4.6-0.4.9 (now in the knob tables) call FlashInfer's 0.2.3 sampling API (0.4.6.post5
  and 0.4.9.post6 sampler.py, no uniform_samples), so ``--sampling-backend pytorch`` is forced
  only before 0.4.6 (0.4.5 the old API); 0.4.9.post6 already reads SGLANG_USE_AITER, 0.4.6.post5
  takes --attention-backend aiter/flashmla/cutlass_mla and 0.4.5 fa3, which the pack dated 0.4.10
  (the fifth audit: 0.4.5's fa3 is a beta, no longer pinned: tests/test_bridge_audit5.py).
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_told

PINNED = ("--attention-backend",)
SGL_AITER = {"SGLANG_USE_AITER": "1"}
ATTN = "attention.backend"
CASES = {
    "sglang-0.5.3-b200-flashinfer-not-pinned-gpt-oss": Case(
        "b200", "sglang", "0.5.3", feature=ATTN, status=Status.DEFAULT, absent=PINNED,
    ),
    "sglang-0.5.6-b200-flashinfer-not-pinned-llama4": Case(
        "b200", "sglang", "0.5.6", feature=ATTN, status=Status.DEFAULT, absent=PINNED,
    ),
    "sglang-0.5.6.post2-b200-flashinfer-pin-warns": Case(
        "b200", "sglang", "0.5.6.post2", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=("--attention-backend", "flashinfer"), warning="gpt-oss, Llama 4, Gemma 4",
    ),
    "sglang-0.5.23-b200-flashinfer-pin-warns-olmo": Case(
        "b200", "sglang", "0.5.23", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=("--attention-backend", "flashinfer"), warning="Exaone 4 with sliding window",
    ),
    "sglang-0.5.23-h100-fa3-not-pinned-gemma4": Case(
        "h100-sxm", "sglang", "0.5.23", feature=ATTN, status=Status.DEFAULT, absent=PINNED,
    ),
    "sglang-0.5.8.post1-h100-fa3-not-pinned": Case(
        "h100-sxm", "sglang", "0.5.8.post1", feature=ATTN, status=Status.DEFAULT, absent=PINNED,
    ),
    # unchanged: before 0.5.8 SGLang's default picks fa3 only for a list of architectures
    "sglang-0.5.7-h100-fa3-still-pinned": Case(
        "h100-sxm", "sglang", "0.5.7", feature=ATTN, flags=("--attention-backend", "fa3"),
    ),
    "sglang-0.5.3-mi300x-aiter-not-pinned-gpt-oss": Case(
        "mi300x", "sglang", "0.5.3", env=SGL_AITER, feature=ATTN, absent=PINNED,
        present=SGL_AITER,
    ),
    "sglang-0.5.6-mi355x-aiter-not-pinned-gpt-oss": Case(
        "mi355x", "sglang", "0.5.6", env=SGL_AITER, feature=ATTN, absent=PINNED,
        present=SGL_AITER,
    ),
    "sglang-0.5.23-mi300x-aiter-not-pinned": Case(
        "mi300x", "sglang", "0.5.23", env=SGL_AITER, feature=ATTN, absent=PINNED,
        present=SGL_AITER,
    ),
    "sglang-0.5.23-mi300x-triton-pin-warns-lfm2": Case(
        "mi300x", "sglang", "0.5.23", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=("--attention-backend", "triton"), warning="Lfm2/Lfm2-MoE",
    ),
    "sglang-0.5.7-mi250x-triton-pin-warns-nemotron-h": Case(
        "mi250x", "sglang", "0.5.7", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=("--attention-backend", "triton"), warning="NemotronH",
    ),
    # unchanged: no release before 0.5.7 refuses the triton pin (it warns, since the sixth
    # audit, that it moves SGLang off its own aiter default on an MI300X with aiter)
    "sglang-0.5.6-mi300x-triton-still-pinned": Case(
        "mi300x", "sglang", "0.5.6", feature=ATTN, flags=("--attention-backend", "triton"),
        status=Status.INEXPRESSIBLE,
    ),
    "sglang-0.5.23-mi300x-dense-mla-aiter-not-pinned": Case(
        "mi300x", "sglang", "0.5.23", "mla", SGL_AITER, feature="attention.mla",
        absent=PINNED, present=SGL_AITER,
    ),
    "sglang-0.5.13-mi355x-dense-mla-aiter-not-pinned": Case(
        "mi355x", "sglang", "0.5.13", "mla", SGL_AITER, feature="attention.mla",
        absent=PINNED, present=SGL_AITER,
    ),
    "sglang-0.5.11-mi300x-triton-moe-not-sent-quark-mxfp4": Case(
        "mi300x", "sglang", "0.5.11", feature="moe.experts", status=Status.DEFAULT,
        absent=("--moe-runner-backend",),
    ),
    "sglang-0.5.21-mi250x-aiter-switch-triton-moe-warns": Case(
        "mi250x", "sglang", "0.5.21", env=SGL_AITER, feature="moe.experts",
        status=Status.INEXPRESSIBLE, absent=("--moe-runner-backend",), warning="Quark MXFP4 MoE",
    ),
    "sglang-0.5.23-mi355x-forced-triton-moe-warns": Case(
        "mi355x", "sglang", "0.5.23", env={**SGL_AITER, "KERNELPOLICY_FORCE_MOE_EXPERTS": "triton"},
        feature="moe.experts", status=Status.INEXPRESSIBLE, absent=("--moe-runner-backend",),
        warning="pass --moe-runner-backend triton yourself",
    ),
    # unchanged: before 0.5.11 Quark MXFP4 MoE takes no runner, and the flag keeps aiter off
    "sglang-0.5.10.post1-mi300x-triton-moe-still-told": Case(
        "mi300x", "sglang", "0.5.10.post1", feature="moe.experts",
        flags=("--moe-runner-backend", "triton"),
    ),
    "sglang-0.5.23-rx7900xtx-aiter-switch-warns-import": Case(
        "rx7900xtx", "sglang", "0.5.23", env=SGL_AITER, feature="sampler.greedy",
        status=Status.INEXPRESSIBLE, warning="unset SGLANG_USE_AITER",
    ),
    "sglang-0.5.13-rx7900xtx-aiter-switch-warns-import": Case(
        "rx7900xtx", "sglang", "0.5.13", env=SGL_AITER, feature="sampler.greedy",
        status=Status.INEXPRESSIBLE, warning="fails to start with ImportError",
    ),
    # unchanged: 0.5.12 has no aiter greedy sampler, and imports no aiter for it
    "sglang-0.5.12-rx7900xtx-aiter-switch-no-import": Case(
        "rx7900xtx", "sglang", "0.5.12", env=SGL_AITER, feature="sampler.greedy",
        status=Status.DEFAULT,
    ),
    # SGLang's own sampling backend there (FlashInfer imports on CUDA): nothing sent since the
    # sixth audit (tests/test_bridge_audit6_sampler.py)
    "sglang-0.4.6.post5-h100-flashinfer-sampler": Case(
        "h100-sxm", "sglang", "0.4.6.post5", feature="sampler.top_k_top_p",
        status=Status.DEFAULT, absent=("--sampling-backend",),
    ),
    "sglang-0.4.9.post6-b200-flashinfer-sampler": Case(
        "b200", "sglang", "0.4.9.post6", feature="sampler.top_k_top_p",
        status=Status.DEFAULT, absent=("--sampling-backend",),
    ),
    # unchanged: 0.4.5 still calls the API of before FlashInfer 0.2.3
    "sglang-0.4.5-h100-old-api-samples-with-pytorch": Case(
        "h100-sxm", "sglang", "0.4.5", feature="sampler.top_k_top_p",
        status=Status.INEXPRESSIBLE, flags=("--sampling-backend", "pytorch"),
    ),
    "sglang-0.4.9.post6-mi300x-aiter-switch-read": Case(
        "mi300x", "sglang", "0.4.9.post6", env=SGL_AITER, feature="attention.backend",
        absent=PINNED, present=SGL_AITER,
    ),
    "sglang-0.4.9.post6-mi355x-aiter-moe-switch-read": Case(
        "mi355x", "sglang", "0.4.9.post6", env=SGL_AITER, feature="moe.experts",
        present=SGL_AITER,
    ),
    "sglang-0.4.6.post5-mi300x-aiter-attention-default": Case(
        "mi300x", "sglang", "0.4.6.post5", env=SGL_AITER, feature="attention.backend",
        status=Status.DEFAULT, absent=PINNED,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_sglang_release_is_told_4(case: Case) -> None:
    """What each SGLang release is told, by the first audit's check."""
    assert_told(case)
