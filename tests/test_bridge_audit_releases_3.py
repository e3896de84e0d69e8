"""The third audit of what the bridge tells real engine releases (vLLM 0.13.0, 0.15.1, 0.24.0,
0.33.0; SGLang 0.5.20, 0.5.23, read from their release code): each finding fixed a named case
that failed on the pack before it.

- a pinned ``--attention-backend`` is checked alone, and vLLM stops where it does not fit the
  model instead of taking the next backend: FLASHINFER and (FA2, 0.13-0.23 everywhere)
  FLASH_ATTN refuse multimodal models whose image tokens attend bidirectionally (mm_prefix:
  Gemma 3 multimodal, PaliGemma, Molmo2), FA2 refuses gpt-oss's sinks; on NVIDIA, where vLLM's
  own order puts the chosen backend first, nothing is sent (status ``default``); on ROCm
  AITER FA must still be pinned (ROCM_ATTN comes first from 0.19), with a warning;
- SGLang's ``--moe-runner-backend triton`` stops ModelOpt NVFP4 MoE checkpoints (no triton
  path; left on auto SGLang runs Marlin on capability 8.0-9.x): not sent on NVIDIA;
- ``--model-kind mla`` mixed dense MLA models (DeepSeek V3/R1, Kimi K2) with sparse ones
  (DeepSeek V3.2/V4, GLM-5: use_sparse=True, vllm 0.33.0 models/deepseek_v32/attention.py:214):
  the dense backends it pinned (FLASHMLA, FLASHINFER_MLA, TRITON_MLA) are refused for sparse
  models ("sparse not supported", v1/attention/backend.py:321-323), and the sparse indexer's
  requirement refused dense models on ROCm without aiter, which have no indexer
  (model_executor/models/deepseek_v2.py:1138) and run TRITON_MLA (platforms/rocm.py:541-551).
  ``mla`` is now dense MLA; ``mla-sparse`` is told no attention backend and keeps the indexer;
- vLLM 0.28.0-0.33.0 run the sparse indexer's own op on gfx11 (RDNA3/3.5) without aiter
  (model_executor/layers/sparse_attn_indexer.py ``or on_gfx11()``: 0.28.0 :859, 0.33.0 :1179;
  the op registered alone there, _aiter_ops.py 0.28.0 :2038, 0.33.0 :3036), but the pack saw
  only gfx950's path and refused sparse MLA on an RX 7900 XTX; before 0.28 vLLM raises there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.bridge import Status
from kernelpolicy.cli import main
from kernelpolicy.platform.fixtures import fixture_dir
from tests.bridge_audit_helpers import AITER, Case, assert_told

NOT_PINNED = ("--attention-backend",)
CASES = {
    "vllm-0.33.0-b200-flashinfer-not-pinned-mm-prefix": Case(
        "b200", "vllm", "0.33.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.13.0-b200-flashinfer-not-pinned-mm-prefix": Case(
        "b200", "vllm", "0.13.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.33.0-a100-flash-attn-not-pinned-sinks": Case(
        "a100", "vllm", "0.33.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.15.1-l4-flash-attn-not-pinned-sinks": Case(
        "l4", "vllm", "0.15.1", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.13.0-h100-flash-attn-not-pinned-mm-prefix": Case(
        "h100-sxm", "vllm", "0.13.0", feature="attention.backend", status=Status.DEFAULT,
        absent=NOT_PINNED,
    ),
    "vllm-0.33.0-mi300x-aiter-fa-pin-warns-mm-prefix": Case(
        "mi300x", "vllm", "0.33.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=("--attention-backend", "ROCM_AITER_FA"),
        warning="mm_prefix models: Gemma 3 multimodal, PaliGemma, Molmo2",
    ),
    "vllm-0.24.0-mi355x-aiter-fa-pin-warns-mm-prefix": Case(
        "mi355x", "vllm", "0.24.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=("--attention-backend", "ROCM_AITER_FA"),
        warning="pass --attention-backend TRITON_ATTN yourself",
    ),
    "sglang-0.5.23-h100-triton-moe-refuses-nvfp4": Case(
        "h100-sxm", "sglang", "0.5.23", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="NVFP4",
    ),
    "sglang-0.5.20-a100-triton-moe-refuses-nvfp4": Case(
        "a100", "sglang", "0.5.20", feature="moe.experts", status=Status.INEXPRESSIBLE,
        absent=("--moe-runner-backend",), warning="runs Marlin on capability 8.0-9.x",
    ),
    "sglang-0.5.23-cpu-triton-moe-not-sent": Case(
        "cpu", "sglang", "0.5.23", feature="moe.experts", status=Status.DEFAULT,
        absent=("--moe-runner-backend",),
    ),
    # on ROCm the flag stopped Quark MXFP4 MoE from 0.5.11 (the fourth audit): not sent;
    # without SGLANG_USE_AITER SGLang's auto runs triton for unquantized MoE
    "sglang-0.5.23-mi300x-triton-moe-not-sent": Case(
        "mi300x", "sglang", "0.5.23", feature="moe.experts", status=Status.DEFAULT,
        absent=("--moe-runner-backend",),
    ),
    # sparse MLA (DeepSeek V3.2/V4, GLM-5): no dense MLA backend, vLLM and SGLang pick theirs
    "vllm-0.33.0-h100-flashmla-refuses-sparse-mla": Case(
        "h100-sxm", "vllm", "0.33.0", "mla-sparse", feature="attention.mla",
        status=Status.OTHER_MODEL_KIND, absent=NOT_PINNED,
    ),
    "vllm-0.33.0-b200-flashinfer-mla-refuses-sparse-mla": Case(
        "b200", "vllm", "0.33.0", "mla-sparse", feature="attention.mla",
        status=Status.OTHER_MODEL_KIND, absent=NOT_PINNED,
    ),
    "vllm-0.13.0-a100-triton-mla-refuses-sparse-mla": Case(
        "a100", "vllm", "0.13.0", "mla-sparse", feature="attention.mla",
        status=Status.OTHER_MODEL_KIND, absent=NOT_PINNED,
    ),
    "vllm-0.11.1-h100-flashmla-variable-refuses-sparse-mla": Case(
        "h100-sxm", "vllm", "0.11.1", "mla-sparse", feature="attention.mla",
        status=Status.OTHER_MODEL_KIND, absent=("VLLM_ATTENTION_BACKEND",),
    ),
    "sglang-0.5.23-h100-sparse-mla-keeps-dsa": Case(
        "h100-sxm", "sglang", "0.5.23", "mla-sparse", feature="attention.mla",
        status=Status.OTHER_MODEL_KIND, absent=NOT_PINNED,
    ),
    # its mirror: a dense MLA model on the H100 still gets FLASHMLA, which vLLM accepts there
    "vllm-0.33.0-h100-dense-mla-flashmla-told": Case(
        "h100-sxm", "vllm", "0.33.0", "mla", feature="attention.mla",
        flags=("--attention-backend", "FLASHMLA"),
    ),
    # dense MLA on ROCm without aiter: no indexer, vLLM runs TRITON_MLA
    "vllm-0.33.0-mi300x-dense-mla-without-aiter-starts": Case(
        "mi300x", "vllm", "0.33.0", "mla", feature="attention.mla",
        flags=("--attention-backend", "TRITON_MLA"),
    ),
    "vllm-0.15.1-mi250x-dense-mla-indexer-not-required": Case(
        "mi250x", "vllm", "0.15.1", "mla", feature="sparse_attn_indexer",
        status=Status.OTHER_MODEL_KIND,
    ),
    "vllm-0.24.0-rx7900xtx-dense-mla-aiter-switch-starts": Case(
        "rx7900xtx", "vllm", "0.24.0", "mla", AITER, feature="sparse_attn_indexer",
        status=Status.OTHER_MODEL_KIND,
    ),
    # its mirror: a sparse model there still needs the indexer (vLLM >= 0.15 raises without aiter)
    "vllm-0.33.0-mi300x-sparse-mla-without-aiter-refused": Case(
        "mi300x", "vllm", "0.33.0", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.ERROR, ok=False, error="sparse_attn_indexer is required here",
    ),
    "vllm-0.15.1-mi250x-sparse-mla-refused": Case(
        "mi250x", "vllm", "0.15.1", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.ERROR, ok=False,
    ),
    # gfx11 without aiter: vLLM's own indexer op from 0.28.0 (forward_hip `or on_gfx11()`)
    "vllm-0.33.0-rx7900xtx-sparse-indexer-native-gfx11": Case(
        "rx7900xtx", "vllm", "0.33.0", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.DEFAULT, absent=("VLLM_ROCM_USE_AITER",),
    ),
    "vllm-0.28.0-rx7900xtx-sparse-indexer-native-gfx11": Case(
        "rx7900xtx", "vllm", "0.28.0", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.DEFAULT, absent=("VLLM_ROCM_USE_AITER",),
    ),
    # 0.27.1's forward_hip raises unless rocm_aiter_ops.is_enabled() (:853-870), which is never
    # true on gfx11 (is_aiter_found_and_supported: CDNA 3 or later): the indexer is required,
    # so env/exec refuse to start it, naming 0.28.0 (the fourth audit; a warning before)
    "vllm-0.27.1-rx7900xtx-sparse-indexer-no-gfx11-path": Case(
        "rx7900xtx", "vllm", "0.27.1", "mla-sparse", feature="sparse_attn_indexer",
        status=Status.ERROR, ok=False, error="no native gfx11 indexer path",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_3(case: Case) -> None:
    """What each release is told, by the first audit's check."""
    assert_told(case)


