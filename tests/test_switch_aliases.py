"""A switch's aliases: another engine's name for the same switch."""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.engine.switches import evaluate_switches
from kernelpolicy.policy.schema.conditions import Switch
from tests.helpers import resolve_on

AITER = Switch(
    env="VLLM_ROCM_USE_AITER", aliases=["SGLANG_USE_AITER"], unset="off", true="auto", false="off"
)


@pytest.mark.parametrize(
    ("env", "state", "source"),
    [
        pytest.param({}, "off", "VLLM_ROCM_USE_AITER and SGLANG_USE_AITER unset", id="neither"),
        pytest.param({"VLLM_ROCM_USE_AITER": "1"}, "auto", "VLLM_ROCM_USE_AITER=1", id="its-name"),
        pytest.param({"SGLANG_USE_AITER": "1"}, "auto", "SGLANG_USE_AITER=1", id="the-alias"),
        pytest.param({"VLLM_ROCM_USE_AITER": "0", "SGLANG_USE_AITER": "1"}, "off",
                     "VLLM_ROCM_USE_AITER=0", id="its-name-first"),
        pytest.param({"VLLM_ROCM_USE_AITER": "", "SGLANG_USE_AITER": "true"}, "auto",
                     "SGLANG_USE_AITER=true", id="a-blank-name-is-unset"),
    ],
)  # fmt: skip
def test_the_first_variable_set_is_read(env: dict[str, str], state: str, source: str) -> None:
    outcome = evaluate_switches([AITER], env)
    assert (outcome.state, outcome.source) == (state, source)


def test_sglangs_own_aiter_switch_is_honoured() -> None:
    """An SGLang operator who sets only SGLANG_USE_AITER=1 is told aiter attention (they were
    told --attention-backend triton, overriding their own switch): no --attention-backend,
    since aiter is SGLang's own MHA default on ROCm (a pin stops models whose lists lack it)."""
    env = {"SGLANG_USE_AITER": "1"}
    settings = engine_settings(resolve_on("mi300x", **env), "sglang", env, engine_version="0.5.23")
    assert "--attention-backend" not in settings.flags
    assert settings.decisions["attention.backend"].env == (("SGLANG_USE_AITER", "1"),)
    assert "--moe-runner-backend" not in settings.flags
    assert settings.decisions["attention.backend"].impl == "rocm_aiter_fa"
