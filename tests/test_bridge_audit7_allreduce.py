"""The seventh audit's all-reduce finding (vLLM 0.16.0-0.33.0 and SGLang 0.4.10.post2-0.5.23 on
NVIDIA, read from their release code): named cases that failed on the pack before it, checked
with the real ``kernelpolicy env --json``.

- vLLM >= 0.17 fuses all-reduce + RMSNorm with FlashInfer by default at -O2/-O3 where tensor
  parallelism is above 1, FlashInfer is installed and the capability is 9.0 or 10.0 (0.17.0-
  0.18.1: is_device_capability(100), config/vllm.py 0.17.0 :113-132, :204, :223, :314) or any
  10.x from 0.19.0 (is_device_capability_family(100), 0.19.0 :116-135; B300 is 10.3), the pass
  manager adding AllReduceFusionPass (compilation/passes/pass_manager.py 0.17.0 :124-125); 0.16.0
  leaves it off at every level (config/vllm.py 0.16.0 :124-181). The policy said torch with
  vLLM's default "agreeing": now inexpressible, naming -cc.pass_config.fuse_allreduce_rms=false,
  as the AMD rule of vLLM >= 0.21 does; no --compilation-config is sent.
- SGLang turns the same fusion on by itself for the models it lists on SM90/SM100 (0.5.0-0.5.6:
  SM100, gpt-oss and DeepSeek V3, server_args.py 0.5.3.post3 :845-889; 0.5.7-0.5.9 :1470-1697;
  0.5.23 arg_groups/overrides.py :929-1003), which --enforce-disable-flashinfer-allreduce-fusion
  turns off from 0.5.10.post1 (server_args.py :2115-2121): SGLang was told nothing about the
  feature; now a warning names the flag where it exists, and says no flag turns it off before.
  SGLang's aiter fusion (--enable-aiter-allreduce-fusion) is not sent, and said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import AITER, Case, assert_said

AR = "allreduce_rmsnorm"
CC = "-cc.pass_config.fuse_allreduce_rms=false"
ENFORCE = "--enforce-disable-flashinfer-allreduce-fusion"
SENT = ("--compilation-config", ENFORCE)
FUSED = Status.INEXPRESSIBLE
CASES = {
    "vllm-0.17.0-h100-fused": Case("h100-sxm", "vllm", "0.17.0", feature=AR, status=FUSED,
                                   absent=SENT, warning=CC),
    "vllm-0.18.1-b200-fused": Case("b200", "vllm", "0.18.1", feature=AR, status=FUSED,
                                   absent=SENT, warning=CC),
    "vllm-0.19.0-b300-fused": Case("b300", "vllm", "0.19.0", feature=AR, status=FUSED,
                                   absent=SENT, warning=CC),
    "vllm-0.33.0-h200-fused": Case("h200", "vllm", "0.33.0", feature=AR, status=FUSED,
                                   absent=SENT, warning=CC),
    "sglang-0.5.23-h100-fused": Case("h100-sxm", "sglang", "0.5.23", feature=AR, status=FUSED,
                                     absent=SENT, warning=ENFORCE),
    "sglang-0.5.10.post1-b200-fused": Case("b200", "sglang", "0.5.10.post1", feature=AR,
                                           status=FUSED, absent=SENT, warning=ENFORCE),
    "sglang-0.5.9-h200-fused-no-flag": Case("h200", "sglang", "0.5.9", feature=AR, status=FUSED,
                                            absent=SENT, warning="no option of theirs"),
    "sglang-0.5.6-b200-fused-no-flag": Case("b200", "sglang", "0.5.6", feature=AR, status=FUSED,
                                            absent=SENT, warning="on SM100 for gpt-oss"),
    "sglang-0.5.6-h100-apart": Case("h100-sxm", "sglang", "0.5.6", feature=AR,
                                    status=Status.DEFAULT, absent=SENT),
    "sglang-0.4.10.post2-b200-apart": Case("b200", "sglang", "0.4.10.post2", feature=AR,
                                           status=Status.DEFAULT, absent=SENT),
    "sglang-0.5.23-mi355x-aiter-not-sent": Case(
        "mi355x", "sglang", "0.5.23", env=AITER, feature=AR, status=Status.INEXPRESSIBLE,
        absent=("--enable-aiter-allreduce-fusion",), warning="--enable-aiter-allreduce-fusion",
    ),
    # unchanged: no fusion before 0.17, on 10.3 before 0.19, on 8.x, without FlashInfer; aiter
    "vllm-0.16.0-h100-apart": Case("h100-sxm", "vllm", "0.16.0", feature=AR,
                                   status=Status.DEFAULT),
    "vllm-0.18.1-b300-apart": Case("b300", "vllm", "0.18.1", feature=AR, status=Status.DEFAULT),
    "vllm-0.33.0-a100-apart": Case("a100-fi-0.7.2.post1", "vllm", "0.33.0", feature=AR,
                                   status=Status.DEFAULT),
    "vllm-0.33.0-h100-no-flashinfer-apart": Case("h100-real", "vllm", "0.33.0", feature=AR,
                                                 status=Status.DEFAULT),
    "vllm-0.33.0-mi355x-aiter-told": Case("mi355x", "vllm", "0.33.0", env=AITER, feature=AR,
                                          present=AITER),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_allreduce_rmsnorm_7(case: Case, tmp_path: Path) -> None:
    """What each release is told about the fused all-reduce + RMSNorm, by the seventh audit."""
    assert_said(case, tmp_path)
