"""The one boolean parser and the settings object."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy import SettingsError
from kernelpolicy.limits import MAX_NESTING_DEPTH, MAX_SETTING_CHARS, SHOWN_ENV_VALUE_CHARS
from kernelpolicy.settings import (
    FIELDS,
    VARIABLES,
    Settings,
    bundled_policy_dir,
    load_settings,
    parse_bool,
    settings_from,
)


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
            "KERNELPOLICY_LOG_FORMAT='xml': expected one of console, json, off",
            id="log-format",
        ),
        pytest.param(
            {"KERNELPOLICY_OVERRIDES": "sampler=torch"},
            "KERNELPOLICY_OVERRIDES='sampler=torch': expected a JSON object",
            id="overrides-not-json",
        ),
        pytest.param(
            {"KERNELPOLICY_OVERRIDES": '["torch"]'},
            "KERNELPOLICY_OVERRIDES: expected a JSON object of feature -> implementation name",
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


def _deep_list(depth: int) -> str:
    return "[" * (depth - 1) + '["a.toml"]' + "]" * (depth - 1)


def _deep_object(depth: int) -> str:
    return '{"x": ' * (depth - 1) + '{"a": "b"}' + "}" * (depth - 1)


HOSTILE = [
    pytest.param(
        "KERNELPOLICY_OVERRIDES",
        "[" * 1000,
        r"KERNELPOLICY_OVERRIDES.*over MAX_NESTING_DEPTH",
        id="overrides-1000-deep",
    ),
    pytest.param(
        "KERNELPOLICY_OVERRIDES",
        _deep_object(MAX_NESTING_DEPTH + 1),
        rf"nested more than {MAX_NESTING_DEPTH} levels deep, over MAX_NESTING_DEPTH",
        id="overrides-depth-limit-plus-one",
    ),
    pytest.param(
        "KERNELPOLICY_POLICY_PATHS",
        "[" * 1000,
        r"KERNELPOLICY_POLICY_PATHS.*over MAX_NESTING_DEPTH",
        id="paths-1000-deep",
    ),
    pytest.param(
        "KERNELPOLICY_POLICY_PATHS",
        _deep_list(MAX_NESTING_DEPTH + 1),
        r"KERNELPOLICY_POLICY_PATHS.*over MAX_NESTING_DEPTH",
        id="paths-depth-limit-plus-one",
    ),
    pytest.param(
        "KERNELPOLICY_POLICY_PATHS",
        '[1, {"a": 2}]',
        r"KERNELPOLICY_POLICY_PATHS: expected a JSON list",
        id="paths-wrong-types",
    ),
    pytest.param(
        "KERNELPOLICY_POLICY_PATHS",
        '["a.toml"',
        r"KERNELPOLICY_POLICY_PATHS:1:10: not JSON",
        id="paths-bad-json",
    ),
    pytest.param(
        "KERNELPOLICY_OVERRIDES",
        '{"sampler.greedy": ["torch"]}',
        r"KERNELPOLICY_OVERRIDES: expected a JSON object of feature",
        id="overrides-value-list",
    ),
    pytest.param(
        "KERNELPOLICY_OVERRIDES",
        '{"a": NaN}',
        r"KERNELPOLICY_OVERRIDES=.*NaN is not a JSON number",
        id="overrides-nan",
    ),
    pytest.param(
        "KERNELPOLICY_OVERRIDES",
        '{"a": ' + "1" * 4301 + "}",
        r"KERNELPOLICY_OVERRIDES=.*4301 digits",
        id="overrides-4301-digits",
    ),
    *[
        pytest.param(
            f"KERNELPOLICY_{field}",
            "x" * (MAX_SETTING_CHARS + 1),
            rf"KERNELPOLICY_{field}: {MAX_SETTING_CHARS + 1} characters is over MAX_SETTING_CHARS",
            id=f"{field.lower()}-limit-plus-one",
        )
        for field in (
            "OVERRIDES",
            "POLICY_PATHS",
            "LOG_FORMAT",
            "CACHE_DIR",
            "TLS_KEY_FILE",
            "ALLOW_UNTRUSTED_FILES",
        )
    ],
    pytest.param(
        "KERNELPOLICY_ALLOW_UNTRUSTED_FILES",
        "maybe" * 1000,
        r"KERNELPOLICY_ALLOW_UNTRUSTED_FILES='(maybe){12}mayb\.\.\.\(cut, 5000 chars\)' "
        "is not a boolean",
        id="boolean-value-cut",
    ),
]


@pytest.mark.parametrize(("name", "value", "message"), HOSTILE)
def test_hostile_settings_from_mapping(name: str, value: str, message: str) -> None:
    """settings_from(env): every bad value is one SettingsError naming the variable."""
    with pytest.raises(SettingsError, match=message) as info:
        settings_from({name: value})
    assert len(str(info.value)) < 1000


@pytest.mark.parametrize(("name", "value", "message"), HOSTILE)
def test_hostile_settings_from_environment(
    name: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings() and load_settings() read the process environment with the same readers."""
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=message):
        Settings()
    with pytest.raises(SettingsError, match=message):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param(
            "KERNELPOLICY_OVERRIDES", _deep_object(MAX_NESTING_DEPTH), id="overrides-depth-at-limit"
        ),
        pytest.param("KERNELPOLICY_POLICY_PATHS", _deep_list(1), id="paths-flat"),
        pytest.param(
            "KERNELPOLICY_CACHE_DIR", "/" + "d" * (MAX_SETTING_CHARS - 1), id="cache-dir-at-limit"
        ),
    ],
)
def test_settings_at_the_limit(name: str, value: str) -> None:
    """Values at each limit are read (a deep overrides object is read, then refused as the
    wrong shape, not as too deep)."""
    if name == "KERNELPOLICY_OVERRIDES":
        with pytest.raises(SettingsError, match=r"expected a JSON object of feature"):
            settings_from({name: value})
        return
    settings_from({name: value})


