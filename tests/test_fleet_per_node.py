"""kernelpolicy diff --json says which node gets which change: each change, per class and
across the fleet, names the nodes it reaches, and they are the nodes whose own resolution
changes that way (fleet review finding 5: only the union of a class's changed nodes was given)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernelpolicy.engine import resolve_policies
from kernelpolicy.fleet import Node, diff_fleet
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policy_text
from tests.helpers import FIXTURES

TWO = """
schema = "kernelpolicy.policy/v1"
[features."fleet.a"]
description = "a"
fallback = "current"
in_process = false
[[features."fleet.a".candidates]]
impl = "fast"
rollout = {{ percent = {a} }}
[[features."fleet.a".candidates]]
impl = "current"
[features."fleet.b"]
description = "b"
fallback = "current"
in_process = false
[[features."fleet.b".candidates]]
impl = "fast"
rollout = {{ percent = {b} }}
[[features."fleet.b".candidates]]
impl = "current"
"""


def _nodes(count: int) -> list[Node]:
    """``count`` H100 and H200 nodes, each of its own identity."""
    nodes = []
    for i in range(count):
        data = json.loads((FIXTURES / ("h100-sxm.json", "h200.json")[i % 2]).read_text())
        data["machine_id"] = f"{i:032x}"
        nodes.append(Node.of(f"n{i:02d}", Platform.from_dict(data)))
    return nodes


def _truth(nodes: list[Node], old: PolicySet, new: PolicySet) -> dict[str, list[str]]:
    """feature -> the nodes whose own decision of it changes, resolved one by one."""
    found: dict[str, list[str]] = {}
    for node in nodes:
        p = node.platform
        before, after = (resolve_policies(p, p.env, s) for s in (old, new))
        for feature in after.decisions:
            if before.decision(feature).impl != after.decision(feature).impl:
                found.setdefault(feature, []).append(node.name)
    return found


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param((0, 0), (30, 30), id="both-rolled-out-to-different-cohorts"),
        pytest.param((0, 0), (50, 0), id="one-feature-only"),
        pytest.param((30, 60), (60, 30), id="one-up-one-down"),
    ],
)  # fmt: skip
def test_each_change_names_its_nodes(old: tuple[int, int], new: tuple[int, int]) -> None:
    """Per class and across the fleet, each change's node_names are exactly the nodes whose own
    resolution changes that feature (not the union of the class's changes)."""
    sets = [load_policy_text(TWO.format(a=a, b=b)) for a, b in (old, new)]
    nodes = _nodes(40)
    document: Any = diff_fleet(nodes, *sets).to_dict()
    truth = _truth(nodes, *sets)
    fleet = {c["name"]: sorted(c["node_names"]) for c in document["nodes_by_change"]}
    assert fleet == {feature: sorted(names) for feature, names in truth.items()}
    for cls in document["classes"]:
        for change, named in zip(cls["changes"], cls["nodes_by_change"], strict=True):
            assert {k: named[k] for k in ("kind", "name", "old", "new")} == {
                k: change[k] for k in ("kind", "name", "old", "new")
            }
            assert len(named["node_names"]) == change["nodes"]
            assert set(named["node_names"]) <= set(cls["changed_nodes"])
            assert set(named["node_names"]) <= set(truth[change["name"]])
    if len(truth) == 2:  # the two features reach different nodes: a union would be wrong
        assert set(truth["fleet.a"]) != set(truth["fleet.b"])
