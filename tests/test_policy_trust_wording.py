"""A policy path refused for trust is called what it is, one label for ``explain``'s error and
``check``'s issue (``policy.files._note``): a policy file whose own directory another user can
write is refused for that directory, "policy directory" (the first-day review saw
``check perm/pol/10.toml`` say ".../perm/pol: refusing this policy file" of the directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.settings import bundled_policy_dir

POLICY = bundled_policy_dir() / "10-sampler.toml"
WHY = "writable by its group"


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``pol/10.toml`` (mode 0644 in a 0755 directory), trusted as it stands."""
    monkeypatch.delenv("KERNELPOLICY_ALLOW_UNTRUSTED_FILES", raising=False)
    (tmp_path / "pol").mkdir(mode=0o755)
    shutil.copy(POLICY, tmp_path / "pol" / "10.toml")
    (tmp_path / "pol" / "10.toml").chmod(0o644)
    return tmp_path


CASES = [
    pytest.param("pol", "pol/10.toml", "pol", "directory", id="file-in-a-group-writable-dir"),
    pytest.param("pol", "pol", "pol", "directory", id="group-writable-dir-given"),
    pytest.param("pol/10.toml", "pol/10.toml", "pol/10.toml", "file", id="group-writable-file"),
]


@pytest.mark.parametrize(("writable", "given", "named", "what"), CASES)
def test_check_names_what_is_refused(
    writable: str,
    given: str,
    named: str,
    what: str,
    layout: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (layout / writable).chmod((layout / writable).stat().st_mode | 0o020)
    assert main(["check", str(layout / given)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{layout / named}: refusing this policy {what}: {WHY}"), first


@pytest.mark.parametrize(("writable", "given", "named", "what"), CASES)
def test_explain_names_it_alike(
    writable: str,
    given: str,
    named: str,
    what: str,
    layout: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (layout / writable).chmod((layout / writable).stat().st_mode | 0o020)
    assert main(["explain", "--policies", str(layout / given), "sampler.greedy"]) == 2
    err = capsys.readouterr().err
    said = f"kernelpolicy: error: refusing policy {what} {layout / named}: {WHY}"
    assert err.startswith(said), err


@pytest.mark.parametrize(
    ("given", "said"),
    [
        pytest.param("pol", "directory above the policies {layout}: " + WHY, id="a-directory"),
        pytest.param("pol/10.toml", "a directory above it can be written by another user",
                     id="a-file"),
    ],
)  # fmt: skip
def test_a_directory_further_up_is_named_as_one_above(
    given: str, said: str, layout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group-writable directory above the policy directory is not "policy directory" (the
    final read saw ``explain`` call a group-writable ``/etc`` above the pack that)."""
    layout.chmod(layout.stat().st_mode | 0o020)
    assert main(["explain", "--policies", str(layout / given), "sampler.greedy"]) == 2
    err = capsys.readouterr().err
    assert said.format(layout=layout) in err, err
    assert f"policy directory {layout}:" not in err
