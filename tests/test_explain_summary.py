"""explain's summary words and hints: what they say must be true of the platform shown."""

from __future__ import annotations

import re

import pytest

from kernelpolicy.cli import main
from tests.helpers import FIXTURES


def _explain(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """explain's table, runs of spaces squeezed to two."""
    main(["explain", *argv])
    return re.sub(r" {2,}", "  ", capsys.readouterr().out)


@pytest.mark.parametrize(
    ("fixture", "why"),
    [
        pytest.param("cpu", "fallback: aiter rejected (no GPU)", id="no-gpu"),
        pytest.param("h100-sxm", "fallback: aiter rejected (for another vendor's GPU)",
                     id="nvidia-gpu"),
        pytest.param("mi300x", "fallback: aiter rejected (below)", id="amd-gpu-switched-off"),
    ],
)  # fmt: skip
def test_fallback_says_why_in_a_word(
    fixture: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fallback whose candidates need a GPU of a vendor this machine lacks: "no GPU" where
    the platform has none (its detail says "found no GPU"), another vendor's where it has one."""
    out = _explain(["sampler.greedy", "--platform", str(FIXTURES / f"{fixture}.json")], capsys)
    assert f"\nsampler.greedy  torch  {why}\n" in out


@pytest.mark.parametrize(
    ("fixture", "feature", "env", "hints"),
    [
        pytest.param("t4", "sampler.top_k_top_p", [], [], id="install-cannot-lift-capability"),
        pytest.param("a100", "moe.experts", [], [], id="deep-gemm-below-its-capability"),
        pytest.param("mi250x", "allreduce_rmsnorm", ["VLLM_ROCM_USE_AITER=1"], [],
                     id="install-cannot-lift-arch"),
        pytest.param("h100-real", "sampler.top_k_top_p", [],
                     ["hint: pip install 'flashinfer-python>=0.2.3'"],
                     id="only-the-library-missing"),
        pytest.param("h100-sxm", "moe.experts", [], ["hint: pip install 'deep_gemm'"],
                     id="deep-gemm-on-its-capability"),
        pytest.param("mi300x", "sampler.top_k_top_p", ["VLLM_ROCM_USE_AITER=1"],
                     ["hint: upgrade amd-aiter to >= 0.1.13"], id="only-the-version-too-old"),
    ],
)  # fmt: skip
def test_hints_only_where_following_them_helps(
    fixture: str,
    feature: str,
    env: list[str],
    hints: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A rejected candidate's hint (an install, an upgrade) is shown only where following every
    hint makes it acceptable: not where the device fails another of its requirements."""
    argv = [feature, "--platform", str(FIXTURES / f"{fixture}.json")]
    out = _explain([*argv, *(a for e in env for a in ("--env", e))], capsys)
    shown = [line.strip() for line in out.splitlines() if line.strip().startswith("hint: ")]
    assert shown == hints
