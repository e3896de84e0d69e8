"""The seventh audit's sampler findings (vLLM 0.8.5.post1-0.33.0 and SGLang 0.4.6.post5-0.5.23
on NVIDIA, read from their release code): each fixed named cases that failed on the pack or
the bridge before it, checked with the real ``kernelpolicy env --json``.

- vLLM 0.8.5-0.10.0 compare FlashInfer's version as a string (0.8.5.post1
  v1/sample/ops/topk_topp_sampler.py:34 ``>= "0.2.3"``; 0.9.2 and 0.10.0 :35 ``< "0.2.3"``;
  0.10.1 :36 packaging.version), so FlashInfer 0.2.10-0.2.14 count as older than 0.2.3: 0.8.5
  then calls them with the API of before 0.2.3 (:282-306, uniform_samples and a success value,
  which 0.2.3 removed, its own comment at :35-42) and fails at the first top-k/top-p request
  unless VLLM_USE_FLASHINFER_SAMPLER=0 (read there, envs.py:348-350), and 0.9.2-0.10.0 sample
  with PyTorch whatever the variable says. Both are said (inexpressible) where flashinfer was
  told as vLLM's default (0.9.2, 0.10.0) or said to be turned off by vLLM (0.8.5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_said

SAMPLER = "sampler.top_k_top_p"
FI_SAMPLER = "VLLM_USE_FLASHINFER_SAMPLER"
AS_A_STRING = "FlashInfer's version as a string"
CASES = {
    "vllm-0.8.5.post1-h100-fi-0.2.14.post1-fails-unless-off": Case(
        "h100-fi-0.2.14.post1", "vllm", "0.8.5.post1", feature=SAMPLER,
        status=Status.INEXPRESSIBLE, warning="unless VLLM_USE_FLASHINFER_SAMPLER=0, the first",
    ),
    "vllm-0.8.5.post1-h100-fi-0.2.10-fails-unless-off": Case(
        "h100-fi-0.2.10", "vllm", "0.8.5.post1", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning=AS_A_STRING,
    ),
    "vllm-0.8.5.post1-h100-fi-0.2.14.post1-operator-on-fails": Case(
        "h100-fi-0.2.14.post1", "vllm", "0.8.5.post1", env={FI_SAMPLER: "1"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, warning=AS_A_STRING,
    ),
    "vllm-0.9.2-h100-fi-0.2.14.post1-pytorch-whatever": Case(
        "h100-fi-0.2.14.post1", "vllm", "0.9.2", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        absent=(FI_SAMPLER,), warning="samples with its PyTorch path whatever",
    ),
    "vllm-0.10.0-h100-fi-0.2.10-pytorch-whatever": Case(
        "h100-fi-0.2.10", "vllm", "0.10.0", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        absent=(FI_SAMPLER,), warning=AS_A_STRING,
    ),
    # unchanged: the operator's =0 chooses the fallback, told =0; 0.10.1 compares versions
    # properly; FlashInfer 0.2.5 sorts as it is
    "vllm-0.8.5.post1-h100-fi-0.2.14.post1-operator-off": Case(
        "h100-fi-0.2.14.post1", "vllm", "0.8.5.post1", env={FI_SAMPLER: "0"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, present={FI_SAMPLER: "0"},
    ),
    "vllm-0.10.1-h100-fi-0.2.14.post1-default": Case(
        "h100-fi-0.2.14.post1", "vllm", "0.10.1", feature=SAMPLER, status=Status.DEFAULT,
        absent=(FI_SAMPLER,),
    ),
    "vllm-0.9.2-h100-fi-0.2.5-default": Case(
        "h100-fi-0.2.5", "vllm", "0.9.2", feature=SAMPLER, status=Status.DEFAULT,
        absent=(FI_SAMPLER,),
    ),
    "vllm-0.8.5.post1-h100-fi-0.2.5-turned-off-by-vllm": Case(
        "h100-fi-0.2.5", "vllm", "0.8.5.post1", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning="turns it off for FlashInfer 0.2.3 and later",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_sampling_7(case: Case, tmp_path: Path) -> None:
    """What each release is told about sampling, by the seventh audit's check."""
    assert_said(case, tmp_path)
