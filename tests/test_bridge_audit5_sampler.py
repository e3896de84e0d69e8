"""The fifth audit's sampler findings (vLLM 0.7.3-0.33.0, read from their release code): each
fixed named cases that failed on the pack before it.

- vLLM 0.8.5.post1's V1 sampler turns FlashInfer's sampler off for FlashInfer >= 0.2.3 (which
  the candidate needs), whatever VLLM_USE_FLASHINFER_SAMPLER says
  (v1/sample/ops/topk_topp_sampler.py:33-49), and with =1 its V0 sampler, 0.7.3's default,
  calls the API of before 0.2.3 (model_executor/layers/sampler.py:25-29, :561-566): nothing is
  sent before 0.9, and vLLM samples with PyTorch (inexpressible);
- vLLM 0.9-0.11.0 read the variable unset as on (``is not False``: 0.9.2 :40, 0.11.0 :46) and
  0.21.0 and later default it to True (envs.py; the knob tables), where an explicit 1 turns the
  fallback into a RuntimeError (0.21.0 topk_topp_sampler.py:50-56, 0.33.0 :151-155): =1 is sent
  only to 0.11.1-0.20.x, where it is opt-in (0.11.1 :34, 0.20.2 :39).
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_told

SAMPLER = "sampler.top_k_top_p"
FI = "VLLM_USE_FLASHINFER_SAMPLER"
CASES = {
    "vllm-0.8.5.post1-h100-flashinfer-sampler-not-sent": Case(
        "h100-sxm", "vllm", "0.8.5.post1", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        absent=(FI,), warning="samples with its PyTorch path",
    ),
    "vllm-0.7.3-b200-flashinfer-sampler-not-sent": Case(
        "b200", "vllm", "0.7.3", feature=SAMPLER, status=Status.INEXPRESSIBLE, absent=(FI,),
    ),
    "vllm-0.9.2-h100-flashinfer-sampler-default": Case(
        "h100-sxm", "vllm", "0.9.2", feature=SAMPLER, status=Status.DEFAULT, absent=(FI,),
    ),
    "vllm-0.11.0-b200-flashinfer-sampler-default": Case(
        "b200", "vllm", "0.11.0", feature=SAMPLER, status=Status.DEFAULT, absent=(FI,),
    ),
    "vllm-0.21.0-h100-flashinfer-sampler-default": Case(
        "h100-sxm", "vllm", "0.21.0", feature=SAMPLER, status=Status.DEFAULT, absent=(FI,),
    ),
    "vllm-0.24.0-h200-flashinfer-sampler-default": Case(
        "h200", "vllm", "0.24.0", feature=SAMPLER, status=Status.DEFAULT, absent=(FI,),
    ),
    "vllm-0.33.0-b200-flashinfer-sampler-default": Case(
        "b200", "vllm", "0.33.0", feature=SAMPLER, status=Status.DEFAULT, absent=(FI,),
    ),
    # unchanged: 0.11.1-0.20.x read unset as off (opt-in)
    "vllm-0.11.1-h100-flashinfer-sampler-opt-in": Case(
        "h100-sxm", "vllm", "0.11.1", feature=SAMPLER, present={FI: "1"},
    ),
    "vllm-0.20.2-b200-flashinfer-sampler-opt-in": Case(
        "b200", "vllm", "0.20.2", feature=SAMPLER, present={FI: "1"},
    ),
    # unchanged: where kernelpolicy's choice is not FlashInfer, vLLM is told to turn it off
    "vllm-0.24.0-a100-triton-sampler-flashinfer-off": Case(
        "a100", "vllm", "0.24.0", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        present={FI: "0"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_sampling_5(case: Case) -> None:
    """What each release is told about sampling, by the first audit's check."""
    assert_told(case)
