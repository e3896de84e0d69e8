"""The default cache directory (``kernelpolicy.cache_dir``): never relative to wherever a
command runs, never a home directory created (found by a first-day review: ``HOME=``
created ``./.cache``, ``HOME=/nonexistent`` created ``/nonexistent/.cache/kernelpolicy``)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from kernelpolicy.cache_dir import default_cache_dir

OWN_HOME = pwd.getpwuid(os.geteuid()).pw_dir


@pytest.mark.parametrize(
    ("home", "xdg", "expected"),
    [
        pytest.param("{tmp}", None, "{tmp}/.cache/kernelpolicy", id="home"),
        pytest.param("{tmp}", "{tmp}/xdg", "{tmp}/xdg/kernelpolicy", id="xdg-cache-home"),
        pytest.param("{tmp}", "relative", "{tmp}/.cache/kernelpolicy", id="relative-xdg-ignored"),
        pytest.param("", None, f"{OWN_HOME}/.cache/kernelpolicy", id="empty-home"),
        pytest.param(None, None, f"{OWN_HOME}/.cache/kernelpolicy", id="no-home"),
        pytest.param("relative", None, f"{OWN_HOME}/.cache/kernelpolicy", id="relative-home"),
        pytest.param("{tmp}/nonexistent", None, f"{OWN_HOME}/.cache/kernelpolicy",
                     id="home-that-does-not-exist"),
    ],
)  # fmt: skip
def test_the_default_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: str | None, xdg: str | None,
    expected: str,
) -> None:  # fmt: skip
    for name, value in (("HOME", home), ("XDG_CACHE_HOME", xdg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value.format(tmp=tmp_path))
    assert default_cache_dir() == Path(expected.format(tmp=tmp_path))
    assert not (tmp_path / "nonexistent").exists()
