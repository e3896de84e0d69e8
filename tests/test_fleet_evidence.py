"""kernelpolicy diff decides ``verified = true`` candidates with each node's evidence, as its
daemon does: from the ``verified.*`` labels of kubectl nodes, from each daemon's own evidence
(``--daemons``), and says so where a node's evidence is unknown (a snapshot carries none)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.evidence.store import Evidence, EvidenceEntry, store_evidence
from kernelpolicy.fleet import Node, diff_fleet, load_inventory
from kernelpolicy.labels import node_labels
from kernelpolicy.platform.model import Platform, load_platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import FIXTURES
from tests.serve_process import serve

FEATURE = """
schema = "kernelpolicy.policy/v1"
[features."fleet.verified"]
description = "a kernel given only where verify passed"
fallback = "current"
in_process = false
[[features."fleet.verified".candidates]]
impl = "fastv"
vendor = "nvidia"
verified = true
rollout = {{ percent = {percent} }}
[[features."fleet.verified".candidates]]
impl = "current"
"""
PLAIN = """
schema = "kernelpolicy.policy/v1"
[features."fleet.plain"]
description = "reads no evidence"
fallback = "current"
in_process = false
[[features."fleet.plain".candidates]]
impl = "current"
"""
OLD, NEW = FEATURE.format(percent=0), FEATURE.format(percent=100)
PAIR = ("fleet.verified", "fastv")
H100 = FIXTURES / "h100-sxm.json"


def _evidence(passed: bool | None) -> Evidence:
    """The node's store: fastv passed, failed, or nothing stored (``None``)."""
    if passed is None:
        return Evidence("k")
    return Evidence("k", {PAIR: EvidenceEntry(passed, "2026-11-27", "checked", "store")})


def _platform(machine: str) -> Platform:
    return Platform.from_dict({**json.loads(H100.read_text()), "machine_id": machine * 32})


