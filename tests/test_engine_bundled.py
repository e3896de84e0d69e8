"""The bundled policy pack on the platform fixtures, with environment variations.

Each row is one of the examples the policies were written from (DESIGN.md and the seeds).
"""

from __future__ import annotations

import pytest

from kernelpolicy.engine import CheckKind, ErrorCode, Reason
from tests.helpers import resolve_on, with_device, with_libraries

TOPK = "sampler.top_k_top_p"


@pytest.mark.parametrize(
    ("platform", "env", "impl", "reason"),
    [
        pytest.param("h100-sxm", {}, "flashinfer", Reason.PREFERRED, id="h100-auto"),
        pytest.param("h200", {}, "flashinfer", Reason.PREFERRED, id="h200-auto"),
        pytest.param("a100", {}, "triton", Reason.PREFERRED, id="a100-flashinfer-0.2.1-too-old"),
        pytest.param("l4", {}, "triton", Reason.PREFERRED, id="l4-flashinfer-0.2.0-too-old"),
        pytest.param("b200", {}, "flashinfer", Reason.PREFERRED, id="b200-sm100"),
        pytest.param("t4", {}, "torch", Reason.FALLBACK, id="t4-sm75-falls-back"),
        pytest.param("cpu", {}, "torch", Reason.FALLBACK, id="cpu"),
        # without FlashInfer (or with it off) NVIDIA parts use kernelpolicy's Triton sampler
        pytest.param("h100-real", {}, "triton", Reason.PREFERRED, id="h100-without-flashinfer"),
        pytest.param(
            "h100-sxm",
            {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
            "triton",
            Reason.PREFERRED,
            id="h100-off",
        ),
        pytest.param(
            "h100-sxm",
            {"VLLM_USE_FLASHINFER_SAMPLER": "TRUE"},
            "flashinfer",
            Reason.REQUESTED,
            id="h100-required",
        ),
        pytest.param("mi300x", {}, "torch", Reason.FALLBACK, id="mi300x-aiter-off-by-default"),
        pytest.param(
            "mi300x",
            {"VLLM_ROCM_USE_AITER": "1"},
            "torch",
            Reason.FALLBACK,
            id="mi300x-aiter-0.1.12-buggy",
        ),
        pytest.param(
            "mi325x",
            {"VLLM_ROCM_USE_AITER": "1"},
            "aiter",
            Reason.PREFERRED,
            id="mi325x-aiter-0.1.13",
        ),
        pytest.param(
            "mi355x",
            {"VLLM_ROCM_USE_AITER": "yes"},
            "aiter",
            Reason.PREFERRED,
            id="mi355x-dev-build-base-version",
        ),
        pytest.param(
            "mi250x", {"VLLM_ROCM_USE_AITER": "1"}, "torch", Reason.FALLBACK, id="mi250x-gfx90a"
        ),
        pytest.param(
            "rx7900xtx", {"VLLM_ROCM_USE_AITER": "1"}, "torch", Reason.FALLBACK, id="rdna3"
        ),
    ],
)
def test_top_k_top_p(platform: str, env: dict[str, str], impl: str, reason: Reason) -> None:
    """FlashInfer (>= 0.2.3) on NVIDIA 8.0-12.1 with >16 SMs, aiter >= 0.1.13 on gfx942/950
    when enabled."""
    decision = resolve_on(platform, **env).decision(TOPK)
    assert (decision.impl, decision.reason) == (impl, reason)
    assert decision.error is None


def test_aiter_bug_is_explained_with_reference_and_hint() -> None:
    """The rejected aiter sampler names the version, the bug, the reference and the fix."""
    decision = resolve_on("mi300x", VLLM_ROCM_USE_AITER="1").decision(TOPK)
    aiter = next(c for c in decision.candidates if c.impl == "aiter")
    (failure,) = aiter.failures
    assert failure.kind is CheckKind.LIBRARY_VERSION
    assert str(failure) == (
        "needs amd-aiter >=0.1.13, found 0.1.12: top-p accuracy bug (repeated generations on "
        "DeepSeek models) (ROCm/aiter#2035)"
    )
    assert failure.hint == "upgrade amd-aiter to >= 0.1.13"
    assert any("aiter is not supported here" in w for w in decision.warnings)


@pytest.mark.parametrize(
    ("aiter", "impl"),
    [
        pytest.param("0.1.12", "torch", id="0.1.12"),
        pytest.param("0.1.13", "aiter", id="0.1.13"),
        pytest.param("0.1.13.dev4", "aiter", id="dev-of-fixed-release-by-base"),
        pytest.param("0.1.16.post3.dev0+g1a2b", "aiter", id="post-dev-local"),
        pytest.param("0.1.7.post2.dev18", "torch", id="pypi-build"),
        pytest.param("garbage", "torch", id="unreadable-version"),
    ],
)
def test_aiter_version_boundaries(aiter: str, impl: str) -> None:
    """Base-version comparison: 0.1.13.dev4 counts as 0.1.13; an unreadable version rejects."""
    platform = with_libraries("mi325x", amd_aiter=aiter)
    assert resolve_on(platform, VLLM_ROCM_USE_AITER="1").decision(TOPK).impl == impl


def test_unreadable_version_says_so() -> None:
    """An unreadable library version is an explicit failure, never a silent mismatch."""
    platform = with_libraries("mi325x", amd_aiter="garbage")
    decision = resolve_on(platform, VLLM_ROCM_USE_AITER="1").decision(TOPK)
    aiter = next(c for c in decision.candidates if c.impl == "aiter")
    assert aiter.failures[0].kind is CheckKind.UNREADABLE_VERSION
    assert "unreadable version 'garbage'" in aiter.failures[0].message


def test_required_but_unsupported_lists_every_reason() -> None:
    """VLLM_USE_FLASHINFER_SAMPLER=1 on a T4: an error naming every failed check."""
    decision = resolve_on("t4", VLLM_USE_FLASHINFER_SAMPLER="1").decision(TOPK)
    assert decision.error_code is ErrorCode.REQUIRED_UNSUPPORTED
    assert decision.impl is None
    assert decision.error == (
        "VLLM_USE_FLASHINFER_SAMPLER=1 requires flashinfer, which is not supported here: "
        "needs compute capability >=8.0,<=12.1, found 7.5; needs flashinfer-python (not installed)"
    )


def test_sixteen_sms_is_not_enough() -> None:
    """More than 16 SMs are needed: a 16-SM part skips FlashInfer and says why."""
    platform = with_device("l4", compute_units=16)
    decision = resolve_on(platform).decision(TOPK)
    assert decision.impl == "triton"
    assert "needs at least 17 SMs, found 16" in decision.reasons[1]


def test_bad_switch_value_is_an_error_naming_the_variable() -> None:
    """A switch that is not a boolean makes the decision an error, not a guess."""
    decision = resolve_on("h100-sxm", VLLM_USE_FLASHINFER_SAMPLER="maybe").decision(TOPK)
    assert decision.error_code is ErrorCode.BAD_ENVIRONMENT
    assert decision.error == (
        "VLLM_USE_FLASHINFER_SAMPLER='maybe' is not a boolean: expected 1/0, true/false, "
        "yes/no, on/off (any case)"
    )


def test_empty_switch_counts_as_unset() -> None:
    """VAR= (empty) is the same as unset."""
    assert (
        resolve_on("h100-sxm", VLLM_USE_FLASHINFER_SAMPLER="").decision(TOPK).impl == "flashinfer"
    )


def test_fallback_without_nvml_devices() -> None:
    """NVML failed (vendor nvidia, no devices): flashinfer is rejected quoting the probe error."""
    platform = resolve_on("h100-sxm").platform.replace(
        **{"devices": (), "probe_errors": ("nvml: cannot initialise: Driver Not Loaded",)}
    )
    decision = resolve_on(platform).decision(TOPK)
    assert decision.impl == "torch"
    assert "Driver Not Loaded" in decision.reasons[1]


@pytest.mark.parametrize(
    ("platform", "env", "impl"),
    [
        pytest.param("mi300x", {}, "torch", id="sglang-aiter-off-by-default"),
        pytest.param("mi300x", {"SGLANG_USE_AITER": "1"}, "aiter", id="sglang-aiter-on"),
        pytest.param(
            "mi300x",
            {"SGLANG_USE_AITER": "1", "SGLANG_DISABLE_AITER_GREEDY_SAMPLE": "1"},
            "torch",
            id="kill-switch",
        ),
        pytest.param(
            "mi300x",
            {"SGLANG_USE_AITER": "1", "SGLANG_DISABLE_AITER_GREEDY_SAMPLE": "0"},
            "aiter",
            id="kill-switch-off",
        ),
        pytest.param("h100-sxm", {"SGLANG_USE_AITER": "1"}, "torch", id="nvidia"),
        pytest.param(
            with_device("mi355x", arch="gfx1250", capability="12.5"),
            {"SGLANG_USE_AITER": "1"},
            "torch",
            id="never-gfx1250",
        ),
    ],
)
def test_greedy(platform, env: dict[str, str], impl: str) -> None:  # type: ignore[no-untyped-def]
    """aiter greedy only on AMD with SGLANG_USE_AITER and without the inverted kill switch."""
    assert resolve_on(platform, **env).decision("sampler.greedy").impl == impl


def test_greedy_records_the_out_of_range_bug() -> None:
    """The known out-of-range bug is attached to the chosen aiter kernel, with its guard."""
    decision = resolve_on("mi300x", SGLANG_USE_AITER="1").decision("sampler.greedy")
    aiter = decision.candidates[0]
    assert aiter.guards == ("clamp_token_ids",)
    assert any("token id == vocab_size" in line for line in decision.reasons)


@pytest.mark.parametrize(
    ("platform", "vocab_size", "impl"),
    [
        pytest.param("mi355x", 8192, "torch", id="gfx950-small-vocab"),
        pytest.param("mi355x", 16384, "aiter", id="gfx950-16k"),
        pytest.param("mi355x", 151936, "aiter", id="gfx950-qwen-vocab"),
        pytest.param("mi300x", 8192, "aiter", id="gfx942-small-vocab-ok"),
    ],
)
def test_greedy_per_call_vocab_rule(platform: str, vocab_size: int, impl: str) -> None:
    """Never for vocabularies under 16384 on gfx950, decided per call."""
    resolution = resolve_on(platform, SGLANG_USE_AITER="1")
    assert resolution.select("sampler.greedy", vocab_size=vocab_size) == impl


def test_mhc_stays_on_torch_with_its_workaround() -> None:
    """mhc: torch while the aiter workaround stands; explain shows it and its reference."""
    decision = resolve_on("mi355x", VLLM_ROCM_USE_AITER="1").decision("mhc")
    assert decision.impl == "torch"
    failure = decision.candidates[0].failures[0]
    assert failure.kind is CheckKind.WORKAROUND
    assert "b639cb6" in failure.message
    assert failure.reference is not None
    assert "b639cb63bcac" in failure.reference
    assert decision.warnings == ()  # a policy decision, not something the operator can fix


@pytest.mark.parametrize(
    ("platform", "env", "impl", "reason"),
    [
        pytest.param(
            "mi300x", {"VLLM_ROCM_USE_AITER": "1"}, "aiter", Reason.PREFERRED, id="amd-aiter-on"
        ),
        pytest.param("h100-sxm", {}, None, Reason.NOT_APPLICABLE, id="nvidia-not-applicable"),
        pytest.param("cpu", {}, None, Reason.NOT_APPLICABLE, id="cpu-not-applicable"),
    ],
)
def test_sparse_attn_indexer(
    platform: str, env: dict[str, str], impl: str | None, reason: Reason
) -> None:
    """The indexer is required on AMD only."""
    decision = resolve_on(platform, **env).decision("sparse_attn_indexer")
    assert (decision.impl, decision.reason, decision.error) == (impl, reason, None)


def test_sparse_attn_indexer_required_on_amd() -> None:
    """Without VLLM_ROCM_USE_AITER on AMD: an error whose hint says to set it."""
    decision = resolve_on("mi300x").decision("sparse_attn_indexer")
    assert decision.error_code is ErrorCode.NO_IMPLEMENTATION
    assert decision.hints[0].startswith("set VLLM_ROCM_USE_AITER=1")


@pytest.mark.parametrize("platform", ["h100-sxm", "mi300x", "cpu", "t4"])
def test_topk_per_row_is_torch(platform: str) -> None:
    """topk_per_row: torch everywhere."""
    assert resolve_on(platform, VLLM_ROCM_USE_AITER="1").decision("topk_per_row").impl == "torch"


@pytest.mark.parametrize(
    ("platform", "env", "impl"),
    [
        pytest.param("mi300x", {"VLLM_ROCM_USE_AITER": "1"}, "aiter", id="mi300x-on"),
        pytest.param("mi355x", {"VLLM_ROCM_USE_AITER": "1"}, "aiter", id="mi355x-on"),
        pytest.param("mi300x", {}, "torch", id="off-by-default"),
        pytest.param("mi250x", {"VLLM_ROCM_USE_AITER": "1"}, "torch", id="cdna2"),
        pytest.param("h100-sxm", {"VLLM_ROCM_USE_AITER": "1"}, "torch", id="nvidia"),
    ],
)
def test_allreduce_rmsnorm(platform: str, env: dict[str, str], impl: str) -> None:
    """aiter fused all-reduce + RMSNorm on CDNA3+ with VLLM_ROCM_USE_AITER on."""
    assert resolve_on(platform, **env).decision("allreduce_rmsnorm").impl == impl


GATE = "allreduce_rmsnorm.one_stage"
BASE = {
    "dtype": "bfloat16",
    "hidden_dim": 4096,
    "tokens": 16,
    "world_size": 8,
    "total_bytes": 65536,
    "fully_connected": True,
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({}, True, id="decode-bf16-4096"),
        pytest.param({"hidden_dim": 2880}, True, id="gpt-oss-2880-not-in-old-whitelist"),
        pytest.param({"hidden_dim": 8192}, True, id="1024-packs"),
        pytest.param({"hidden_dim": 8200}, False, id="1025-packs"),
        pytest.param({"hidden_dim": 2884}, False, id="not-a-multiple-of-8"),
        pytest.param({"dtype": "float16"}, True, id="fp16"),
        pytest.param({"dtype": "float32"}, False, id="fp32-never"),
        pytest.param({"tokens": 80}, True, id="80-tokens"),
        pytest.param({"tokens": 81}, False, id="81-tokens"),
        pytest.param(
            {"world_size": 2, "fully_connected": False, "total_bytes": 10**7}, True, id="tp2-always"
        ),
        pytest.param({"world_size": 4, "fully_connected": False}, False, id="not-fully-connected"),
        pytest.param({"world_size": 4, "total_bytes": 262143}, True, id="tp4-under-256k"),
        pytest.param({"world_size": 4, "total_bytes": 262144}, False, id="tp4-256k"),
        pytest.param({"world_size": 8, "total_bytes": 131071}, True, id="tp8-under-128k"),
        pytest.param({"world_size": 8, "total_bytes": 131072}, False, id="tp8-128k"),
        pytest.param({"world_size": 16, "total_bytes": 1024}, False, id="tp16-never"),
    ],
)
def test_one_stage_gate(changes: dict[str, object], expected: bool) -> None:
    """The kernel's real rule: 16-byte packs, <= 1024 packs, <= 80 tokens, size by world size."""
    resolution = resolve_on("mi355x", VLLM_ROCM_USE_AITER="1")
    assert resolution.gate(GATE, **{**BASE, **changes}) is expected


def test_one_stage_gate_is_false_without_aiter() -> None:
    """Where allreduce_rmsnorm did not resolve to aiter, the gate is always False."""
    assert resolve_on("h100-sxm").gate(GATE, **BASE) is False
    assert resolve_on("mi355x").gate(GATE, **BASE) is False
