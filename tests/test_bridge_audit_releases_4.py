"""The fourth audit of what the bridge tells real engine releases (vLLM 0.8.5.post1, 0.9.2,
0.19.1-0.33.0; SGLang 0.4.5-0.4.9.post6, 0.5.3-0.5.23, read from their release code): each
finding fixed a named case that failed on the pack before it.

- vLLM >= 0.19 on MI300X/MI325X/MI355X with aiter: ``--attention-backend ROCM_AITER_FA`` must
  stay pinned (vLLM's own order puts ROCM_ATTN first: 0.19.1 platforms/rocm.py:329-338, 0.33.0
  :553-564), and a pin is checked alone: its warning now names every model AITER FA refuses
  (attention sinks before 0.23, head sizes other than 64/128/256, non-decoder attention,
  float32, mm_prefix), not only the multimodal ones;
- vLLM 0.8.5.post1 and 0.9.2 (now in the knob tables) read VLLM_ROCM_USE_AITER and select AITER
  MLA by it, refusing any block size but 1 (0.9.2 platforms/rocm.py:183-214, :305-306): dense
  MLA there needs ``--block-size 1`` as in 0.10.0-0.11.0, and "no VLLM_ROCM_USE_AITER before
  0.10.0" was false for them.
"""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import Status
from tests.bridge_audit_helpers import AITER, Case, assert_told, told

AITER_FA = ("--attention-backend", "ROCM_AITER_FA")
CASES = {
    "vllm-0.19.1-mi300x-aiter-fa-pin-warns-sinks": Case(
        "mi300x", "vllm", "0.19.1", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=AITER_FA, warning="attention sinks (gpt-oss)",
    ),
    "vllm-0.22.1-mi325x-aiter-fa-pin-warns-sinks": Case(
        "mi325x", "vllm", "0.22.1", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=AITER_FA, warning="attention sinks (gpt-oss)",
    ),
    "vllm-0.19.1-mi355x-aiter-fa-pin-warns-head-sizes": Case(
        "mi355x", "vllm", "0.19.1", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=AITER_FA,
        warning="head sizes other than 64, 128 and 256 (Phi-3 96, Phi-2 80)",
    ),
    "vllm-0.33.0-mi300x-aiter-fa-pin-warns-encoder-only": Case(
        "mi300x", "vllm", "0.33.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=AITER_FA,
        warning="encoder-only embedding and rerank models, Whisper",
    ),
    "vllm-0.33.0-mi355x-aiter-fa-pin-warns-float32": Case(
        "mi355x", "vllm", "0.33.0", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, flags=AITER_FA, warning="and float32",
    ),
    "vllm-0.9.2-mi300x-aiter-mla-block-size-1": Case(
        "mi300x", "vllm", "0.9.2", "mla", AITER, feature="attention.mla",
        present={"VLLM_ROCM_USE_AITER_MLA": "1"}, flags=("--block-size", "1"),
    ),
    "vllm-0.8.5.post1-mi355x-aiter-mla-block-size-1": Case(
        "mi355x", "vllm", "0.8.5.post1", "mla", AITER, feature="attention.mla",
        present={"VLLM_ROCM_USE_AITER_MLA": "1"}, flags=("--block-size", "1"),
    ),
    "vllm-0.7.3-mi300x-no-aiter-switch": Case(
        "mi300x", "vllm", "0.7.3", "mla", AITER, feature="attention.mla",
        status=Status.INEXPRESSIBLE, absent=("--block-size",),
        warning="defines no VLLM_ROCM_USE_AITER in 0.7.3",
    ),
    "vllm-0.9.2-mi300x-aiter-fa-not-encoded-not-absent": Case(
        "mi300x", "vllm", "0.9.2", env=AITER, feature="attention.backend",
        status=Status.INEXPRESSIBLE, warning="they read VLLM_ROCM_USE_AITER from 0.8.5",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_what_each_release_is_told_4(case: Case) -> None:
    """What each release is told, by the first audit's check."""
    assert_told(case)


@pytest.mark.parametrize(
    ("version", "sinks"),
    [
        pytest.param("0.22.1", True, id="0.22.1-refuses-sinks"),
        pytest.param("0.23.0", False, id="0.23.0-supports-sinks"),
        pytest.param("0.33.0", False, id="0.33.0-supports-sinks"),
    ],
)
def test_aiter_fa_sinks_named_only_where_refused(version: str, sinks: bool) -> None:
    """AITER FA's supports_sink arrives in vLLM 0.23.0 (rocm_aiter_fa.py:714): from there gpt-oss
    runs with the pin, and the warning stops naming it."""
    settings = told(Case("mi300x", "vllm", version, env=AITER))
    said = " ".join(w for f, w in settings.feature_warnings if f == "attention.backend")
    assert ("gpt-oss" in said) is sinks, said


@pytest.mark.parametrize(
    ("fixture", "version", "works"),
    [
        pytest.param("rx7900xtx", "0.15.1", "vllm 0.28.0", id="rx7900xtx-0.15.1-refused"),
        pytest.param("rx7900xtx", "0.27.1", "vllm 0.28.0", id="rx7900xtx-0.27.1-refused"),
        pytest.param("mi355x", "0.16.0", "vllm 0.30.0", id="mi355x-0.16.0-refused"),
        pytest.param("mi355x", "0.29.0", "vllm 0.30.0", id="mi355x-0.29.0-refused"),
    ],
)
def test_a_required_choice_a_release_cannot_run_is_refused(
    fixture: str, version: str, works: str
) -> None:
    """Sparse MLA without aiter: the indexer is required (vLLM >= 0.15 raises without a path),
    and this release has no native path for the GPU: env/exec stop, naming the first release
    that runs it, where before it was only a warning (the fourth audit's finding 8)."""
    settings = told(Case(fixture, "vllm", version, "mla-sparse"))
    assert not settings.ok
    assert settings.decisions["sparse_attn_indexer"].status is Status.ERROR
    said = " ".join(settings.errors)
    assert f"{works} is the first release kernelpolicy knows to run it" in said, said
