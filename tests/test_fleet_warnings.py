"""kernelpolicy diff warns where its rollout counts cannot be what the fleet does: nodes without
an identity (all take a candidate together at 100%), identities several nodes share (a machine
ID baked into an image), and one daemon given twice (counted as two nodes)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.fleet import Node, diff_fleet
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import load_policy_text
from tests.fleet_helpers import staged_policy
from tests.helpers import FIXTURES, ROOT
from tests.serve_process import serve

OLD = staged_policy(0)
NEW = staged_policy(10)
UNSTAGED = staged_policy(None)
BASE = json.loads((FIXTURES / "h100-sxm.json").read_text())


def _node(name: str, machine: str | None) -> Node:
    """An H100 node of identity ``machine`` (``None``: no machine ID and no GPU UUID)."""
    devices = [{k: v for k, v in d.items() if k != "uuid"} for d in BASE["devices"]]
    data = {**BASE, "devices": devices, "machine_id": machine}
    if machine is None:
        data.pop("machine_id")
    return Node.of(name, Platform.from_dict(data))


@pytest.mark.parametrize(
    ("machines", "old", "expected"),
    [
        pytest.param(["a", "b", "c"], OLD, [], id="each-its-own: nothing"),
        pytest.param(["a", None, None], OLD, [("no-identity", 2, ("n1", "n2"))],
                     id="two-without-identity"),
        pytest.param(["a", "a", "a"], OLD, [("shared-identity", 3, ("n0", "n1", "n2"))],
                     id="one-identity-shared-by-three"),
        pytest.param(["a", "a", None], OLD,
                     [("no-identity", 1, ("n2",)), ("shared-identity", 2, ("n0", "n1"))],
                     id="both"),
        pytest.param([None, None, "a"], UNSTAGED, [("no-identity", 2, ("n0", "n1"))],
                     id="a-rollout-in-the-new-set-only"),
    ],
)  # fmt: skip
def test_identity_warnings(
    machines: list[str | None], old: str, expected: list[tuple[str, int, tuple[str, ...]]]
) -> None:
    """Each warning counts and names the nodes; a rollout in either set is what makes
    identities matter."""
    nodes = [_node(f"n{i}", m and m * 32) for i, m in enumerate(machines)]
    result = diff_fleet(nodes, load_policy_text(old), load_policy_text(NEW))
    assert [(w.concern.value, w.nodes, w.names) for w in result.warnings] == expected
    assert result.to_dict()["warnings"] == [w.to_dict() for w in result.warnings]


def test_no_rollout_no_identity_warning() -> None:
    """Without any staged rollout, identities decide nothing: no warning about them."""
    nodes = [_node("n0", None), _node("n1", "a" * 32), _node("n2", "a" * 32)]
    result = diff_fleet(nodes, load_policy_text(UNSTAGED), load_policy_text(UNSTAGED))
    assert result.warnings == ()


def _policy_dirs(tmp_path: Path) -> list[str]:
    args = []
    for flag, text in (("--policies", OLD), ("--against", NEW)):
        path = tmp_path / flag.strip("-")
        path.mkdir(mode=0o755)
        (path / "p.toml").write_text(text)
        args += [flag, str(path)]
    return args


def _run(tmp_path: Path, capsys: Any, *inventory: str) -> tuple[Any, str]:
    code = main(["diff", *_policy_dirs(tmp_path), *inventory, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def test_shared_identity_is_said_on_stderr_and_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Snapshots of one machine ID (an image that bakes /etc/machine-id): the count, the
    consequence and what to do, on stderr and in --json."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    for name in ("x", "y", "z"):
        (snapshots / f"{name}.json").write_text(json.dumps({**BASE, "machine_id": "e" * 32}))
    document, err = _run(tmp_path, capsys, "--platforms", str(snapshots))
    (warning,) = document["warnings"]
    assert (warning["code"], warning["nodes"], warning["node_names"]) == (
        "shared-identity", 3, ["x", "y", "z"],
    )  # fmt: skip
    assert "kernelpolicy: warning: 1 identity is shared by 3 nodes" in err
    assert "its own /etc/machine-id" in err


@pytest.fixture(scope="module")
def daemon() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: sockets hold 107 bytes
    try:
        with serve(root / "a", FIXTURES / "h100-sxm.json", [ROOT / "policies"]) as served:
            yield served.address
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_one_daemon_given_twice_is_said(
    tmp_path: Path, daemon: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One daemon by two addresses (here two spellings of its socket's path, as a unix path and
    a TCP port would be): counted twice, and said so, not reported as a shared identity."""
    again = daemon.replace("/kp.sock", "/./kp.sock")
    document, err = _run(tmp_path, capsys, "--daemons", f"{daemon},{again}")
    assert document["nodes"] == 2
    codes = [w["code"] for w in document["warnings"]]
    assert "shared-identity" not in codes  # (it also disagrees: it serves the bundled pack)
    (warning,) = [w for w in document["warnings"] if w["code"] == "same-daemon"]
    assert (warning["code"], warning["nodes"], warning["node_names"]) == (
        "same-daemon", 1, [daemon, again],
    )  # fmt: skip
    assert "2 addresses answered for only 1 node" in err
    assert "give each daemon once" in err


@pytest.mark.parametrize(
    ("answered", "expected"),
    [
        pytest.param(None, [], id="not-a-daemon: nothing to check"),
        pytest.param({"fleet.attn": "current"}, [], id="the-daemon-agrees"),
        pytest.param({"fleet.attn": "fastnv"}, ["fleet.attn: daemon fastnv, --policies current"],
                     id="it-answers-another-kernel (a halt, other policies)"),
        pytest.param({"fleet.attn": "current", "other": "x"},
                     ["other: daemon x, --policies (unset)"], id="it-runs-another-feature"),
        pytest.param({}, ["fleet.attn: daemon (unset), --policies current"],
                     id="it-lacks-the-feature"),
    ],
)  # fmt: skip
def test_a_daemon_that_answers_otherwise_is_said(
    answered: dict[str, str] | None, expected: list[str]
) -> None:
    """A live daemon whose own decisions are not what --policies decides for it (it runs other
    policies, or a halt): diff counts from --policies, and says which daemon and where."""
    base = _node("d", "d" * 32)
    node = Node.of("d", base.platform, answered=answered)
    result = diff_fleet([node], load_policy_text(OLD), load_policy_text(NEW))
    found = [w for w in result.warnings if w.concern.value == "daemon-disagrees"]
    assert [(w.nodes, w.names) for w in found] == ([(1, ("d",))] if expected else [])
    for what in expected:
        assert f"d: {what}" in found[0].message
