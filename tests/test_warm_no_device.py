"""``kernelpolicy warm`` without a device has nothing to build and makes no kernel cache (as
``serve --warm``), so a user who cannot make one (``nobody``, whose ``HOME`` is
``/nonexistent``) gets the exit 0 its help promises; a cache that cannot be made says which
setting puts it elsewhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelpolicy import warming
from kernelpolicy.cli import main
from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.trust import private_dir
from tests.helpers import FIXTURES

H100 = str(FIXTURES / "h100-sxm.json")
NOTHING = "no device cuda:0 here: nothing to build"


@pytest.fixture
def unmakeable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory under a regular file: nobody, root included, can make it."""
    (tmp_path / "file").write_text("x")
    cache = tmp_path / "file" / "cache"
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(cache))
    return cache


@pytest.mark.parametrize("argv", [pytest.param([], id="text"), pytest.param(["--json"], id="json")])
def test_no_device_builds_nothing_and_makes_no_cache(
    argv: list[str], unmakeable: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Without a device warm exits 0 saying there is nothing to build, and the cache it would
    use is named but not made (it used to be made first: exit 2 where it could not be)."""
    monkeypatch.setattr(warming, "has_device", lambda device: False)
    code = main(["warm", "--platform", H100, *argv])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    root = unmakeable / "kernels"
    if argv:
        report = json.loads(out)
        assert (report["cache"], report["note"]) == (str(root), NOTHING)
        assert report["tasks"] > 0
    else:
        assert out.splitlines() == [f"kernel cache: {root}", NOTHING]
    assert not os.path.lexists(unmakeable)


def test_a_cache_that_cannot_be_made_names_the_setting(
    unmakeable: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a device, a cache that cannot be made is exit 2 before anything builds, and the
    error says to set KERNELPOLICY_CACHE_DIR to a directory this user owns or can create."""
    monkeypatch.setattr(warming, "has_device", lambda device: True)
    monkeypatch.setattr(warming, "build_in_process", lambda *a: pytest.fail("built"))
    assert main(["warm", "--platform", H100]) == 2
    assert capsys.readouterr().err == (
        f"kernelpolicy: error: cannot prepare kernel cache {unmakeable / 'kernels'}: Not a "
        f"directory; set KERNELPOLICY_CACHE_DIR to a directory that uid {os.geteuid()} owns "
        "or can create\n"
    )


@pytest.mark.parametrize(
    ("what", "setting"),
    [
        pytest.param("kernel cache", "KERNELPOLICY_CACHE_DIR to a directory", id="kernel-cache"),
        pytest.param("evidence store", "KERNELPOLICY_CACHE_DIR to a directory", id="evidence"),
        pytest.param("settings memo", "KERNELPOLICY_CACHE_DIR to a directory", id="memo"),
        pytest.param(
            "socket directory", "KERNELPOLICY_SOCKET to a socket in a directory", id="socket"
        ),
    ],
)
def test_private_dir_says_what_puts_it_elsewhere(tmp_path: Path, what: str, setting: str) -> None:
    """A directory private_dir cannot make is named with why and the setting that moves it."""
    (tmp_path / "file").write_text("x")
    place = tmp_path / "file" / "under" / "d"
    with pytest.raises(UntrustedFileError) as error:
        private_dir(place, what)
    assert str(error.value) == (
        f"cannot prepare {what} {place}: Not a directory; set {setting} that uid "
        f"{os.geteuid()} owns or can create"
    )
