"""kernelpolicy diff --daemons says which policies each daemon runs and whose last reload failed
(review: with a broken policy file on two daemons, ``diff --policies +new --against +new``
flagged one, whose decision happened to differ, and showed the other as unchanged). Each
daemon's policy texts are told apart by their digest (``PolicySet.digest`` of them), its
reload error is shown escaped and cut, and the text sums it up as rollout progress."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from kernelpolicy.cli import main
from kernelpolicy.fleet import Node, diff_fleet
from kernelpolicy.fleet.result import Running, Runs
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import load_policy_text
from kernelpolicy.policy.loader import load_policy_sources, policy_digest, read_policy_sources
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from tests import hostile_daemon as shared
from tests.fleet_helpers import staged_policy
from tests.helpers import FIXTURES, ROOT, fixture
from tests.hostile_daemon import CLEAR, FakeDaemon, Honest, serving, shown_safely

honest = shared.honest  # the shared fixture, found here by its name

OLD, NEW = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"
BROKEN = 'schema = "kernelpolicy.policy/v1"\n[features."fleet.example"\n'  # not TOML
# At 50%, the h200 node takes the candidate (step-0 decides current: its daemon disagrees);
# h100-sxm does not (it decides current either way: nothing in its answers says it is behind).
DAEMONS = (("a", "h200", False), ("b", "h200", True), ("c", "h100-sxm", True))  # broken?


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Three daemons on step-0, each with its own copy of the policy file; then step-50 is
    written to each, broken on b and c, and each reloads: a runs step-50, b and c keep step-0
    and say why."""
    from kernelpolicy.testing.daemon import running_daemon

    root = tmp_path_factory.mktemp("policies")
    with ExitStack() as stack:
        addresses = []
        for name, platform, broken in DAEMONS:
            policies = root / name
            shutil.copytree(OLD, policies)
            running = stack.enter_context(
                running_daemon(load_platform(FIXTURES / f"{platform}.json"),
                               [ROOT / "policies", policies], watch=False)
            )  # fmt: skip
            text = BROKEN if broken else (NEW / "fleet-example.toml").read_text()
            (policies / "fleet-example.toml").write_text(text)
            running.call(running.daemon.reload())
            assert (running.daemon.state.snapshot.policy_error is not None) is broken
            addresses.append(running.daemon.bound[0])
        yield addresses


