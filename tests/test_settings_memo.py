"""Validated settings kept between processes (kernelpolicy.settings.memo): a process with the
same KERNELPOLICY_* variables takes the values an earlier one validated, without pydantic; an
entry that may not be trusted, or does not fit, is ignored and the model validates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.settings import VARIABLES, settings_from
from tests.helpers import UNTRUSTED_ENTRIES

ENVIRONMENTS = {
    "log format": {"KERNELPOLICY_LOG_FORMAT": "json"},
    "policy paths, colon list": {"KERNELPOLICY_POLICY_PATHS": "+/etc/kp/policies.d:/opt/a.toml"},
    "policy paths, JSON list": {"KERNELPOLICY_POLICY_PATHS": '["/etc/kp/a.toml"]'},
    "overrides": {"KERNELPOLICY_OVERRIDES": '{"sampler.greedy": "torch"}'},
    "booleans": {"KERNELPOLICY_REPORT": "off", "KERNELPOLICY_HARDWARE_CACHE": "no"},
    "socket and TLS": {
        "KERNELPOLICY_SOCKET": "/run/kp.sock",
        "KERNELPOLICY_TLS_CERT_FILE": "/etc/kp/cert.pem",
        "KERNELPOLICY_TLS_KEY_FILE": "/etc/kp/key.pem",
    },
}


def _env(cache: Path, variables: dict[str, str]) -> dict[str, str]:
    return {"KERNELPOLICY_CACHE_DIR": str(cache), **variables}


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "settings").glob("*.json"))


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_a_recalled_entry_equals_the_models_values(name: str, tmp_path: Path) -> None:
    """The first read validates and stores; the second takes the entry, with the same values
    of the same types as the model gives."""
    env = _env(tmp_path, ENVIRONMENTS[name])
    first = settings_from(env)
    (entry,) = _entries(tmp_path)
    stored = json.loads(entry.read_bytes())["values"]
    assert sorted(stored) == sorted(VARIABLES[v] for v in env)
    second = settings_from(env)
    assert second == first
    for field in stored:
        assert type(getattr(second, field)) is type(getattr(first, field)), field
    assert entry.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "settings").stat().st_mode & 0o777 == 0o700


def test_a_process_with_the_same_variables_does_not_import_pydantic(tmp_path: Path) -> None:
    """The point of the memo: the second process's Settings() imports neither pydantic nor
    pydantic-settings, and reads the same values."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env = {**base, **_env(tmp_path, {"KERNELPOLICY_LOG_FORMAT": "off"})}
    code = (
        "import sys; from kernelpolicy.settings import Settings; s = Settings(); "
        "print(s.log_format, s.cache_dir, 'pydantic' in sys.modules)"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs == [["off", str(tmp_path), "True"], ["off", str(tmp_path), "False"]]


def _other_key(path: Path) -> None:
    entry = json.loads(path.read_bytes())
    path.write_text(json.dumps({**entry, "key": "0" * 32}))


def _wrong_form(path: Path) -> None:
    entry = json.loads(path.read_bytes())
    values = {**entry["values"], "allow_untrusted_files": "yes"}
    path.write_text(json.dumps({**entry, "values": values}))


def _more_fields(path: Path) -> None:
    entry = json.loads(path.read_bytes())
    values = {**entry["values"], "log_format": "off"}
    path.write_text(json.dumps({**entry, "values": values}))


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:20])


PLANTED: dict[str, Callable[[Path], None]] = {
    **UNTRUSTED_ENTRIES,
    "another key": _other_key,
    "a value of the wrong form": _wrong_form,
    "a field not given": _more_fields,
    "truncated": _truncated,
}


@pytest.mark.parametrize("name", PLANTED)
def test_an_entry_that_may_not_be_used_is_ignored(name: str, tmp_path: Path) -> None:
    """An entry that says allow_untrusted_files=1 where the variable says 0 is not believed
    unless it is ours, private, for this key and of the field's form: the model validates."""
    env = _env(tmp_path, {"KERNELPOLICY_ALLOW_UNTRUSTED_FILES": "0"})
    settings_from(env)
    (entry,) = _entries(tmp_path)
    data = json.loads(entry.read_bytes())
    values = {**data["values"], "allow_untrusted_files": True}
    entry.write_text(json.dumps({**data, "values": values}))
    assert settings_from(env).allow_untrusted_files is True  # ours and private: believed
    PLANTED[name](entry)
    settings = settings_from(env)
    assert settings.allow_untrusted_files is False
    assert settings.log_format == "console"


def test_another_value_is_another_entry_and_the_memo_can_be_off(tmp_path: Path) -> None:
    settings_from(_env(tmp_path, {"KERNELPOLICY_LOG_FORMAT": "json"}))
    assert settings_from(_env(tmp_path, {"KERNELPOLICY_LOG_FORMAT": "off"})).log_format == "off"
    assert len(_entries(tmp_path)) == 2
    off = tmp_path / "off"
    settings_from(_env(off, {"KERNELPOLICY_PACK_CACHE": "0", "KERNELPOLICY_LOG_FORMAT": "off"}))
    assert not (off / "settings").exists()


def test_a_relative_or_missing_cache_directory_gets_no_memo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KERNELPOLICY_CACHE_DIR=relative (or empty: the working directory) would put the memo
    wherever the process runs, and one that does not exist would be made by reading settings:
    nothing is written; a relative one is refused by the model, a missing one's values are
    the model's."""
    from kernelpolicy.errors import SettingsError

    monkeypatch.chdir(tmp_path)
    for relative in ("", "cache", "[", "0.0"):
        env = {"KERNELPOLICY_CACHE_DIR": relative, "KERNELPOLICY_LOG_FORMAT": "off"}
        with pytest.raises(SettingsError, match="expected an absolute path to a directory"):
            settings_from(env)
    missing = {"KERNELPOLICY_CACHE_DIR": str(tmp_path / "not" / "there")}
    assert settings_from({**missing, "KERNELPOLICY_LOG_FORMAT": "off"}).log_format == "off"
    assert list(tmp_path.iterdir()) == []


def test_an_invalid_variable_is_never_stored(tmp_path: Path) -> None:
    from kernelpolicy.errors import SettingsError

    env = _env(tmp_path, {"KERNELPOLICY_LOG_FORMAT": "xml"})
    for _ in range(2):
        with pytest.raises(SettingsError, match="expected one of console, json, off"):
            settings_from(env)
    assert _entries(tmp_path) == []
