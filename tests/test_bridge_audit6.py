"""The sixth audit of what the bridge tells real engine releases, AMD (ROCm), attention
backends (vLLM 0.8.5.post1-0.33.0, SGLang 0.4.6.post5-0.5.23, read from their release code):
each finding fixed named cases that failed on the pack before it.

- vLLM 0.8.5.post1 and 0.9.2 pick AITER MLA by VLLM_ROCM_USE_AITER and
  VLLM_ROCM_USE_AITER_MLA alone, with no arch or package check (0.9.2
  v1/attention/backends/mla/rocm_aiter_mla.py:24-26), and refuse the default block size 16
  (platforms/rocm.py 0.8.5.post1 :144-166, 0.9.2 :183-214): where Triton MLA is chosen and the
  operator set VLLM_ROCM_USE_AITER=1, VLLM_ROCM_USE_AITER_MLA=0 is sent from 0.8.5;
- vLLM 0.9.2's V1 engine picks AITER flash attention by VLLM_ROCM_USE_AITER and
  VLLM_ROCM_USE_AITER_MHA on any gfx9, gfx90a included, with no aiter check
  (platforms/rocm.py:224-229, on_gfx9 :116-118): where Triton attention is chosen and the
  operator set VLLM_ROCM_USE_AITER=1, VLLM_ROCM_USE_AITER_MHA=0 is sent from 0.9;
- VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION=1 where AITER unified attention is not supported (no
  aiter, an MI250X, RDNA) stopped every release, though only 0.11.1-0.18.1 select by it:
  0.8.5.post1-0.11.0 do not define it, and 0.19.1-0.33.0 define it but read it nowhere (the knob
  tables; _aiter_ops.py 0.19.1 :1063, :1091 only store it): there the switch counts as ``auto``
  (the bridge's :meth:`~kernelpolicy.bridge.release.MatchedRelease.unread_request`), with a
  warning, and the engine is told the first candidate accepted;
- vLLM >= 0.19 runs ROCM_ATTN first without aiter, TRITON_ATTN only for the models it refuses
  (platforms/rocm.py 0.19.1 :329-336, 0.33.0 :553-564): Triton attention gets no pin there
  (inexpressible), but where vLLM >= 0.28 would put AITER unified attention first (gfx1200/
  gfx1201 with aiter and VLLM_ROCM_USE_AITER on: 0.33.0 :562-563);
- SGLang's own ROCm default is aiter attention whatever SGLANG_USE_AITER says (0.4.9.post6
  model_executor/model_runner.py:394-395, 0.5.23 arg_groups/model_override_base.py:326-327; for
  MLA with 16 or 128 heads per rank, :341-348): the triton pin stays on gfx942/gfx950 with aiter,
  with a warning that it moves SGLang off aiter and how to let kernelpolicy choose aiter.

The AMD machines of the audit are fixtures with another aiter or arch (:data:`PLATFORMS`).
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import AITER, Case, assert_told6

ATTN = "attention.backend"
MLA = "attention.mla"
MLA_OFF = {"VLLM_ROCM_USE_AITER_MLA": "0"}
MHA_OFF = {"VLLM_ROCM_USE_AITER_MHA": "0"}
UNIFIED = {**AITER, "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "1"}
UNREAD = "does not read VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION"
NOT_SUPPORTED = "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION=1 requires rocm_aiter_unified"
PINNED = ("--attention-backend",)
SG_TRITON = ("--attention-backend", "triton")
SG_AITER = "SGLang's own ROCm attention default is aiter"
CASES = {
    "vllm-0.19.1-mi300x-triton-not-pinned": Case(
        "mi300x", "vllm", "0.19.1", feature=ATTN, status=Status.INEXPRESSIBLE, absent=PINNED,
        warning="runs its ROCM_ATTN backend first",
    ),
    "vllm-0.33.0-rx7900xtx-triton-not-pinned": Case(
        "rx7900xtx", "vllm", "0.33.0", feature=ATTN, status=Status.INEXPRESSIBLE,
        absent=PINNED,
    ),
    "vllm-0.24.0-mi250x-triton-not-pinned": Case(
        "mi250x", "vllm", "0.24.0", env=AITER, feature=ATTN, status=Status.INEXPRESSIBLE,
        absent=PINNED,
    ),
    # unchanged: vLLM >= 0.28 puts AITER unified attention first on RDNA4 with aiter on
    "vllm-0.28.0-rx9070xt-aiter-triton-pinned": Case(
        "rx9070xt-aiter", "vllm", "0.28.0", env=AITER, feature=ATTN,
        flags=("--attention-backend", "TRITON_ATTN"),
    ),
    # unchanged: TRITON_ATTN is vLLM's default without aiter in 0.13-0.18
    "vllm-0.18.1-mi250x-triton-pinned": Case(
        "mi250x", "vllm", "0.18.1", feature=ATTN, flags=("--attention-backend", "TRITON_ATTN"),
    ),
    "sglang-0.5.23-mi325x-triton-pin-warns-aiter-default": Case(
        "mi325x", "sglang", "0.5.23", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=SG_TRITON, warning=SG_AITER,
    ),
    "sglang-0.4.6.post5-mi325x-triton-pin-warns-aiter-default": Case(
        "mi325x", "sglang", "0.4.6.post5", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=SG_TRITON, warning=SG_AITER,
    ),
    "sglang-0.5.3.post3-mi355x-triton-pin-warns-aiter-default": Case(
        "mi355x", "sglang", "0.5.3.post3", feature=ATTN, status=Status.INEXPRESSIBLE,
        flags=SG_TRITON, warning=SG_AITER,
    ),
    "sglang-0.5.23-mi325x-triton-mla-pin-warns-aiter-default": Case(
        "mi325x", "sglang", "0.5.23", "mla", feature=MLA, status=Status.INEXPRESSIBLE,
        flags=SG_TRITON, warning="MLA default on ROCm is aiter",
    ),
    # unchanged: without aiter SGLang's own aiter default cannot run; the pin stays
    "sglang-0.5.6.post2-mi250x-triton-pinned": Case(
        "mi250x", "sglang", "0.5.6.post2", feature=ATTN, flags=SG_TRITON,
    ),
    # unchanged: with its switch on kernelpolicy chooses aiter and pins nothing
    "sglang-0.5.23-mi325x-aiter-not-pinned": Case(
        "mi325x", "sglang", "0.5.23", env={"SGLANG_USE_AITER": "1"}, feature=ATTN,
        absent=PINNED, present={"SGLANG_USE_AITER": "1"},
    ),
    "vllm-0.19.1-mi250x-unified-unread-not-blocking": Case(
        "mi250x", "vllm", "0.19.1", env=UNIFIED, feature=ATTN, warning=UNREAD,
        status=Status.INEXPRESSIBLE, absent=PINNED,
    ),
    "vllm-0.33.0-rx7900xtx-unified-unread-not-blocking": Case(
        "rx7900xtx", "vllm", "0.33.0", env=UNIFIED, feature=ATTN, warning=UNREAD,
        status=Status.INEXPRESSIBLE,
    ),
    "vllm-0.11.0-mi300x-no-aiter-unified-undefined-not-blocking": Case(
        "mi300x-no-aiter", "vllm", "0.11.0", env=UNIFIED, feature=ATTN, present=MHA_OFF,
        warning=UNREAD,
    ),
    "vllm-0.8.5.post1-mi250x-unified-undefined-not-blocking": Case(
        "mi250x", "vllm", "0.8.5.post1", env=UNIFIED, feature=ATTN, status=Status.DEFAULT,
        warning=UNREAD,
    ),
    # unchanged: 0.11.1-0.18.1 select AITER unified attention by the variable
    "vllm-0.12.0-mi250x-unified-read-refused": Case(
        "mi250x", "vllm", "0.12.0", env=UNIFIED, feature=ATTN, status=Status.ERROR, ok=False,
        error=NOT_SUPPORTED,
    ),
    "vllm-0.18.1-mi300x-no-aiter-unified-read-refused": Case(
        "mi300x-no-aiter", "vllm", "0.18.1", env=UNIFIED, feature=ATTN, status=Status.ERROR,
        ok=False, error=NOT_SUPPORTED,
    ),
    # unchanged: supported, the request is honoured (by the flag from 0.19)
    "vllm-0.33.0-mi325x-unified-requested": Case(
        "mi325x", "vllm", "0.33.0", env=UNIFIED, feature=ATTN,
        flags=("--attention-backend", "ROCM_AITER_UNIFIED_ATTN"),
    ),
    "vllm-0.9.2-mi300x-no-aiter-mha-switch-off": Case(
        "mi300x-no-aiter", "vllm", "0.9.2", env=AITER, feature=ATTN, present=MHA_OFF,
    ),
    "vllm-0.9.2-mi250x-mha-switch-off": Case(
        "mi250x", "vllm", "0.9.2", env=AITER, feature=ATTN, present=MHA_OFF,
    ),
    "vllm-0.9.2-mi250x-aiter-mha-switch-off": Case(
        "mi250x-aiter", "vllm", "0.9.2", env=AITER, feature=ATTN, present=MHA_OFF,
    ),
    # unchanged: 0.8.5.post1 has no VLLM_ROCM_USE_AITER_MHA
    "vllm-0.8.5.post1-mi250x-no-mha-switch": Case(
        "mi250x", "vllm", "0.8.5.post1", env=AITER, feature=ATTN, status=Status.DEFAULT,
        absent=("VLLM_ROCM_USE_AITER_MHA",),
    ),
    "vllm-0.9.2-mi300x-no-aiter-mla-switch-off": Case(
        "mi300x-no-aiter", "vllm", "0.9.2", "mla", env=AITER, feature=MLA, present=MLA_OFF,
    ),
    "vllm-0.8.5.post1-mi250x-mla-switch-off": Case(
        "mi250x", "vllm", "0.8.5.post1", "mla", env=AITER, feature=MLA, present=MLA_OFF,
    ),
    "vllm-0.9.2-rx7900xtx-mla-switch-off": Case(
        "rx7900xtx", "vllm", "0.9.2", "mla", env=AITER, feature=MLA, present=MLA_OFF,
    ),
    # unchanged: without the operator's switch vLLM runs Triton MLA by itself
    "vllm-0.9.2-mi250x-no-switch-nothing-sent": Case(
        "mi250x", "vllm", "0.9.2", "mla", feature=MLA, status=Status.DEFAULT,
        absent=("VLLM_ROCM_USE_AITER_MLA",),
    ),
    # unchanged: 0.7.3 has no aiter variables at all
    "vllm-0.7.3-mi250x-nothing-sent": Case(
        "mi250x", "vllm", "0.7.3", "mla", env=AITER, feature=MLA, status=Status.DEFAULT,
        absent=("VLLM_ROCM_USE_AITER_MLA",),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_about_attention_6(case: Case) -> None:
    """What each release is told about attention on AMD, by the sixth audit's check."""
    assert_told6(case)
