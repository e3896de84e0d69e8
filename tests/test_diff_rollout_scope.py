"""kernelpolicy diff and staged rollouts (review): each step names its nodes (--json: all of
them; the text: those joining, the first three), identity warnings count only the nodes a
staged candidate can reach, a rollout the change leaves as it is gets no table, and changes no
rollout stages are said to land on all their nodes at the next reload."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.diff_cmd import render
from kernelpolicy.engine import resolve_policies
from kernelpolicy.fleet import Node, diff_fleet
from kernelpolicy.fleet.staging import with_percent
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policy_text
from tests.fleet_helpers import rolled_out, staged_policy
from tests.helpers import FIXTURES, ROOT

STEP_0, STEP_50 = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"
H100 = json.loads((FIXTURES / "h100-sxm.json").read_text())
MI300X = json.loads((FIXTURES / "mi300x.json").read_text())


def _nodes(base: dict[str, Any], count: int, prefix: str, shared: bool = False) -> list[Node]:
    """``count`` nodes of fixture ``base`` (one platform, without GPU UUIDs), each of its own
    identity (one for all where ``shared``)."""
    devices = [{k: v for k, v in d.items() if k != "uuid"} for d in base["devices"]]
    platform = Platform.from_dict({**base, "devices": devices})
    return [
        Node(
            f"{prefix}{i}",
            platform,
            hashlib.sha256(f"{prefix}{0 if shared else i}".encode()).hexdigest()[:32],
        )
        for i in range(count)
    ]


def _policy(old: str, new: str) -> tuple[PolicySet, PolicySet]:
    return load_policy_text(old, "p.toml"), load_policy_text(new, "p.toml")


def test_each_step_names_its_nodes() -> None:
    """--json: each step's node_names are the nodes whose own resolution at that percent
    chooses the candidate, in inventory order; the text names those joining at each step."""
    nodes = _nodes(H100, 60, "n")
    old, new = _policy(staged_policy(0), staged_policy(25))
    result = diff_fleet(nodes, old, new, steps=(10, 50, 100))
    (rollout,) = result.to_dict()["rollouts"]
    for step in rollout["steps"]:
        staged = with_percent(new, "fleet.attn", "fastnv", step["percent"])
        expected = [n.name for n in nodes if _runs_fastnv(n, staged)]
        assert step["node_names"] == expected
        assert step["nodes"] == len(expected)
    at = {s["percent"]: s["node_names"] for s in rollout["steps"]}
    assert 0 < len(at[10]) < len(at[25]) < len(at[50]) < len(at[100]) == 60
    text = render(result, "test")
    joining = [n for n in at[25] if n not in at[10]]
    assert f"  25%: {len(at[25])} nodes; {len(joining)} join: {', '.join(joining[:3])} and " in text


def test_the_text_is_bounded_for_10000_nodes() -> None:
    """Over 10,000 nodes each step is one line naming at most three nodes; --json names every
    node of every step."""
    nodes = _nodes(H100, 10_000, "n")
    old, new = _policy(staged_policy(0), staged_policy(5))
    result = diff_fleet(nodes, old, new, steps=(1, 5, 25, 50, 100))
    lines = render(result, "test").splitlines()
    start = lines.index("rollout fleet.attn -> fastnv at 5%:")
    steps = lines[start + 1 : start + 6]
    assert [line.split(":")[0] for line in steps] == ["  1%", "  5%", "  25%", "  50%", "  100%"]
    assert all(len(line) < 120 for line in steps), steps
    assert steps[-1].startswith("  100%: 10,000 nodes; ")
    (rollout,) = result.to_dict()["rollouts"]
    assert len(rollout["steps"][-1]["node_names"]) == 10_000


@pytest.mark.parametrize(
    ("amd_shared", "nvidia_shared", "expected"),
    [
        pytest.param(True, False, [], id="AMD nodes share one: no nvidia candidate reaches them"),
        pytest.param(False, True, [("shared-identity", 3)], id="nvidia nodes share one"),
        pytest.param(True, True, [("shared-identity", 3)], id="both: the nvidia ones only"),
    ],
)
def test_identity_warnings_count_the_nodes_a_rollout_reaches(
    amd_shared: bool, nvidia_shared: bool, expected: list[tuple[str, int]]
) -> None:
    """The candidate is NVIDIA's: AMD nodes are in no step whatever their identity."""
    nodes = [*_nodes(H100, 3, "nv", nvidia_shared), *_nodes(MI300X, 4, "amd", amd_shared)]
    old, new = _policy(staged_policy(0), staged_policy(10))
    result = diff_fleet(nodes, old, new)
    assert [(w.concern.value, w.nodes) for w in result.warnings] == expected
    for warning in result.warnings:
        assert all(name.startswith("nv") for name in warning.names)
        assert "of 3 nodes" in warning.message or "by 3 nodes" in warning.message


