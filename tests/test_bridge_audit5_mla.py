"""The fifth audit's MLA findings (vLLM 0.10.2-0.33.0, SGLang 0.4.6.post5-0.5.23, read from
their release code): each fixed named cases that failed on the pack before it.

- vLLM 0.10.2's FLASHINFER_MLA refuses an FP8 KV cache ("FlashInferMLA V1 with FP8 KV cache not
  yet supported", v1/attention/backends/mla/flashinfer_mla.py:72-74), and vLLM unpinned runs
  CUTLASS_MLA on B200 (platforms/cuda.py:151-159): the pin stays with a warning;
- from 0.15.1 FLASHINFER_MLA is first in vLLM's MLA order on capability 10.x (0.15.1
  platforms/cuda.py:51-59; 0.14.1 put CUTLASS_MLA first), and the pin refuses a qk_nope_head_dim
  outside 64/128 (0.18.1 flashinfer_mla.py:80-91; 64/128/192 in 0.33.0 :240-249) where vLLM
  unpinned takes the next backend: nothing is sent there;
- SGLang 0.4.6.post5-0.5.3.post3's flashmla backend imports DeepSeek's separate ``flash_mla``
  package (layers/attention/flashmla_backend.py: 0.4.6.post5 :15, 0.5.3.post3 :12), which SGLang
  does not install; 0.5.4.post3 imports ``sgl_kernel.flash_mla`` (:12): before 0.5.4.post3 the
  flag is sent only where ``flash_mla`` is installed;
- SGLang's own MLA default on SM100 is flashinfer from 0.4.9.post6 (model_executor/
  model_runner.py:402-409), and trtllm_mla for DeepSeek V3/R1 from 0.5.3.post3
  (server_args.py:835-845): ``--attention-backend flashinfer`` is not sent there.
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_settings, assert_told, told_with

MLA = "attention.mla"
PINNED = ("--attention-backend",)
CASES = {
    "vllm-0.10.2-b200-flashinfer-mla-pin-warns-fp8-kv": Case(
        "b200", "vllm", "0.10.2", "mla", feature=MLA, status=Status.INEXPRESSIBLE,
        present={"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"}, warning="FP8 KV cache",
    ),
    # unchanged: 0.11.0's FLASHINFER_MLA takes an FP8 KV cache
    "vllm-0.11.0-b200-flashinfer-mla-pinned": Case(
        "b200", "vllm", "0.11.0", "mla", feature=MLA,
        present={"VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"},
    ),
    "vllm-0.15.1-b200-flashinfer-mla-not-pinned": Case(
        "b200", "vllm", "0.15.1", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    "vllm-0.18.1-b200-flashinfer-mla-not-pinned": Case(
        "b200", "vllm", "0.18.1", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    "vllm-0.33.0-b200-flashinfer-mla-not-pinned": Case(
        "b200", "vllm", "0.33.0", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    # unchanged: 0.13-0.14 put CUTLASS_MLA first on capability 10.x
    "vllm-0.14.1-b200-flashinfer-mla-pinned": Case(
        "b200", "vllm", "0.14.1", "mla", feature=MLA,
        flags=("--attention-backend", "FLASHINFER_MLA"),
    ),
    "sglang-0.5.3-h100-flashmla-without-flash-mla": Case(
        "h100-sxm", "sglang", "0.5.3", "mla", feature=MLA, status=Status.INEXPRESSIBLE,
        absent=PINNED, warning="DeepSeek's separate flash_mla package",
    ),
    "sglang-0.4.6.post5-h200-flashmla-without-flash-mla": Case(
        "h200", "sglang", "0.4.6.post5", "mla", feature=MLA, status=Status.INEXPRESSIBLE,
        absent=PINNED,
    ),
    # unchanged: 0.5.4.post3 takes FlashMLA from sgl-kernel
    "sglang-0.5.4.post3-h100-flashmla-pinned": Case(
        "h100-sxm", "sglang", "0.5.4.post3", "mla", feature=MLA,
        flags=("--attention-backend", "flashmla"),
    ),
    "sglang-0.5.6-b200-flashinfer-mla-not-pinned": Case(
        "b200", "sglang", "0.5.6", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    "sglang-0.5.23-b200-flashinfer-mla-not-pinned": Case(
        "b200", "sglang", "0.5.23", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    "sglang-0.4.9.post6-b200-flashinfer-mla-not-pinned": Case(
        "b200", "sglang", "0.4.9.post6", "mla", feature=MLA, status=Status.DEFAULT, absent=PINNED,
    ),
    # unchanged: 0.4.6.post5's MLA default off Hopper is triton
    "sglang-0.4.6.post5-b200-flashinfer-mla-pinned": Case(
        "b200", "sglang", "0.4.6.post5", "mla", feature=MLA,
        flags=("--attention-backend", "flashinfer"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_mla_5(case: Case) -> None:
    """What each release is told about dense MLA, by the first audit's check."""
    assert_told(case)


@pytest.mark.parametrize(
    "version",
    [pytest.param("0.4.6.post5", id="0.4.6.post5"), pytest.param("0.5.3.post3", id="0.5.3.post3")],
)
def test_flashmla_is_sent_where_flash_mla_is_installed(version: str) -> None:
    """With DeepSeek's flash_mla installed (the distribution name of its setup.py), SGLang before
    0.5.4.post3 is told --attention-backend flashmla as before."""
    case = Case(
        "h100-sxm", "sglang", version, "mla", feature=MLA, flags=("--attention-backend", "flashmla")
    )
    assert_settings(case, told_with(case, {"flash_mla": "1.0.0"}))