def test_path_with_nul_is_refused() -> None:
    """A NUL character (possible in a mapping, never in a real environment) is refused."""
    with pytest.raises(SettingsError, match=r"KERNELPOLICY_CACHE_DIR: a path with a NUL"):
        settings_from({"KERNELPOLICY_CACHE_DIR": "/tmp/a\0b"})


def test_boolean_errors_cut_the_value() -> None:
    """parse_bool's error shows at most SHOWN_ENV_VALUE_CHARS of the value, marked as cut."""
    secret = "s3cr3t" * 100_000
    with pytest.raises(SettingsError) as info:
        parse_bool("VLLM_USE_FLASHINFER_SAMPLER", secret)
    text = str(info.value)
    assert f"...(cut, {len(secret)} chars)" in text
    assert len(text) < 2 * SHOWN_ENV_VALUE_CHARS + 200


def test_model_is_built_from_the_one_declaration() -> None:
    """The pydantic-settings model is built from Settings' fields, in order, with Settings'
    types and defaults (the defaults a process without variables takes without the model)."""
    from kernelpolicy.settings.model import SettingsBase, model_of

    model = model_of(Settings)
    assert issubclass(model, SettingsBase)
    assert model_of(Settings) is model  # built once
    assert tuple(model.model_fields) == FIELDS
    defaults = Settings.of()
    for name, info in model.model_fields.items():
        assert info.get_default(call_default_factory=True) == getattr(defaults, name), name
    assert str(model.model_fields["log_format"].annotation) == (
        "typing.Literal['console', 'json', 'off']"
    )
    assert model.model_config.get("env_prefix") == "KERNELPOLICY_"


@pytest.mark.parametrize(
    ("env", "imported"),
    [
        pytest.param({}, False, id="no-variables"),
        pytest.param({"KERNELPOLICY_FORCE_SAMPLER_GREEDY": "torch"}, False, id="force-only"),
        pytest.param({"kernelpolicy_log_format": "json"}, False, id="lower-case-is-no-setting"),
        pytest.param({"KERNELPOLICY_LOG_FORMAT": "console"}, True, id="a-setting"),
    ],
)
def test_pydantic_only_where_a_setting_is_given(
    env: dict[str, str], imported: bool, tmp_path: Path
) -> None:
    """Settings() in a process whose environment sets no setting takes the defaults without
    importing pydantic or pydantic-settings; a setting is read by the model (a fresh cache
    directory: no memo of an earlier process's validation)."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    base["XDG_CACHE_HOME"] = str(tmp_path)
    code = (
        "import sys; from kernelpolicy.settings import Settings; s = Settings(); "
        "print(s.log_format, 'pydantic' in sys.modules, 'pydantic_settings' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, check=True, capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip
    assert out == ["console", str(imported), str(imported)]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"colour": "red"},
            "unknown setting 'colour'; expected one of policy_paths, overrides, log_format",
            id="unknown-keyword",
        ),
        pytest.param(
            {"pack_cache": 1}, "setting pack_cache: unexpected int value", id="int-for-boolean"
        ),
        pytest.param({"socket": 3}, "setting socket: unexpected int value", id="int-for-socket"),
        pytest.param(
            {"log_format": "xml"},
            "KERNELPOLICY_LOG_FORMAT='xml': expected one of console, json, off",
            id="string-read-as-the-variable",
        ),
        pytest.param(
            {"report": "maybe"},
            "KERNELPOLICY_REPORT='maybe' is not a boolean",
            id="string-boolean",
        ),
        pytest.param(
            {"cache_dir": "/tmp/a\0b"}, "KERNELPOLICY_CACHE_DIR: a path with a NUL", id="nul-path"
        ),
    ],
)
def test_keyword_values_are_validated_by_the_model(values: dict[str, object], message: str) -> None:
    """Settings.of(**values): the model's validation errors are one SettingsError line."""
    with pytest.raises(SettingsError) as info:
        Settings.of(**values)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({"policy_paths": Path("/a")}, {"policy_paths": (Path("/a"),)}, id="one-path"),
        pytest.param(
            {"policy_paths": ["/a", Path("/b")]},
            {"policy_paths": (Path("/a"), Path("/b"))},
            id="path-list",
        ),
        pytest.param(
            {"overrides": {"sampler.greedy": "torch"}},
            {"overrides": {"sampler.greedy": "torch"}},
            id="overrides-mapping",
        ),
        pytest.param({"pack_cache": "off"}, {"pack_cache": False}, id="boolean-string"),
        pytest.param({"socket": "/run/kp.sock"}, {"socket": "unix:/run/kp.sock"}, id="socket"),
    ],
)
def test_keyword_values(values: dict[str, object], expected: dict[str, object]) -> None:
    """Keyword values as the model reads them; the fields not given keep their defaults."""
    settings = Settings.of(**values)
    for name in FIELDS:
        want = expected.get(name, getattr(Settings.of(), name))
        assert getattr(settings, name) == want, name


def test_keywords_take_precedence_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings(**values) reads the process environment, and a keyword wins over a variable."""
    monkeypatch.setenv("KERNELPOLICY_LOG_FORMAT", "json")
    monkeypatch.setenv("KERNELPOLICY_REPORT", "0")
    settings = Settings(log_format="off")
    assert (settings.log_format, settings.report) == ("off", False)