def test_the_documented_rollout_warns_of_no_identity(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/fleet.md's step-0 -> step-50 over the fixtures: the node without an identity is
    the CPU one and those sharing one are AMD's; the NVIDIA candidate reaches neither."""
    argv = ["diff", "--policies", f"+{STEP_0}", "--against", f"+{STEP_50}", "--steps", "10,50,100"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "identity" not in err, err
    assert "rollout fleet.example -> candidate at 50%:" in out


@pytest.mark.parametrize(
    ("old", "new", "table", "unstaged"),
    [
        pytest.param(staged_policy(0), staged_policy(10), True, "none",
                     id="a step: staged"),
        pytest.param(staged_policy(None), staged_policy(10), True, "none",
                     id="staging a candidate all ran: those left out are the rollout's"),
        pytest.param(staged_policy(10), staged_policy(0), True, "none",
                     id="the kill switch: staged"),
        pytest.param(staged_policy(10), staged_policy(10, then_slownv=True), False, "out",
                     id="a candidate for the rest, outside the rollout: not staged"),
        pytest.param(staged_policy(10), staged_policy(None), None, "out",
                     id="the rollout dropped: lands on all at once"),
        pytest.param(staged_policy(10), staged_policy(10), False, "none",
                     id="nothing changes: no table"),
    ],
)  # fmt: skip
def test_tables_and_unstaged_changes(
    old: str, new: str, table: bool | None, unstaged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollout's table is shown where the change touches it (``changed`` in --json); the
    changes that no rollout stages are counted with their nodes (``not_staged``): here the
    nodes out of the 10% cohort (``out``) or none."""
    nodes = _nodes(H100, 40, "n")
    result = diff_fleet(nodes, *_policy(old, new), steps=(10, 100))
    document = result.to_dict()
    assert [r["changed"] for r in document["rollouts"]] == ([] if table is None else [table])
    text = render(result, "test")
    assert ("rollout fleet.attn -> fastnv at" in text) is bool(table)
    assert ("1 staged rollout the change leaves as it is, not shown" in text) is (table is False)
    policies = load_policy_text(old if table is None else new, "p.toml")
    cohort = {n.name for n in nodes if _runs_fastnv(n, policies)}
    expected = [] if unstaged == "none" else [n.name for n in nodes if n.name not in cohort]
    assert document["not_staged"]["node_names"] == expected
    said = f"not staged: lands on all {len(expected)} nodes at the next reload"
    assert (said in text) is bool(expected)


def _runs_fastnv(node: Node, policies: PolicySet) -> bool:
    """Whether ``node``, resolved on its own as its daemon would, runs fastnv."""
    platform = Platform.from_dict({**node.platform.to_dict(), "machine_id": node.identity})
    return resolve_policies(platform, {}, policies).decisions["fleet.attn"].impl == "fastnv"


def test_engine_settings_follow_a_staged_decision(tmp_path: Path) -> None:
    """The sampler rolled out at 0% (the kill switch) over the fixtures: its decision and the
    vLLM and SGLang settings that follow it are all staged; nothing lands outside it."""
    new = rolled_out(tmp_path, 0)
    from kernelpolicy.fleet import load_inventory
    from kernelpolicy.policy import load_policies

    result = diff_fleet(
        load_inventory(FIXTURES).nodes, load_policies([ROOT / "policies"]), load_policies([new])
    )
    kinds = {change.kind for change, _ in result.totals()}
    assert {"decision", "vllm env"} <= kinds
    assert (result.unstaged, result.unstaged_nodes) == ((), ())
    (rollout,) = result.rollouts
    assert rollout.changed
