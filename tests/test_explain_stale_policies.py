"""explain --address of a daemon whose last reload failed: it serves the last good policies,
and explain says so (one stderr line, as status words it), carries it in --json (with the
daemon's revision) and exits 1 as status does, where it printed the old table with exit 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.testing.daemon import running_daemon
from tests import hostile_daemon as shared
from tests.helpers import ROOT, fixture
from tests.hostile_daemon import CLEAR, FakeDaemon, Honest, serving

honest = shared.honest  # the shared fixture, found here by its name
pytestmark = pytest.mark.xdist_group("explain-daemon")

STALE = "last reload FAILED, serving the last good policies: "


def _stale_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if STALE in line]


def test_a_failed_reload_is_said_and_fails_explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad file after start: explain --address shows the last good answer, names the error
    on stderr and in --json, and exits 1 (status's code); once the file is fixed, 0 again."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    with running_daemon(fixture("h100-sxm"), [policies], watch=False) as running:
        address = running.daemon.bound[0]
        (policies / "99-bad.toml").write_text("[[[")
        running.call(running.daemon.reload("test"))
        assert main(["explain", "--address", address, "mhc"]) == 1
        text = capsys.readouterr()
        assert main(["explain", "--address", address, "mhc", "--json"]) == 1
        as_json = capsys.readouterr()
        assert main(["status", "--address", address]) == 1  # the same exit status
        capsys.readouterr()
        (policies / "99-bad.toml").unlink()
        running.call(running.daemon.reload("test"))
        assert main(["explain", "--address", address, "mhc", "--json"]) == 0
        fixed = capsys.readouterr()
    assert text.out.startswith("fingerprint ")  # the answer served is still shown
    (line,) = _stale_lines(text.err)
    assert line.startswith(f"kernelpolicy: exit 1: {address}: {STALE}")
    assert "99-bad.toml:1: not valid TOML" in line
    document = json.loads(as_json.out)
    assert "99-bad.toml:1: not valid TOML" in document["policy_error"]
    assert document["revision"] == 1
    assert _stale_lines(as_json.err) == [line]
    assert json.loads(fixed.out)["policy_error"] is None
    assert _stale_lines(fixed.err) == []


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_daemons_error_is_one_safe_line(
    capsys: pytest.CaptureFixture[str], honest: Honest, as_json: bool
) -> None:
    """An error of several lines, escape sequences in it, is one stderr line with nothing sent
    to the terminal; --json carries it whole, as the daemon sent it."""
    error = f"a.toml:1: bad {CLEAR}\nb.toml:2: worse"
    answer = honest.resolve_response()
    answer.policy_error = error
    answer.revision = 7
    flag = ["--json"] if as_json else []
    with serving(FakeDaemon(resolve=answer)) as address:
        assert main(["explain", "--address", address, "mhc", *flag]) == 1
    captured = capsys.readouterr()
    (line,) = _stale_lines(captured.err)
    assert line.endswith(f"{STALE}a.toml:1: bad \\x1b[2J; b.toml:2: worse")
    assert "\x1b" not in captured.err
    if as_json:
        document = json.loads(captured.out)
        assert (document["policy_error"], document["revision"]) == (error, 7)


def test_a_healthy_daemon_says_nothing_more(
    capsys: pytest.CaptureFixture[str], honest: Honest
) -> None:
    """No reload error: exit 0, no stderr line, policy_error null and the revision in --json."""
    with serving(FakeDaemon(resolve=honest.resolve_response())) as address:
        assert main(["explain", "--address", address, "mhc", "--json"]) == 0
    captured = capsys.readouterr()
    assert _stale_lines(captured.err) == []
    document = json.loads(captured.out)
    assert (document["policy_error"], document["revision"]) == (None, 1)


def test_help_documents_the_exit_status(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--help's exit codes name the stale daemon's 1 beside the decision errors'."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    help_text = capsys.readouterr().out
    assert "exit status: 0 " in help_text
    assert "(--address) the daemon's last reload FAILED and it serves the last good policies" in (
        help_text
    )