def _diff(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_failing_daemons_are_found_in_json(
    daemons: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--json: each daemon's set (b and c still run step-0, as --policies here), its digest
    and its reload error; the progress counts; the failing daemons on stderr."""
    code, out, err = _diff(capsys, "--policies", f"+{OLD}", "--against", f"+{NEW}", "--daemons",
                           ",".join(daemons), "--json")  # fmt: skip
    assert code == 0, err
    document = json.loads(out)
    old = read_policy_sources([ROOT / "policies", OLD])
    new = read_policy_sources([ROOT / "policies", NEW])
    found = [(d["address"], d["runs"], d["policy_digest"], d["reload_error"] is not None)
             for d in document["daemon_policies"]]  # fmt: skip
    assert found == [
        (daemons[0], "against", policy_digest(new), False),
        (daemons[1], "policies", policy_digest(old), True),
        (daemons[2], "policies", policy_digest(old), True),
    ]
    assert document["policy_progress"] == {
        "daemons": 3, "policies": 2, "against": 1, "other": 0, "failing": 2,
        "policies_digest": policy_digest(old), "against_digest": policy_digest(new),
    }  # fmt: skip
    error = document["daemon_policies"][1]["reload_error"]
    assert "fleet-example.toml" in error
    assert "\n" not in error
    assert f"the last policy reload of 2 of 3 daemons failed ({daemons[1]}: " in err
    (failed,) = [w for w in document["warnings"] if w["code"] == "reload-failed"]
    assert (failed["nodes"], failed["node_names"]) == (2, daemons[1:])
    assert failed["message"] in err


def test_the_reviewed_case_names_both_failing_daemons(
    daemons: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The review's command: --policies and --against both the new set. Both failing daemons
    are named as running other policies, with their error, though c's decisions agree; the
    progress line counts them; --exit-code still counts changes only (none: exit 0)."""
    code, out, err = _diff(capsys, "--policies", f"+{NEW}", "--against", f"+{NEW}", "--daemons",
                           ",".join(daemons), "--exit-code")  # fmt: skip
    assert code == 0, err
    assert (
        "rollout progress: 1 of 3 daemons run --policies, 1 run --against, 2 other, 2 failing; "
        "--policies and --against are one set"
    ) in out
    digest = policy_digest(read_policy_sources([ROOT / "policies", OLD]))
    for address in daemons[1:]:
        (line,) = [line for line in out.splitlines() if line.startswith(f"  {address}: ")]
        assert line.startswith(
            f"  {address}: runs other policies (digest {digest}); last reload failed: "
        )
    assert f"  {daemons[0]}: " not in out  # it runs the set given
    assert "2 of 3 daemons failed" in err


@dataclass
class SnapshotDaemon(FakeDaemon):
    """A fake daemon that also answers GetPlatform, as ``diff --daemons`` asks first."""

    snapshot: str = ""

    def GetPlatform(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.PlatformSnapshot(json=self.snapshot)


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        pytest.param(f"x.toml: bad{CLEAR}\nFORGED: all daemons run --against",
                     "x.toml: bad\\x1b[2J\\nFORGED: all daemons run --against", id="escaped"),
        pytest.param("e" * 100_000, f"{'e' * 400}...(cut, 100000 chars)", id="cut"),
    ],
)  # fmt: skip
def test_a_daemons_reload_error_is_escaped_and_cut(
    honest: Honest, capsys: pytest.CaptureFixture[str], error: str, shown: str
) -> None:
    """Whatever a daemon says its reload error is reaches the text, stderr and --json cut and
    escaped: no control character, no line it forged."""
    answer = honest.resolve_response()
    answer.policy_error = error
    daemon = SnapshotDaemon(resolve=answer, snapshot=fixture("h100-sxm").to_json())
    policies = str(ROOT / "policies")
    with serving(daemon) as address:
        argv = ["--policies", policies, "--against", policies, "--daemons", address]
        code, out, err = _diff(capsys, *argv)
        _, document, _ = _diff(capsys, *argv, "--json")
    assert code == 0, err
    assert f"  {address}: runs --policies (= --against); last reload failed: {shown}\n" in out
    assert shown in err
    assert all(shown_safely(text) for text in (out, err, document))
    assert not any(line.startswith("FORGED") for line in (out + err).splitlines())
    (said,) = json.loads(document)["daemon_policies"]
    assert said["reload_error"] == shown


@pytest.mark.parametrize(
    ("sources", "old", "new", "runs"),
    [
        pytest.param("old", "old", "new", Runs.POLICIES, id="runs --policies"),
        pytest.param("new", "old", "new", Runs.AGAINST, id="runs --against"),
        pytest.param("new", "new", "new", Runs.BOTH, id="one set given as both"),
        pytest.param("other", "old", "new", Runs.OTHER, id="runs neither"),
    ],
)
def test_which_set_a_daemon_runs(sources: str, old: str, new: str, runs: Runs) -> None:
    """A daemon's digest against the two sets' (the API: diff_fleet's ``running``)."""
    texts = {"old": staged_policy(0), "new": staged_policy(10), "other": staged_policy(20)}
    sets = {name: load_policy_text(text, "p.toml") for name, text in texts.items()}
    node = Node.of("d", fixture("h100-sxm"))
    said = Running(policy_digest([("p.toml", texts[sources])]), None)
    result = diff_fleet([node], sets[old], sets[new], running=[("d", said)])
    (daemon,) = result.daemon_policies
    assert daemon.runs is runs
    progress = result.progress()
    assert progress is not None
    assert [progress[key] for key in ("policies", "against", "other", "failing")] == [
        runs in (Runs.POLICIES, Runs.BOTH), runs in (Runs.AGAINST, Runs.BOTH),
        runs is Runs.OTHER, 0,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "sources",
    [
        pytest.param([ROOT / "policies"], id="the bundled pack"),
        pytest.param([ROOT / "policies", NEW], id="the pack and a directory"),
    ],
)
def test_policy_digest_is_the_policy_sets(sources: list[Path]) -> None:
    """The digest of a daemon's texts is PolicySet.digest of them, full path names or base
    names alike (a daemon sends base names)."""
    read = read_policy_sources(sources)
    expected = load_policy_sources(read).digest
    assert policy_digest(read) == expected
    assert policy_digest([(Path(name).name, text) for name, text in read]) == expected