def _kubectl(tmp_path: Path, passed: bool | None, old: str) -> list[Node]:
    """One labelled node, its labels written by a daemon running ``old`` over its store."""
    platform = _platform("a")
    policies = load_policy_text(old)
    evidence = _evidence(passed) if policies.needs_evidence else None  # as the daemon reads
    resolution = resolve_policies(platform, platform.env, policies, evidence=evidence)
    labels = node_labels(resolution, evidence)
    path = tmp_path / "nodes.json"
    item = {"kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}
    path.write_text(json.dumps({"kind": "List", "items": [item]}))
    return list(load_inventory(path).nodes)


def _codes(result: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(w.concern.value, w.names) for w in result.warnings]


@pytest.mark.parametrize(
    ("passed", "old", "changed", "warned"),
    [
        pytest.param(True, OLD, ["gpu-1"], [], id="verified-label-true: the node changes"),
        pytest.param(False, OLD, [], [], id="verified-label-false: it does not"),
        pytest.param(None, OLD, [], [], id="no-label-under-a-daemon-that-reads-evidence"),
        pytest.param(True, PLAIN, ["gpu-1"], [("evidence-unknown", ("gpu-1",))],
                     id="old-policies-read-no-evidence: unknown, said"),
    ],
)  # fmt: skip
def test_kubectl_nodes_decide_with_their_verified_labels(
    tmp_path: Path, passed: bool | None, old: str, changed: list[str], warned: list[Any]
) -> None:
    """A labelled node decides a verified candidate with its verified.* labels; where its
    daemon read no store (its policies need no evidence), its evidence is unknown and said
    (the feature is new to that node, so it changes either way)."""
    nodes = _kubectl(tmp_path, passed, old)
    result = diff_fleet(nodes, load_policy_text(old), load_policy_text(NEW))
    assert [name for cls in result.classes for name in cls.changed] == changed
    assert _codes(result) == warned


@pytest.mark.parametrize(
    ("evidence", "changed", "warned"),
    [
        pytest.param(_evidence(True), ["b"], [], id="passed: changes"),
        pytest.param(_evidence(False), [], [], id="failed: unchanged"),
        pytest.param(_evidence(None), [], [], id="none-stored: unchanged, known"),
        pytest.param(None, [], [("evidence-unknown", ("a", "b"))], id="unknown: said"),
    ],
)  # fmt: skip
def test_nodes_decide_with_their_own_evidence(
    evidence: Evidence | None, changed: list[str], warned: list[Any]
) -> None:
    """Two identical nodes, one with ``evidence`` (a daemon's): only a passed one takes the
    verified candidate, in a class of its own that says so; unknown evidence is warned of."""
    other = _evidence(None) if evidence is not None else None
    nodes = [Node.of("a", _platform("a"), other), Node.of("b", _platform("b"), evidence)]
    result = diff_fleet(nodes, load_policy_text(OLD), load_policy_text(NEW))
    assert [name for cls in result.classes for name in cls.changed] == changed
    assert _codes(result) == warned
    summaries = [cls.summary for cls in result.classes if cls.changed]
    assert all(s.endswith("; verified fleet.verified/fastv") for s in summaries)
    assert result.to_dict()["warnings"] == [w.to_dict() for w in result.warnings]


@pytest.fixture
def daemons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Daemons on H100: 'passed' with fastv verified in its store, 'bare' with an empty store
    (both serving OLD, as a fleet before the change), 'plain' serving policies that read no
    evidence."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the daemons' default cache dir is under it
    sets = {}
    for name, text in (("old", OLD), ("new", NEW), ("plain", PLAIN)):
        (tmp_path / name).mkdir(mode=0o755)
        (tmp_path / name / "p.toml").write_text(text)
        sets[name] = tmp_path / name
    root = Path(f"/tmp/kp-ev-{tmp_path.name[-12:]}")  # short: a socket path holds 107 bytes
    result = {"feature": PAIR[0], "impl": PAIR[1], "status": "passed", "checks": []}
    store_evidence(load_platform(H100), [result], "2026-11-27", home / ".cache" / "kernelpolicy")
    node = {}  # each daemon its own node: one snapshot would be one daemon given thrice
    for name in ("p", "b", "c"):
        node[name] = tmp_path / f"{name}.json"
        node[name].write_text(_platform({"p": "a", "b": "b", "c": "c"}[name]).to_json())
    with serve(root / "p", node["p"], [sets["old"]]) as passed:
        bare_home = tmp_path / "bare"
        bare_home.mkdir()
        monkeypatch.setenv("HOME", str(bare_home))
        with (
            serve(root / "b", node["b"], [sets["old"]]) as bare,
            serve(root / "c", node["c"], [sets["plain"]]) as plain,
        ):
            yield {"passed": passed.address, "bare": bare.address, "plain": plain.address}
    for name in ("p", "b", "c"):
        for leftover in (root / name).glob("*"):
            leftover.unlink()
        (root / name).rmdir()
    root.rmdir()


def _diff_daemons(tmp_path: Path, addresses: str, capsys: Any) -> tuple[Any, str]:
    code = main(["diff", "--policies", str(tmp_path / "old"), "--against",
                 str(tmp_path / "new"), "--daemons", addresses, "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def test_daemons_send_their_evidence(
    tmp_path: Path, daemons: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """diff --daemons predicts current -> fastv on the daemon whose store verified fastv (as that
    daemon answers), not on the one whose store is empty, and says that the evidence of the
    daemon whose policies read none is unknown, and that it runs other policies."""
    document, err = _diff_daemons(tmp_path, ",".join(daemons.values()), capsys)
    changed = [name for cls in document["classes"] for name in cls["changed_nodes"]]
    assert changed == [daemons["passed"]]
    (change,) = document["changes"]
    assert (change["name"], change["old"], change["new"]) == ("fleet.verified", "current", "fastv")
    warned = [(w["code"], w["node_names"]) for w in document["warnings"]]
    assert warned == [
        ("evidence-unknown", [daemons["plain"]]),
        ("daemon-disagrees", [daemons["plain"]]),
    ]
    assert "stored evidence of 1 of 3 nodes is unknown" in err
