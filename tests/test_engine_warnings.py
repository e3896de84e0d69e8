"""A decision warns about a preferred candidate it fell back from only where that candidate is
meant for this machine's hardware and something can be done (installed, upgraded, set): a
Blackwell-only kernel on a Hopper node, or an aiter kernel for gfx942 on gfx90a, is the policy
working, shown among the rejected candidates and never a warning (as it gets no hint)."""

from __future__ import annotations

import pytest

from tests.helpers import resolve_on

AITER = {"VLLM_ROCM_USE_AITER": "1"}


@pytest.mark.parametrize(
    ("machine", "env", "feature", "warned", "rejected"),
    [
        pytest.param("h100-real", {}, "attention.backend", [], "flashinfer",
                     id="blackwell-attention-on-hopper"),
        pytest.param("h100-real", {}, "attention.mla", [], "flashinfer_mla",
                     id="blackwell-mla-on-hopper"),
        pytest.param("h100-real", {}, "moe.experts", ["deep_gemm"], "flashinfer_cutlass",
                     id="blackwell-moe-quiet-missing-library-warns"),
        pytest.param("h100-real", {}, "sampler.top_k_top_p", ["flashinfer"], "flashinfer",
                     id="in-process-missing-library-warns"),
        pytest.param("t4", {}, "sampler.top_k_top_p", [], "triton",
                     id="in-process-below-capability"),
        pytest.param("l4", {}, "fp8.gemm", [], "deep_gemm", id="engine-only-below-capability"),
        pytest.param("l4", {}, "sampler.top_k_top_p", ["flashinfer"], "flashinfer",
                     id="old-library-warns"),
        pytest.param("mi250x", AITER, "sampler.top_k_top_p", [], "aiter",
                     id="in-process-arch-not-listed"),
        pytest.param("rx7900xtx", AITER, "rocm.aiter.fp4bmm", [], "aiter",
                     id="engine-only-arch-not-listed"),
        pytest.param("mi300x", AITER, "sampler.top_k_top_p", ["aiter"], "aiter",
                     id="known-bad-version-warns"),
        pytest.param("h100-sxm", {}, "sampler.greedy", [], "aiter", id="another-vendor"),
        pytest.param("cpu", {}, "sampler.top_k_top_p", [], "flashinfer", id="no-gpu"),
    ],
)  # fmt: skip
def test_warnings_only_for_candidates_meant_for_this_hardware(
    machine: str, env: dict[str, str], feature: str, warned: list[str], rejected: str
) -> None:
    """The warnings name exactly ``warned``; ``rejected`` keeps its line among the reasons."""
    decision = resolve_on(machine, **env, KERNELPOLICY_LOG_FORMAT="off").decision(feature)
    assert decision.error is None
    assert [w.split(" is not supported here")[0] for w in decision.warnings] == warned
    assert any(line.startswith(f"{rejected} rejected: ") for line in decision.reasons)
