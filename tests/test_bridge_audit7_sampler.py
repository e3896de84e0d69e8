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
- SGLANG_IS_FLASHINFER_AVAILABLE=false makes SGLang's is_flashinfer_available() false first
  thing, and its sampling backend defaults to pytorch (0.4.6.post5 utils.py:160-167,
  server_args.py:312-315; 0.5.23 utils/common.py:388-395, arg_groups/overrides.py:1019-1026):
  a switch of the flashinfer candidate now (false = off), where SGLang was told flashinfer as
  its default.
- No SGLang release reads VLLM_USE_FLASHINFER_SAMPLER, nor vLLM SGLang's variables: another
  engine's variable no longer stops this one (VLLM_USE_FLASHINFER_SAMPLER=1 without FlashInfer
  stopped every SGLang release), nor switches its candidate off (=0 sent SGLang
  --sampling-backend pytorch; SGLang's variable would have turned vLLM's FlashInfer sampler
  off): the engine is told the choice without it, with a warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_said
from tests.helpers import resolve_on

SAMPLER = "sampler.top_k_top_p"
FI_SAMPLER = "VLLM_USE_FLASHINFER_SAMPLER"
AS_A_STRING = "FlashInfer's version as a string"
SG_AVAILABLE = "SGLANG_IS_FLASHINFER_AVAILABLE"
NOT_READ = "is {}'s, which {} does not read"
BACKEND = ("--sampling-backend",)
PYTORCH = ("--sampling-backend", "pytorch")
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
    "sglang-0.5.23-h200-flashinfer-unavailable": Case(
        "h200", "sglang", "0.5.23", env={SG_AVAILABLE: "false"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, flags=PYTORCH,
    ),
    "sglang-0.4.6.post5-h100-flashinfer-unavailable": Case(
        "h100-sxm", "sglang", "0.4.6.post5", env={SG_AVAILABLE: "0"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, flags=PYTORCH,
    ),
    "vllm-0.20.2-h200-sglang-variable-not-read": Case(
        "h200", "vllm", "0.20.2", env={SG_AVAILABLE: "false"}, feature=SAMPLER,
        present={FI_SAMPLER: "1"}, warning=NOT_READ.format("sglang", "vllm"),
    ),
    "vllm-0.20.2-h200-sglang-variable-disagrees-not-read": Case(
        "h200", "vllm", "0.20.2", env={SG_AVAILABLE: "false", FI_SAMPLER: "1"},
        feature=SAMPLER, present={FI_SAMPLER: "1"},
        warning=NOT_READ.format("sglang", "vllm"),
    ),
    "sglang-0.5.23-h100-no-flashinfer-vllm-sampler-on": Case(
        "h100-fi-none", "sglang", "0.5.23", env={FI_SAMPLER: "1"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, absent=BACKEND,
        warning=NOT_READ.format("vllm", "sglang"),
    ),
    "sglang-0.4.6.post5-t4-vllm-sampler-on": Case(
        "t4", "sglang", "0.4.6.post5", env={FI_SAMPLER: "1"}, feature=SAMPLER,
        status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.5.23-h200-vllm-sampler-off-not-read": Case(
        "h200", "sglang", "0.5.23", env={FI_SAMPLER: "0"}, feature=SAMPLER,
        status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.5.23-h200-vllm-sampler-unreadable-not-read": Case(
        "h200", "sglang", "0.5.23", env={FI_SAMPLER: "maybe"}, feature=SAMPLER,
        status=Status.DEFAULT, absent=BACKEND,
    ),
    # unchanged: SGLang's default where its variable is true; vLLM's own variable still
    # stops vLLM where FlashInfer is not supported
    "sglang-0.5.23-h200-flashinfer-available": Case(
        "h200", "sglang", "0.5.23", env={SG_AVAILABLE: "true"}, feature=SAMPLER,
        status=Status.DEFAULT, absent=BACKEND,
    ),
    "vllm-0.23.0-h100-no-flashinfer-own-variable-refused": Case(
        "h100-fi-none", "vllm", "0.23.0", env={FI_SAMPLER: "1"}, feature=SAMPLER, ok=False,
        error="VLLM_USE_FLASHINFER_SAMPLER=1 requires flashinfer",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_sampling_7(case: Case, tmp_path: Path) -> None:
    """What each release is told about sampling, by the seventh audit's check."""
    assert_said(case, tmp_path)


def test_sglang_s_variable_still_turns_flashinfer_off_in_process() -> None:
    """The resolution reads every engine's variables (explain, the in-process choice):
    SGLANG_IS_FLASHINFER_AVAILABLE=false leaves FlashInfer's sampler out there too."""
    decision = resolve_on("h200", SGLANG_IS_FLASHINFER_AVAILABLE="false").decision(SAMPLER)
    assert decision.impl == "triton", decision.reasons
    assert decision.candidates[0].switch_source == "SGLANG_IS_FLASHINFER_AVAILABLE=false"
