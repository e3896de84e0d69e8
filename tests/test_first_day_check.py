"""A policy file or directory reached twice under two names is read once (first-day review,
finding 16): ``kernelpolicy check +policies`` in a source tree, where
``kernelpolicy/bundled_policies`` links to ``policies/``, reported every bundled feature as
defined twice (19 problems, exit 1); real paths are compared now, and check says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import check_cmd, main
from kernelpolicy.policy.files import list_policy_paths
from kernelpolicy.settings import bundled_policy_dir

PACK = bundled_policy_dir()
PACK_FILES = list_policy_paths([PACK]).files
AGAIN = "{pack}: the bundled pack ({bundled} leads there), given again; read once"


@pytest.fixture
def fill(tmp_path: Path) -> dict[str, Path]:
    """``pack``, a link to the bundled pack's directory, and ``bundled``, the pack's path."""
    (tmp_path / "pack").symlink_to(PACK.resolve(), target_is_directory=True)
    return {"pack": tmp_path / "pack", "bundled": PACK}


@pytest.mark.parametrize(
    ("paths", "first", "notes"),
    [
        pytest.param(["+{pack}"], "bundled", [AGAIN], id="plus-the-pack-itself"),
        pytest.param(["{bundled}", "{pack}"], "bundled", [AGAIN], id="pack-then-its-link"),
        pytest.param(["{pack}", "{bundled}"], "pack",
                     ["{bundled}: the same as {pack}, given before it; read once"],
                     id="link-then-pack"),
        pytest.param(["{pack}/10-sampler.toml", "{pack}"], None, [],
                     id="a-file-then-its-directory"),
        pytest.param(["{bundled}"], "bundled", [], id="the-pack-once"),
    ],
)  # fmt: skip
def test_a_path_met_twice_is_listed_once(
    fill: dict[str, Path], paths: list[str], first: str | None, notes: list[str]
) -> None:
    """Each file once, named as it was met first; check's note names the repeated path."""
    given = [p.format(**fill) for p in paths]
    files = list_policy_paths(given).files
    assert sorted(f.resolve() for f in files) == sorted(f.resolve() for f in PACK_FILES)
    if first is not None:
        assert {f.parent for f in files} == {fill[first]}
    assert check_cmd._repeated([Path(p) for p in given]) == [n.format(**fill) for n in notes]


def test_check_plus_the_bundled_pack_is_ok(
    fill: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``check +DIR`` where DIR is the bundled pack: exit 0, its files once, the note."""
    assert main(["check", "--json", f"+{fill['pack']}"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["ok"], document["issues"]) == (True, [])
    assert document["files"] == [str(f) for f in PACK_FILES]
    assert document["notes"] == [AGAIN.format(**fill)]