@pytest.mark.parametrize(
    ("fixture", "kind", "code", "flags", "said"),
    [
        pytest.param("h100-sxm", "mla-sparse", 0, [], "", id="h100-sparse-no-backend"),
        pytest.param("h100-sxm", "mla", 0, ["--attention-backend", "FLASHMLA"], "",
                     id="h100-dense-flashmla"),
        pytest.param("mi300x", "mla", 0, ["--attention-backend", "TRITON_MLA"], "",
                     id="mi300x-dense-starts"),
        pytest.param("mi300x", "mla-sparse", 1, None, "hint: set VLLM_ROCM_USE_AITER=1",
                     id="mi300x-sparse-refused-with-hint"),
        pytest.param("rx7900xtx", "mla-sparse", 0, [], "", id="rx7900xtx-sparse-native-gfx11"),
    ],
)  # fmt: skip
def test_env_model_kinds_of_mla(
    fixture: str,
    kind: str,
    code: int,
    flags: list[str] | None,
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kernelpolicy env --model-kind`` (vLLM 0.33.0): a sparse-MLA model is told no attention
    backend, a dense one its MLA backend; on ROCm without aiter only the sparse one is refused,
    with the indexer's hint."""
    argv = [
        "env", "--engine", "vllm", "--engine-version", "0.33.0", "--format", "json",
        "--platform", str(Path(fixture_dir(), "platforms", f"{fixture}.json")),
        "--model-kind", kind,
    ]  # fmt: skip
    assert main(argv) == code
    out, err = capsys.readouterr()
    if flags is not None:
        assert json.loads(out)["flags"] == flags
    assert said in err
