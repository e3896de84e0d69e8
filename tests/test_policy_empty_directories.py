"""A policy directory that exists and holds no ``*.toml`` file is called what it is: given
alone it is an error naming it ("a directory with no *.toml files; expected policy files
there"), not a missing path nor "no policy files found"; beside other policy paths (an empty
``+/etc/kernelpolicy/policies.d`` from a ConfigMap, as deploy/ ships) it keeps working and
``check`` says it adds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import PolicyError
from kernelpolicy.policy.files import list_policy_paths
from kernelpolicy.settings import bundled_policy_dir

EMPTY = "a directory with no *.toml files"


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    """A directory with a file that is no policy file, and nothing else."""
    directory = tmp_path / "policies.d"
    directory.mkdir()
    (directory / "README.txt").write_text("policies go here\n")
    return directory


@pytest.mark.parametrize(
    ("argv", "code", "stdout", "stderr"),
    [
        pytest.param(
            ["explain", "--policies", "{d}", "sampler.greedy"], 2, "",
            f"kernelpolicy: error: {{d}}: {EMPTY}; expected policy files there\n",
            id="explain-alone",
        ),
        pytest.param(
            ["check", "{d}"], 1, f"{{d}}: {EMPTY}; expected policy files there\n"
            "1 problem in 0 files\n", "", id="check-alone",
        ),
        pytest.param(
            ["check", "+{d}"], 0, f"note: {{d}}: {EMPTY}; it adds no policies\nok: ", "",
            id="check-plus-dir-keeps-working-and-says-so",
        ),
        pytest.param(
            ["check", "{pack}", "{d}"], 0, f"note: {{d}}: {EMPTY}; it adds no policies\nok: ",
            "", id="check-beside-the-pack",
        ),
    ],
)  # fmt: skip
def test_an_empty_directory_is_named(
    argv: list[str],
    code: int,
    stdout: str,
    stderr: str,
    empty: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fill = {"d": str(empty), "pack": str(bundled_policy_dir())}
    assert main([arg.format(**fill) for arg in argv]) == code
    out, err = capsys.readouterr()
    assert out.startswith(stdout.format(**fill)), out
    assert err == stderr.format(**fill)


def test_check_json_lists_the_notes(empty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--json", f"+{empty}"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["ok"], document["notes"]) == (True, [f"{empty}: {EMPTY}; it adds no policies"])


def test_an_empty_plus_directory_still_resolves(
    empty: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """KERNELPOLICY_POLICY_PATHS=+DIR with DIR empty: the bundled pack, as before."""
    monkeypatch.setenv("KERNELPOLICY_POLICY_PATHS", f"+{empty}")
    assert main(["explain", "sampler.greedy"]) == 0
    assert "sampler.greedy" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("paths", "issues"),
    [
        pytest.param(["{d}"], ["{d}"], id="one"),
        pytest.param(["{d}", "{d2}"], ["{d}", "{d2}"], id="each-named"),
    ],
)
def test_the_listing_names_every_empty_directory(
    paths: list[str], issues: list[str], empty: Path
) -> None:
    other = empty.parent / "other.d"
    other.mkdir()
    fill = {"d": str(empty), "d2": str(other)}
    with pytest.raises(PolicyError) as info:
        list_policy_paths([p.format(**fill) for p in paths])
    assert [(i.file, i.message) for i in info.value.issues] == [
        (name.format(**fill), f"{EMPTY}; expected policy files there") for name in issues
    ]


def test_the_listing_keeps_the_empty_directories_beside_files(empty: Path) -> None:
    listing = list_policy_paths([f"+{empty}"])
    assert listing.files == list_policy_paths([bundled_policy_dir()]).files
    assert listing.empty_directories == [empty]
