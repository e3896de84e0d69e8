"""What an installed kernelpolicy says to a user outside a checkout: a ``--platform`` path
that names a snapshot kernelpolicy ships (the README's
``kernelpolicy/fixtures/platforms/t4.json``, run from another directory) names the installed
one, and an unknown policy key sends the reader to the policy language without a path that
only a checkout has."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import PlatformFileError, PolicyError
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import load_policy_text

EXPECTED = "expected the output of 'kernelpolicy probe --json'"
README = "kernelpolicy/fixtures/platforms/t4.json"
SHIPPED = fixture_dir() / "platforms"  # installed: this one


@pytest.mark.parametrize(
    ("given", "shipped"),
    [
        pytest.param(README, "t4.json", id="the-readmes-path"),
        pytest.param("t4.json", "t4.json", id="a-bare-name"),
        pytest.param("elsewhere/h100-sxm.json", "h100-sxm.json", id="another-folder"),
        pytest.param("no-such-snapshot.json", None, id="no-snapshot-of-that-name"),
        pytest.param("platforms", None, id="a-folder-of-the-package"),
    ],
)
def test_a_missing_snapshot_of_a_shipped_name_names_the_installed_one(
    given: str, shipped: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a checkout (here: an empty directory), a missing file whose name a shipped
    snapshot has is told where that one is installed; any other missing file is told as
    before."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlatformFileError) as error:
        load_platform(given)
    hint = f", or a snapshot kernelpolicy ships: {SHIPPED / shipped}" if shipped else ""
    assert str(error.value) == f"{given}: no such file; {EXPECTED}{hint}"


def test_an_existing_file_is_never_taken_for_a_shipped_one(tmp_path: Path) -> None:
    """A file that exists but is no snapshot gets its own error, not the hint."""
    (tmp_path / "t4.json").write_text("{}")
    with pytest.raises(PlatformFileError) as error:
        load_platform(tmp_path / "t4.json")
    assert "ships" not in str(error.value)


def test_the_hint_names_the_fixtures_folder() -> None:
    """The loader's SHIPPED is the fixtures module's folder of platform snapshots (the loader
    cannot import that module, which imports it)."""
    from kernelpolicy.platform import model

    assert model.SHIPPED == SHIPPED
    assert (SHIPPED / "t4.json").is_file()


def test_explain_from_another_directory_names_the_installed_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's explain, run outside a checkout: one error line naming the installed path."""
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "--platform", README]) == 2
    assert capsys.readouterr().err == (
        f"kernelpolicy: error: {README}: no such file; {EXPECTED}, or a snapshot kernelpolicy "
        f"ships: {SHIPPED / 't4.json'}\n"
    )


def test_an_unknown_key_names_the_policy_language_where_it_is() -> None:
    """The unknown-key message says that docs/policies.md is in the source tree (an installed
    kernelpolicy has no docs/ folder and names no documentation URL)."""
    text = 'schema = "kernelpolicy.policy/v1"\n[features.x]\nfallbak = "torch"\n'
    with pytest.raises(PolicyError) as error:
        load_policy_text(text, "p.toml")
    assert str(error.value).endswith(
        "unknown key; did you mean 'fallback'? (the policy language: docs/policies.md in "
        "kernelpolicy's source tree)"
    )
