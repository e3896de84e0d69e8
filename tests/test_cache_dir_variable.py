"""``KERNELPOLICY_CACHE_DIR`` must be an absolute path, as the XDG base directory specification
says of ``XDG_CACHE_HOME``: a relative one (or an empty one, ``.``) was a different place in
each directory a command ran in, made there in silence (the first-day review found
``./relative/dir`` created by ``kernelpolicy explain``). Like every other ``KERNELPOLICY_*``
variable, a bad value is one line naming the variable and what was expected, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import SettingsError
from kernelpolicy.settings import Settings, settings_from

EXPECTED = "expected an absolute path to a directory, such as /var/cache/kernelpolicy"

BAD = [
    pytest.param("relative/dir", "'relative/dir': a relative path", id="relative"),
    pytest.param("./cache", "'./cache': a relative path", id="dot-relative"),
    pytest.param("~/cache", "'~/cache': a relative path", id="tilde-is-not-expanded"),
    pytest.param("", "'': an empty value", id="empty"),
    pytest.param("  ", "'  ': an empty value", id="blank"),
]


@pytest.mark.parametrize(("value", "said"), BAD)
def test_a_relative_cache_dir_is_refused_by_the_settings(value: str, said: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from({"KERNELPOLICY_CACHE_DIR": value})
    assert str(info.value) == f"KERNELPOLICY_CACHE_DIR={said}; {EXPECTED}"


@pytest.mark.parametrize(
    "value", [pytest.param("cache", id="string"), pytest.param(Path("cache"), id="path")]
)
def test_a_relative_keyword_is_refused_too(value: object) -> None:
    """``Settings.of(cache_dir=...)`` reads the value as the variable's."""
    with pytest.raises(SettingsError, match="a relative path; expected an absolute path"):
        Settings.of(cache_dir=value)


@pytest.mark.parametrize(("value", "said"), BAD)
def test_a_command_exits_2_and_makes_nothing(
    value: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kernelpolicy explain`` with a bad value: one error line, exit 2, nothing made where
    the command ran."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", value)
    assert main(["explain", "sampler.greedy"]) == 2
    err = capsys.readouterr().err
    assert err == f"kernelpolicy: error: KERNELPOLICY_CACHE_DIR={said}; {EXPECTED}\n"
    assert list(tmp_path.iterdir()) == []


def test_an_absolute_cache_dir_is_taken(tmp_path: Path) -> None:
    assert settings_from({"KERNELPOLICY_CACHE_DIR": str(tmp_path)}).cache_dir == tmp_path
