"""What the vLLM plugin reads from its environment: the switch, by the settings' one boolean
parser, and the inputs ``exec`` wrote, by ``bridge.plugin.read_plugin_inputs`` (bounded,
checked, a SettingsError naming what was wrong); either mistake is said in the plugin's warning
and vLLM keeps its own kernels."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from kernelpolicy.bridge.plugin import (
    ENABLE,
    INPUTS,
    PluginInputs,
    plugin_environment,
    read_plugin_inputs,
)
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import MAX_INPUTS_BYTES, MAX_NESTING_DEPTH
from kernelpolicy.vllm_plugin import LOGGER, register

NOT_INSTALLED = "kernelpolicy: plugin not installed, vLLM keeps its own kernels: "


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("[1]", f"{INPUTS}: a JSON array; expected the JSON object", id="a-list"),
        pytest.param('"x"', f"{INPUTS}: a JSON string;", id="a-string"),
        pytest.param("{not json", f"{INPUTS}:1:2: not JSON", id="not-json"),
        pytest.param('{"env": NaN}', f"{INPUTS}: not acceptable JSON", id="nan"),
        pytest.param('{"env": [1]}', f"{INPUTS}: env is a JSON array, not an object",
                     id="env-list"),
        pytest.param('{"env": {"A": 1}}', f"{INPUTS}: env['A'] is a JSON number, not a string",
                     id="env-value-number"),
        pytest.param('{"fingerprint": 3}', f"{INPUTS}: fingerprint is a JSON number, not a string",
                     id="fingerprint-number"),
        pytest.param('{"platform": "h100"}', f"{INPUTS}: platform is a JSON string, not an object",
                     id="platform-string"),
        pytest.param('{"policies": "a.toml"}',
                     f"{INPUTS}: policies is a JSON string, not an array", id="policies-string"),
        pytest.param('{"policies": ["a.toml", true]}',
                     f"{INPUTS}: policies[1] is a JSON boolean, not a string", id="policies-item"),
        pytest.param('{"env": {}, "extra": 1}', f"{INPUTS}: unknown key 'extra'", id="unknown-key"),
        pytest.param("[" * (MAX_NESTING_DEPTH + 2) + "]" * (MAX_NESTING_DEPTH + 2),
                     "over MAX_NESTING_DEPTH", id="too-deep"),
        pytest.param(" " * (MAX_INPUTS_BYTES + 1) + "{}", "over MAX_INPUTS_BYTES", id="too-long"),
    ],
)  # fmt: skip
def test_bad_inputs_are_one_settings_error(text: str, message: str) -> None:
    """Each mistake is a SettingsError naming the variable, what was wrong and what was
    expected (a list used to end in "'list' object has no attribute 'get'")."""
    with pytest.raises(SettingsError) as caught:
        read_plugin_inputs(text)
    assert message in str(caught.value)
    assert "expected the JSON object kernelpolicy exec writes" in str(caught.value)


@pytest.mark.parametrize(
    ("env", "platform", "policies"),
    [
        pytest.param({"VLLM_ROCM_USE_AITER": "1"}, {"vendor": "amd"}, None, id="snapshot"),
        pytest.param({}, None, ("/etc/kp/a.toml", "/etc/kp/d"), id="policies"),
        pytest.param({"HOME": "/h", **{f"JUNK_{i}": "x" * 1000 for i in range(400)}}, None, None,
                     id="an-environment-cut-to-fit"),
    ],
)  # fmt: skip
def test_what_exec_writes_is_read_back(
    env: dict[str, str], platform: dict[str, str] | None, policies: tuple[str, ...] | None
) -> None:
    """The reader takes back what the writer wrote, whatever it kept of the environment."""
    paths = [Path(p) for p in policies] if policies else None
    written = plugin_environment("vllm", env, "f00", platform, paths)
    inputs = read_plugin_inputs(written[INPUTS])
    assert inputs == PluginInputs(
        env=json.loads(written[INPUTS])["env"], fingerprint="f00", platform=platform,
        policies=policies,
    )  # fmt: skip


@pytest.mark.parametrize("text", [pytest.param("", id="unset"), pytest.param("  ", id="blank")])
def test_no_inputs_is_nothing_given(text: str) -> None:
    """Without inputs each process resolves with its own environment and probe."""
    assert read_plugin_inputs(text) == PluginInputs()


@pytest.mark.parametrize(
    ("switch", "inputs", "warning"),
    [
        pytest.param("", "[1]", None, id="unset-is-off"),
        pytest.param("0", "[1]", None, id="0-is-off"),
        pytest.param("Off", "[1]", None, id="off-any-case"),
        pytest.param("tru", "", f"{ENABLE}='tru' is not a boolean: expected 1/0, true/false",
                     id="a-misspelt-switch-is-said"),
        pytest.param("1", "[1]", f"{INPUTS}: a JSON array; expected the JSON object",
                     id="inputs-of-the-wrong-shape"),
        pytest.param("yes", '{"env": {"A": 1}}', f"{INPUTS}: env['A'] is a JSON number",
                     id="an-env-value-of-the-wrong-type"),
    ],
)  # fmt: skip
def test_the_plugin_says_what_was_wrong_and_returns(
    switch: str, inputs: str, warning: str | None, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Off is silent; a switch the boolean parser refuses, or inputs it cannot read, is one
    warning naming the mistake, and register() returns (vLLM is not installed here: the
    mistake is found before anything would import it)."""
    monkeypatch.setenv(ENABLE, switch)
    monkeypatch.setenv(INPUTS, inputs)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        register()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1
        assert warnings[0].startswith(NOT_INSTALLED)
        assert warning in warnings[0]


def test_the_call_counts_never_write_through_a_planted_link(tmp_path: Path) -> None:
    """The stats directory may be shared (KERNELPOLICY_VLLM_PLUGIN_STATS): a link planted at
    the process's file is replaced, never written through (before: the victim was overwritten)."""
    import kernelpolicy.vllm_plugin as plugin

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    stats = tmp_path / "stats"
    stats.mkdir()
    (stats / f"{os.getpid()}.json").symlink_to(victim)
    counts = plugin._Counts(str(stats))
    counts.add("sampler.top_k_top_p/torch")
    assert victim.read_text() == "keep me"
    written = stats / f"{os.getpid()}.json"
    assert not written.is_symlink()
    assert json.loads(written.read_text()) == {"sampler.top_k_top_p/torch": 1}
