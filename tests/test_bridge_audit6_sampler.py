"""The sixth audit's sampler findings (vLLM 0.12.0-0.33.0 and SGLang 0.4.3-0.5.23 on AMD and
NVIDIA, read from their release code): each fixed named cases that failed on the pack before it.

- SGLang's own sampling backend is flashinfer where FlashInfer imports on CUDA and pytorch
  elsewhere (is_flashinfer_available: 0.4.6.post5 server_args.py:312-315, 0.5.13 :2759-2763,
  0.5.23 arg_groups/overrides.py:1018-1026; 0.4.3 :234-237 wherever CUDA is): ``--sampling-backend``
  is sent only where it differs from that default (the old note of the fifth audit's sampler
  commit: it was sent equal to it, harmless noise);
- vLLM 0.14.0-0.22.1 install their aiter sampler but hard-code ``DISABLE_AITER_SAMPLER = True``
  in ``forward_hip``, which returns the PyTorch path for every call (topk_topp_sampler.py 0.14.0
  :177-192, 0.22.1 :196-211; gone in 0.23.0): the aiter candidate is inexpressible there (knob
  fact ``aiter_sampler = "disabled"``), and where torch is chosen no "set VLLM_ROCM_USE_AITER=0"
  advice is given (vLLM samples with PyTorch anyway);
- vLLM 0.12.0-0.13.0 run that sampler on gfx90a too (``rocm_aiter_ops.is_enabled()`` accepts
  every gfx9 until 0.18.1: _aiter_ops.py 0.12.0 :26-44), where the policy does not choose aiter:
  inexpressible with VLLM_ROCM_USE_AITER=1 on an MI250X with aiter.
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import Case, assert_told6, told6

SAMPLER = "sampler.top_k_top_p"
AITER = {"VLLM_ROCM_USE_AITER": "1"}
DISABLED = "hard-disable their aiter sampler"
REJECTED = "runs the aiter sampler this policy rejected"
BACKEND = ("--sampling-backend",)
PYTORCH = ("--sampling-backend", "pytorch")
CASES = {
    "vllm-0.14.0-mi325x-aiter-sampler-disabled": Case(
        "mi325x", "vllm", "0.14.0", env=AITER, feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning=DISABLED,
    ),
    "vllm-0.18.1-mi355x-aiter-sampler-disabled": Case(
        "mi355x", "vllm", "0.18.1", env=AITER, feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning=DISABLED,
    ),
    "vllm-0.22.1-mi325x-aiter-sampler-disabled": Case(
        "mi325x", "vllm", "0.22.1", env=AITER, feature=SAMPLER, status=Status.INEXPRESSIBLE,
    ),
    # unchanged: 0.12.0-0.13.0 and 0.23.0 and later run it
    "vllm-0.13.0-mi325x-aiter-sampler-told": Case(
        "mi325x", "vllm", "0.13.0", env=AITER, feature=SAMPLER, present=AITER,
    ),
    "vllm-0.23.0-mi325x-aiter-sampler-told": Case(
        "mi325x", "vllm", "0.23.0", env=AITER, feature=SAMPLER, present=AITER,
    ),
    "vllm-0.14.0-mi300x-torch-no-advice": Case(
        "mi300x", "vllm", "0.14.0", env=AITER, feature=SAMPLER, status=Status.DEFAULT,
    ),
    "vllm-0.22.1-mi300x-torch-no-advice": Case(
        "mi300x", "vllm", "0.22.1", env=AITER, feature=SAMPLER, status=Status.DEFAULT,
    ),
    # unchanged: where vLLM runs the aiter sampler, the rejected one is said with its cost
    "vllm-0.12.0-mi300x-torch-aiter-rejected": Case(
        "mi300x", "vllm", "0.12.0", env=AITER, feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning=REJECTED,
    ),
    "vllm-0.23.0-mi300x-torch-aiter-rejected": Case(
        "mi300x", "vllm", "0.23.0", env=AITER, feature=SAMPLER, status=Status.INEXPRESSIBLE,
        warning=REJECTED,
    ),
    "vllm-0.12.0-mi250x-aiter-runs-on-gfx90a": Case(
        "mi250x-aiter", "vllm", "0.12.0", env=AITER, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, warning="on gfx90a too",
    ),
    "vllm-0.13.0-mi250x-aiter-runs-on-gfx90a": Case(
        "mi250x-aiter", "vllm", "0.13.0", env=AITER, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, warning="Set VLLM_ROCM_USE_AITER=0",
    ),
    # unchanged: disabled in 0.14-0.22, gfx942/gfx950 only from 0.19, no aiter installed
    "vllm-0.14.0-mi250x-aiter-sampler-disabled-anyway": Case(
        "mi250x-aiter", "vllm", "0.14.0", env=AITER, feature=SAMPLER, status=Status.DEFAULT,
    ),
    "vllm-0.23.0-mi250x-aiter-not-on-gfx90a": Case(
        "mi250x-aiter", "vllm", "0.23.0", env=AITER, feature=SAMPLER, status=Status.DEFAULT,
    ),
    "vllm-0.12.0-mi250x-no-aiter": Case(
        "mi250x", "vllm", "0.12.0", env=AITER, feature=SAMPLER, status=Status.DEFAULT,
    ),
    "sglang-0.5.23-h100-flashinfer-default": Case(
        "h100-sxm", "sglang", "0.5.23", feature=SAMPLER, status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.4.6.post5-h200-flashinfer-default": Case(
        "h200", "sglang", "0.4.6.post5", feature=SAMPLER, status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.5.23-mi325x-torch-default": Case(
        "mi325x", "sglang", "0.5.23", feature=SAMPLER, status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.5.13-mi355x-aiter-inexpressible-nothing-sent": Case(
        "mi355x", "sglang", "0.5.13", env={"VLLM_ROCM_USE_AITER": "1"}, feature=SAMPLER,
        status=Status.INEXPRESSIBLE, absent=BACKEND,
    ),
    "sglang-0.5.23-t4-torch-default": Case(
        "t4", "sglang", "0.5.23", feature=SAMPLER, status=Status.DEFAULT, absent=BACKEND,
    ),
    "sglang-0.5.23-h100-real-triton-nothing-sent": Case(
        "h100-real", "sglang", "0.5.23", feature=SAMPLER, status=Status.INEXPRESSIBLE,
        absent=BACKEND,
    ),
    # unchanged: where FlashInfer is installed SGLang's default is flashinfer, so pytorch is sent
    "sglang-0.5.23-a100-triton-pytorch-sent": Case(
        "a100", "sglang", "0.5.23", feature=SAMPLER, status=Status.INEXPRESSIBLE, flags=PYTORCH,
    ),
    "sglang-0.5.23-h100-torch-forced-pytorch-sent": Case(
        "h100-sxm", "sglang", "0.5.23", env={"KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P": "torch"},
        feature=SAMPLER, flags=PYTORCH,
    ),
    # unchanged: 0.4.3 defaults to flashinfer wherever CUDA is, with FlashInfer's old API
    "sglang-0.4.3-t4-torch-pytorch-sent": Case(
        "t4", "sglang", "0.4.3", feature=SAMPLER, flags=PYTORCH,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_sampling_6(case: Case) -> None:
    """What each release is told about sampling, by the sixth audit's check."""
    assert_told6(case)


def test_no_advice_to_give_up_aiter_where_vllm_samples_with_pytorch() -> None:
    """vLLM 0.14-0.22 sample with PyTorch whatever VLLM_ROCM_USE_AITER says: where kernelpolicy
    chose torch (amd-aiter 0.1.12), no warning tells the operator to give up every aiter kernel
    for it."""
    settings = told6(Case("mi300x", "vllm", "0.18.1", env=AITER, feature=SAMPLER))
    said = [w for f, w in settings.feature_warnings if f == SAMPLER]
    assert not any(REJECTED in w or "give up" in w for w in said), said
