"""The fifth audit's DeepGEMM findings (vLLM 0.10.2-0.33.0, SGLang 0.5.3.post3-0.5.23, read from
their release code): each fixed named cases that failed on the pack before it. The fixtures have
no DeepGEMM; the cases install ``deep_gemm`` 2.1.0 beside their libraries, as on the audit's H100
and B200.

- VLLM_USE_DEEP_GEMM defaults to 1 from vLLM 0.11.0 (envs.py; the knob tables: unset false in
  0.8.5.post1-0.10.2, true from 0.11.0), and set explicitly vLLM's FP8 MoE oracle returns
  DeepGEMM or raises where it does not fit the checkpoint (per-tensor or per-channel FP8 MoE;
  0.17.1 fused_moe/oracle/fp8.py:343-356, 0.33.0 :484-496), where unset it takes the next
  backend: it is sent only to 0.10.x, for ``moe.experts`` and ``fp8.gemm`` alike;
- SGLang's ``--moe-runner-backend deep_gemm`` overrides every checkpoint's runner, and ModelOpt
  NVFP4 MoE has no deep_gemm path (0.5.20 layers/quantization/modelopt_quant.py:3134-3137, 0.5.23
  :3366-3369): as ``triton``, it is not sent (inexpressible), and the warning says how to force
  it with DeepEP.
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_settings, told_with

DEEP_GEMM = {"deep_gemm": "2.1.0"}
MOE = "moe.experts"
VAR = ("VLLM_USE_DEEP_GEMM",)
CASES = {
    "vllm-0.11.0-h100-deep-gemm-moe-default": Case(
        "h100-sxm", "vllm", "0.11.0", feature=MOE, status=Status.DEFAULT, absent=VAR,
    ),
    "vllm-0.18.1-h100-deep-gemm-moe-default": Case(
        "h100-sxm", "vllm", "0.18.1", feature=MOE, status=Status.DEFAULT, absent=VAR,
    ),
    "vllm-0.33.0-h200-deep-gemm-moe-default": Case(
        "h200", "vllm", "0.33.0", feature=MOE, status=Status.DEFAULT, absent=VAR,
    ),
    "vllm-0.24.0-h200-deep-gemm-fp8-gemm-default": Case(
        "h200", "vllm", "0.24.0", feature="fp8.gemm", status=Status.DEFAULT, absent=VAR,
    ),
    # unchanged: 0.10.x default VLLM_USE_DEEP_GEMM to 0
    "vllm-0.10.2-h100-deep-gemm-moe-told": Case(
        "h100-sxm", "vllm", "0.10.2", feature=MOE, present={"VLLM_USE_DEEP_GEMM": "1"},
    ),
    "vllm-0.10.2-h100-deep-gemm-fp8-gemm-told": Case(
        "h100-sxm", "vllm", "0.10.2", feature="fp8.gemm", present={"VLLM_USE_DEEP_GEMM": "1"},
    ),
    "sglang-0.5.6-h100-deep-gemm-moe-not-sent": Case(
        "h100-sxm", "sglang", "0.5.6", feature=MOE, status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="--moe-a2a-backend deepep",
    ),
    "sglang-0.5.23-h200-deep-gemm-moe-not-sent": Case(
        "h200", "sglang", "0.5.23", feature=MOE, status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="ModelOpt NVFP4 MoE has no deep_gemm path",
    ),
    "sglang-0.5.3.post3-h100-deep-gemm-moe-not-sent": Case(
        "h100-sxm", "sglang", "0.5.3.post3", feature=MOE, status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_deep_gemm_is_told_only_where_the_default_is_off(case: Case) -> None:
    """With DeepGEMM installed, what each release is told about it, by the first audit's check
    (the decision is deep_gemm in every case)."""
    settings = told_with(case, DEEP_GEMM)
    assert settings.decisions[case.feature].impl == "deep_gemm", settings.decisions[case.feature]
    assert_settings(case, settings)
