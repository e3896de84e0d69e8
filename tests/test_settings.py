"""The one boolean parser and the settings object."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy import SettingsError
from kernelpolicy.settings import bundled_policy_dir, parse_bool, settings_from


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[
            pytest.param(v, True, id=f"true-{v}")
            for v in ("1", "true", "TRUE", "Yes", "on", " On ")
        ],
        *[pytest.param(v, False, id=f"false-{v}") for v in ("0", "false", "False", "no", "OFF")],
    ],
)
def test_booleans(value: str, expected: bool) -> None:
    """1/0/true/false/yes/no/on/off in any case, surrounding spaces ignored."""
    assert parse_bool("X", value) is expected


@pytest.mark.parametrize(
    "value", [pytest.param(v, id=v or "empty") for v in ("2", "y", "enable", "", "truee", "-1")]
)
def test_non_booleans_name_variable_and_accepted_values(value: str) -> None:
    """Anything else is an error naming the variable and the accepted values."""
    with pytest.raises(
        SettingsError, match=r"VLLM_USE_FLASHINFER_SAMPLER=.* 1/0, true/false, yes/no, on/off"
    ):
        parse_bool("VLLM_USE_FLASHINFER_SAMPLER", value)


def test_settings_defaults() -> None:
    """No KERNELPOLICY_* variables: the bundled pack, no overrides, console logs."""
    settings = settings_from({})
    assert settings.policy_paths == (bundled_policy_dir(),)
    assert settings.overrides == {}
    assert settings.log_format == "console"


def test_settings_from_mapping_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """settings_from reads the mapping given, never os.environ."""
    monkeypatch.setenv("KERNELPOLICY_LOG_FORMAT", "json")
    assert settings_from({}).log_format == "console"
    parsed = settings_from(
        {
            "KERNELPOLICY_POLICY_PATHS": "/etc/kp/base:/etc/kp/override.toml",
            "KERNELPOLICY_OVERRIDES": '{"sampler.greedy": "torch"}',
            "KERNELPOLICY_LOG_FORMAT": "off",
        }
    )
    assert parsed.policy_paths == (Path("/etc/kp/base"), Path("/etc/kp/override.toml"))
    assert parsed.overrides == {"sampler.greedy": "torch"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"KERNELPOLICY_LOG_FORMAT": "xml"},
            "KERNELPOLICY_LOG_FORMAT: Input should be 'console', 'json' or 'off'",
            id="log-format",
        ),
        pytest.param(
            {"KERNELPOLICY_OVERRIDES": "sampler=torch"},
            "KERNELPOLICY_OVERRIDES='sampler=torch': expected a JSON object",
            id="overrides-not-json",
        ),
        pytest.param(
            {"KERNELPOLICY_OVERRIDES": '["torch"]'},
            "KERNELPOLICY_OVERRIDES: Input should be a valid dictionary",
            id="overrides-not-object",
        ),
    ],
)
def test_bad_settings(env: dict[str, str], message: str) -> None:
    """A bad setting is one SettingsError naming the variable."""
    with pytest.raises(
        SettingsError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        settings_from(env)
