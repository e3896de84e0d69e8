"""Engine rules beyond the bundled pack: forcing, switches, fingerprints, purity."""

from __future__ import annotations

import os

import pytest

from kernelpolicy.engine import ErrorCode, Reason, resolve_policies
from kernelpolicy.engine.switches import evaluate_switches, force_variable
from kernelpolicy.policy import load_policy_text
from kernelpolicy.policy.schema import Switch
from tests.helpers import bundled, fixture, resolve_on

TOPK = "sampler.top_k_top_p"


def test_force_variable_name() -> None:
    """Feature names map to KERNELPOLICY_FORCE_<FEATURE> with dots as underscores."""
    assert force_variable("sampler.top_k_top_p") == "KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P"


@pytest.mark.parametrize(
    ("platform", "forced", "impl", "code"),
    [
        pytest.param("h100-sxm", "torch", "torch", None, id="force-fallback"),
        pytest.param("h100-sxm", "flashinfer", "flashinfer", None, id="force-preferred"),
        pytest.param(
            "h100-sxm", "aiter", None, ErrorCode.REQUIRED_UNSUPPORTED, id="force-unsupported"
        ),
        pytest.param(
            "h100-sxm", "cutlass", None, ErrorCode.UNKNOWN_IMPLEMENTATION, id="force-unknown"
        ),
    ],
)
def test_force(platform: str, forced: str, impl: str | None, code: ErrorCode | None) -> None:
    """KERNELPOLICY_FORCE_<FEATURE> picks an implementation or explains why it cannot."""
    decision = resolve_on(platform, KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P=forced).decision(TOPK)
    assert (decision.impl, decision.error_code) == (impl, code)
    if impl:
        assert decision.reason is Reason.FORCED


def test_force_unknown_lists_the_choices() -> None:
    """An unknown forced implementation names the variable and the valid names."""
    decision = resolve_on("h100-sxm", KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P="cutlass").decision(
        TOPK
    )
    assert decision.error == (
        "KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P='cutlass' is not an implementation of "
        "sampler.top_k_top_p; expected one of flashinfer, aiter, triton, torch"
    )


def test_force_beats_switch_off_and_settings_overrides() -> None:
    """A force wins over a switch set to off; env forces win over settings overrides."""
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0", force_variable(TOPK): "flashinfer"}
    resolution = resolve_policies(fixture("h100-sxm"), env, bundled(), {TOPK: "torch"})
    assert resolution.decision(TOPK).impl == "flashinfer"
    resolution = resolve_policies(fixture("h100-sxm"), {}, bundled(), {TOPK: "torch"})
    assert resolution.decision(TOPK).reason is Reason.FORCED


def test_forced_kernel_keeps_per_call_fallback() -> None:
    """Forcing flashinfer still sends seeded requests on (flashinfer cannot take them): to the
    next candidate that can, the Triton sampler."""
    resolution = resolve_on("h100-sxm", KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P="flashinfer")
    ctx = {"has_top_k": True, "has_top_p": True, "logprobs_mode": "raw_logprobs"}
    assert resolution.select(TOPK, has_generators=True, **ctx) == "triton"


@pytest.mark.parametrize(
    ("switches", "env", "state"),
    [
        pytest.param([Switch(env="A")], {}, "auto", id="unset-auto"),
        pytest.param([Switch(env="A")], {"A": "1"}, "on", id="true-on"),
        pytest.param([Switch(env="A")], {"A": "off"}, "off", id="false-off"),
        pytest.param([Switch(env="A", unset="off", true="auto")], {}, "off", id="default-off"),
        pytest.param(
            [
                Switch(env="A", unset="off", true="auto"),
                Switch(env="B", unset="ignore", true="off", false="ignore"),
            ],
            {"A": "1"},
            "auto",
            id="inverted-unset",
        ),
        pytest.param(
            [
                Switch(env="A", unset="off", true="auto"),
                Switch(env="B", unset="ignore", true="off", false="ignore"),
            ],
            {"A": "1", "B": "1"},
            "off",
            id="inverted-set",
        ),
        pytest.param(
            [Switch(env="B", unset="ignore", true="off", false="ignore")],
            {"B": "0"},
            "auto",
            id="all-ignore-is-auto",
        ),
    ],
)
def test_switch_combination(switches: list[Switch], env: dict[str, str], state: str) -> None:
    """off beats auto, on beats auto, all-ignore is auto."""
    assert evaluate_switches(switches, env).state == state


CONFLICT = """
schema = "kernelpolicy.policy/v1"
[features.demo]
description = "d"
fallback = "torch"
[[features.demo.candidates]]
impl = "fast"
entry = "math:sqrt"
switches = [
  { env = "USE_FAST" },
  { env = "NO_FAST", unset = "ignore", true = "off", false = "ignore" },
]
[[features.demo.candidates]]
impl = "torch"
entry = "math:floor"
"""


def test_switch_conflict_is_an_error() -> None:
    """One switch saying on and another off is an error naming both."""
    policies = load_policy_text(CONFLICT)
    decision = resolve_policies(
        fixture("cpu"), {"USE_FAST": "1", "NO_FAST": "1"}, policies
    ).decision("demo")
    assert decision.error_code is ErrorCode.SWITCH_CONFLICT
    assert "USE_FAST=1 and NO_FAST=1" in (decision.error or "")


def test_same_inputs_same_fingerprint() -> None:
    """Resolution is deterministic: same inputs, same decisions and fingerprint."""
    first = resolve_on("mi300x", VLLM_ROCM_USE_AITER="1")
    second = resolve_on("mi300x", VLLM_ROCM_USE_AITER="1")
    assert first.fingerprint == second.fingerprint
    assert first.to_dict() == second.to_dict()


def test_ranks_of_one_node_share_a_fingerprint() -> None:
    """Different visible devices and irrelevant env do not change the fingerprint."""
    platform = fixture("h100-sxm")
    rank1 = platform.replace(
        **{"devices": platform.devices[1:2] + platform.devices[:1] + platform.devices[2:]}
    )
    a = resolve_policies(platform, {"CUDA_VISIBLE_DEVICES": "0", "HOME": "/a"}, bundled())
    b = resolve_policies(rank1, {"CUDA_VISIBLE_DEVICES": "1", "HOME": "/b"}, bundled())
    assert a.fingerprint == b.fingerprint


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"VLLM_USE_FLASHINFER_SAMPLER": "0"}, id="switch"),
        pytest.param({"KERNELPOLICY_FORCE_MHC": "torch"}, id="force"),
    ],
)
def test_relevant_env_changes_fingerprint(env: dict[str, str]) -> None:
    """A switch or force the policies read changes the fingerprint."""
    assert resolve_on("h100-sxm").fingerprint != resolve_on("h100-sxm", **env).fingerprint


def test_library_version_changes_fingerprint() -> None:
    """The version of a library a policy names changes the fingerprint."""
    platform = fixture("mi325x")
    newer = platform.replace(**{"libraries": {**platform.libraries, "amd-aiter": "0.1.14"}})
    assert resolve_on(platform).fingerprint != resolve_on(newer).fingerprint


def test_engine_reads_no_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """resolve_policies uses the env it is given, never os.environ."""
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")
    monkeypatch.setenv(force_variable(TOPK), "torch")
    assert "VLLM_USE_FLASHINFER_SAMPLER" in os.environ
    assert resolve_on("h100-sxm").decision(TOPK).impl == "flashinfer"
