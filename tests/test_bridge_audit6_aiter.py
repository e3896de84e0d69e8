"""The sixth audit's findings on vLLM's aiter kernels (vLLM 0.8.5.post1-0.33.0 on AMD, read from
their release code): each fixed named cases that failed on the pack before it.

- vLLM's V1 engine, the default from 0.10, has no aiter paged attention: in 0.10.x-0.13.0
  VLLM_ROCM_USE_AITER_PAGED_ATTN=1 only turns vLLM's own custom paged attention off
  (platforms/rocm.py use_rocm_custom_paged_attention: 0.10.2 :122-148, 0.13.0 :116-144), and
  only 0.10.x's V0 backend imports the aiter kernel (attention/backends/rocm_flash_attn.py
  0.10.2 :31-50): nothing is sent, inexpressible;
- the sparse attention indexer's aiter op runs only where ``rocm_aiter_ops.is_enabled()`` (gfx9
  in 0.15.1-0.18.1, gfx942/gfx950 from 0.19, on_mi3xx: _aiter_ops.py 0.19.1 :36-55), or from
  0.28 on gfx11 and gfx1200/gfx1201 (sparse_attn_indexer.py 0.28.0 :856-859); elsewhere
  ``forward_hip`` raises RuntimeError (0.20.0 :509-530, 0.33.0 :1176-1208): aiter on RDNA
  before 0.28 and on gfx90a from 0.19 is inexpressible, so the requirement stops the engine;
- vLLM fuses the shared experts only inside its aiter fused MoE
  (``is_fusion_moe_shared_experts_enabled = is_fused_moe_enabled() and ...``: _aiter_ops.py
  0.12.0 :492-493, 0.33.0 :2338-2339): the operator's VLLM_ROCM_USE_AITER_MOE=0 switches the
  fusion off in the decision, and where moe.experts is not rocm_aiter the fusion is not told;
- vLLM has no aiter fused all-reduce + RMSNorm before 0.21.0 (RocmAiterAllReduceFusionPass
  arrives in compilation/passes/pass_manager.py 0.21.0 :145-147; knob fact
  ``aiter_allreduce_rms``): aiter there is inexpressible, and vLLM runs the two apart;
- from 0.21 vLLM fuses all-reduce + RMSNorm with aiter by default where VLLM_ROCM_USE_AITER is
  on and tensor parallelism is above 1 (config/vllm.py 0.21.0 :119-129, :222, :244;
  compilation/passes/pass_manager.py :145-147): where kernelpolicy chose torch there, a warning
  says how to turn the fusion off (kernelpolicy sends no --compilation-config, which vLLM keeps
  one of: utils/argparse_utils.py 0.21.0 :369-429).
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import AITER, Case, assert_told6, told6

PAGED = "rocm.aiter.paged_attention"
PA = "VLLM_ROCM_USE_AITER_PAGED_ATTN"
FORCE_PA = {**AITER, "KERNELPOLICY_FORCE_ROCM_AITER_PAGED_ATTENTION": "aiter"}
FUSION = "rocm.aiter.fusion_shared_experts"
FUSE = "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS"
FORCE_FUSION = {**AITER, "KERNELPOLICY_FORCE_ROCM_AITER_FUSION_SHARED_EXPERTS": "aiter"}
AR = "allreduce_rmsnorm"
FORCE_AR_TORCH = {**AITER, "KERNELPOLICY_FORCE_ALLREDUCE_RMSNORM": "torch"}
INDEXER = "sparse_attn_indexer"
REQUIRED = "sparse_attn_indexer is required here"
CASES = {
    "vllm-0.15.1-mi325x-allreduce-aiter-no-fusion": Case(
        "mi325x", "vllm", "0.15.1", env=AITER, feature=AR, status=Status.INEXPRESSIBLE,
        warning="no aiter fused all-reduce + RMSNorm",
    ),
    "vllm-0.10.2-mi325x-allreduce-aiter-no-fusion": Case(
        "mi325x", "vllm", "0.10.2", env=AITER, feature=AR, status=Status.INEXPRESSIBLE,
    ),
    "vllm-0.20.2-mi355x-allreduce-aiter-no-fusion": Case(
        "mi355x", "vllm", "0.20.2", env=AITER, feature=AR, status=Status.INEXPRESSIBLE,
    ),
    # unchanged: from 0.21 the fusion is aiter's where the switch is on
    "vllm-0.21.0-mi325x-allreduce-aiter-told": Case(
        "mi325x", "vllm", "0.21.0", env=AITER, feature=AR, present=AITER,
    ),
    "vllm-0.33.0-mi355x-allreduce-aiter-told": Case(
        "mi355x", "vllm", "0.33.0", env=AITER, feature=AR, present=AITER,
    ),
    "vllm-0.21.0-mi325x-allreduce-torch-warns-fusion": Case(
        "mi325x", "vllm", "0.21.0", env=FORCE_AR_TORCH, feature=AR, status=Status.INEXPRESSIBLE,
        absent=("--compilation-config",), warning="-cc.pass_config.fuse_allreduce_rms=false",
    ),
    "vllm-0.33.0-mi355x-allreduce-torch-warns-fusion": Case(
        "mi355x", "vllm", "0.33.0", env=FORCE_AR_TORCH, feature=AR, status=Status.INEXPRESSIBLE,
        warning="fuses all-reduce + RMSNorm with aiter by default",
    ),
    # unchanged: no aiter fusion before 0.21, and none without the switch
    "vllm-0.20.2-mi325x-allreduce-torch-default": Case(
        "mi325x", "vllm", "0.20.2", env=FORCE_AR_TORCH, feature=AR, status=Status.DEFAULT,
    ),
    "vllm-0.21.0-mi325x-allreduce-torch-no-switch-default": Case(
        "mi325x", "vllm", "0.21.0", env={"KERNELPOLICY_FORCE_ALLREDUCE_RMSNORM": "torch"},
        feature=AR, status=Status.DEFAULT,
    ),
    "vllm-0.12.0-mi325x-fusion-without-aiter-moe-not-sent": Case(
        "mi325x", "vllm", "0.12.0",
        env={**FORCE_FUSION, "KERNELPOLICY_FORCE_MOE_EXPERTS": "triton"}, feature=FUSION,
        status=Status.INEXPRESSIBLE, absent=(FUSE,), present={"VLLM_ROCM_USE_AITER_MOE": "0"},
        warning="only inside its aiter fused MoE",
    ),
    "vllm-0.33.0-mi355x-fusion-without-aiter-moe-not-sent": Case(
        "mi355x", "vllm", "0.33.0",
        env={**FORCE_FUSION, "KERNELPOLICY_FORCE_MOE_EXPERTS": "triton"}, feature=FUSION,
        status=Status.INEXPRESSIBLE, absent=(FUSE,),
    ),
    # unchanged: with the aiter fused MoE the fusion is told, and the MoE switch with it
    "vllm-0.12.0-mi325x-fusion-told": Case(
        "mi325x", "vllm", "0.12.0", env=FORCE_FUSION, feature=FUSION,
        present={FUSE: "1", "VLLM_ROCM_USE_AITER_MOE": "1"},
    ),
    "vllm-0.20.0-rx7900xtx-aiter-indexer-refused": Case(
        "rx7900xtx-aiter", "vllm", "0.20.0", "mla-sparse", env=AITER, feature=INDEXER,
        status=Status.ERROR, ok=False, error="vllm 0.28.0 is the first release",
    ),
    "vllm-0.15.1-rx9070xt-aiter-indexer-refused": Case(
        "rx9070xt-aiter", "vllm", "0.15.1", "mla-sparse", env=AITER, feature=INDEXER,
        status=Status.ERROR, ok=False, error="vllm 0.28.0 is the first release",
    ),
    "vllm-0.19.1-mi250x-aiter-indexer-refused": Case(
        "mi250x-aiter", "vllm", "0.19.1", "mla-sparse", env=AITER, feature=INDEXER,
        status=Status.ERROR, ok=False, error=REQUIRED,
    ),
    "vllm-0.33.0-mi250x-aiter-indexer-refused": Case(
        "mi250x-aiter", "vllm", "0.33.0", "mla-sparse", env=AITER, feature=INDEXER,
        status=Status.ERROR, ok=False, error="no release kernelpolicy knows runs it here",
    ),
    # unchanged: 0.15.1-0.18.1 gate aiter by on_gfx9, gfx90a included
    "vllm-0.18.1-mi250x-aiter-indexer-told": Case(
        "mi250x-aiter", "vllm", "0.18.1", "mla-sparse", env=AITER, feature=INDEXER,
        present=AITER,
    ),
    # unchanged: from 0.28 gfx1200/gfx1201 take aiter (is_rdna_aiter_enabled), gfx11 its own path
    "vllm-0.28.0-rx9070xt-aiter-indexer-told": Case(
        "rx9070xt-aiter", "vllm", "0.28.0", "mla-sparse", env=AITER, feature=INDEXER,
        present=AITER,
    ),
    "vllm-0.28.0-rx7900xtx-aiter-indexer-told": Case(
        "rx7900xtx-aiter", "vllm", "0.28.0", "mla-sparse", env=AITER, feature=INDEXER,
        present=AITER,
    ),
    "vllm-0.20.0-mi355x-aiter-indexer-told": Case(
        "mi355x", "vllm", "0.20.0", "mla-sparse", env=AITER, feature=INDEXER, present=AITER,
    ),
    "vllm-0.12.0-mi325x-aiter-paged-attention-not-sent": Case(
        "mi325x", "vllm", "0.12.0", env=FORCE_PA, feature=PAGED, status=Status.INEXPRESSIBLE,
        absent=(PA,), warning="V1 engine has no aiter paged attention",
    ),
    "vllm-0.10.2-mi325x-aiter-paged-attention-not-sent": Case(
        "mi325x", "vllm", "0.10.2", env=FORCE_PA, feature=PAGED, status=Status.INEXPRESSIBLE,
        absent=(PA,),
    ),
    "vllm-0.13.0-mi355x-aiter-paged-attention-not-sent": Case(
        "mi355x", "vllm", "0.13.0", env=FORCE_PA, feature=PAGED, status=Status.INEXPRESSIBLE,
        absent=(PA,),
    ),
    # unchanged: with aiter on and the paged attention not chosen, vLLM keeps its own
    "vllm-0.12.0-mi325x-native-paged-attention-off": Case(
        "mi325x", "vllm", "0.12.0", env=AITER, feature=PAGED, present={PA: "0"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_aiter_kernels_6(case: Case) -> None:
    """What each release is told about its aiter kernels, by the sixth audit's check."""
    assert_told6(case)


def test_an_operators_paged_attention_switch_is_kept_but_not_told() -> None:
    """The operator's own VLLM_ROCM_USE_AITER_PAGED_ATTN=1 reaches vLLM as set (never
    overwritten), but the decision tells vLLM no variable of its own for it."""
    case = Case("mi325x", "vllm", "0.12.0", env={**AITER, PA: "1"}, feature=PAGED)
    settings = told6(case)
    told = settings.decisions[PAGED]
    assert (told.impl, told.status, told.env) == ("aiter", Status.INEXPRESSIBLE, ())


def test_the_operators_moe_switch_off_turns_the_fusion_off() -> None:
    """VLLM_ROCM_USE_AITER_MOE=0 (the operator's) leaves vLLM no aiter fused MoE to fuse the
    shared experts into: the decision is native, and vLLM is told the fusion off."""
    env = {**AITER, FUSE: "1", "VLLM_ROCM_USE_AITER_MOE": "0"}
    settings = told6(Case("mi325x", "vllm", "0.12.0", env=env, feature=FUSION))
    told = settings.decisions[FUSION]
    assert (told.impl, told.status, told.env) == ("native", Status.TOLD, ((FUSE, "0"),))
