"""kernelpolicy diff reads a kernel halted on a node (``halt_on``) from the node's labels: the
labels ``kernelpolicy labels`` writes for a resolution with a halted candidate, put in a
``kubectl get nodes -o json`` list, decide that node with its halts, as ``--daemons`` does with
a live daemon's, and show them in ``halted`` (kept or lifted by the new policies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import InventoryError
from kernelpolicy.fleet import Node, diff_fleet, load_inventory
from kernelpolicy.fleet.halted import LABEL_WHY, LabelHalts
from kernelpolicy.labels import PREFIX, node_labels
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import load_policy_text
from tests.halts_helpers import GUARD_TRIPS_WHY, OTHER
from tests.helpers import FIXTURES, GUARDED_GREEDY_POLICY, ROOT

GREEDY = "sampler.greedy"
LONG = "fleet.a_rather_long_feature_name_for_labels"  # halted.<it>.<impl> is cut to 63 chars
LONG_POLICY = f"""schema = "kernelpolicy.policy/v1"
[features."{LONG}"]
description = "a feature whose halted label is cut and ends in a hash"
fallback = "current"
in_process = false
[[features."{LONG}".candidates]]
impl = "planted_kernel_variant"
halt_on = {{ runtime_failures = 1 }}
[[features."{LONG}".candidates]]
impl = "current"
"""


def _kubectl(tmp_path: Path, old: str, halted: dict[str, list[str]]) -> Path:
    """A NodeList of one CPU node per name, labelled as ``kernelpolicy labels`` labels it when
    its daemon runs ``old`` and halted the candidates (``feature/impl``) given for it."""
    platform = load_platform(FIXTURES / "cpu.json")
    policies = load_policy_text(old)
    items = []
    for name, keys in halted.items():
        resolution = resolve_policies(
            platform, platform.env, policies, halts=dict.fromkeys(keys, GUARD_TRIPS_WHY)
        )
        items.append({"metadata": {"name": name, "labels": node_labels(resolution)}})
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": items}))
    return path


def _run(
    tmp_path: Path, nodes: Path, old: str, new: str, capsys: pytest.CaptureFixture[str], *flags: str
) -> str:
    """What ``diff --policies OLD --against NEW --platforms NODES`` prints."""
    for name, text in (("old", old), ("new", new)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "p.toml").write_text(text)
    code = main(["diff", "--policies", str(tmp_path / "old"), "--against", str(tmp_path / "new"),
                 "--platforms", str(nodes), *flags])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _diff(
    tmp_path: Path, nodes: Path, old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(_run(tmp_path, nodes, old, new, capsys, "--json"))
    return document


CASES = [
    pytest.param(GUARDED_GREEDY_POLICY, GUARDED_GREEDY_POLICY + OTHER, GREEDY, "planted", True, [],
                 id="another-feature-changes: the halt is kept, the node stays on torch"),
    pytest.param(GUARDED_GREEDY_POLICY,
                 GUARDED_GREEDY_POLICY.replace("the aiter greedy bug", "aiter's greedy bug"),
                 GREEDY, "planted", False, [(GREEDY, "torch", "planted")],
                 id="the-feature-changes: the halt lifts, the halted node changes back"),
    pytest.param(LONG_POLICY, LONG_POLICY + OTHER, LONG, "planted_kernel_variant", True, [],
                 id="a-cut-label-name: read back by the policies' candidates"),
    pytest.param(LONG_POLICY, LONG_POLICY.replace("ends in a hash", "ends in a digest"), LONG,
                 "planted_kernel_variant", False, [(LONG, "current", "planted_kernel_variant")],
                 id="a-cut-label-name: the feature changes, the halt lifts"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "feature", "impl", "kept", "changes"), CASES)
def test_labelled_halts_decide_the_node_as_its_daemon_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    feature: str,
    impl: str,
    kept: bool,
    changes: list[tuple[str, str, str]],
) -> None:
    """Node ``a`` halted the candidate, ``b`` did not: ``halted`` names ``a`` and whether the
    new policies keep the halt, ``a``'s class says it is halted, and the decisions that change
    are those ``a``'s daemon will make (none unless the halt lifts)."""
    nodes = _kubectl(tmp_path, old, {"a": [f"{feature}/{impl}"], "b": []})
    document = _diff(tmp_path, nodes, old, new, capsys)
    assert document["halted"] == [{
        "feature": feature, "impl": impl, "nodes": 1, "node_names": ["a"],
        "kept_by_new_policies": kept,
        "reasons": [{"why": LABEL_WHY, "nodes": 1, "node_names": ["a"]}],
    }]  # fmt: skip
    halted = [c["summary"] for c in document["classes"] if c["example"] == "a"]
    assert halted == [s for s in halted if s.endswith(f"; halted {feature}/{impl}")] != []
    found = [
        (c["name"], c["old"], c["new"])
        for c in document["nodes_by_change"]
        if c["kind"] == "decision" and c["node_names"] == ["a"]
    ]
    assert found == changes
    text = _run(tmp_path, nodes, old, new, capsys)
    fate = "keep" if kept else "lift (the feature's policy changes)"
    assert f"  {feature}/{impl}: halted on 1 of 2 nodes (50.0%); the new policies {fate}" in text
    assert f"    {LABEL_WHY} (a)" in text


@pytest.mark.parametrize("new", [c.values[1] for c in CASES[:2]], ids=["kept", "lifted"])
def test_labelled_halts_diff_as_a_daemons_halts(tmp_path: Path, new: str) -> None:
    """The nodes read from labels compare exactly as the same nodes given their halts as
    ``--daemons`` gives them (``Node.halts``, ``feature/impl`` -> why)."""
    old = GUARDED_GREEDY_POLICY
    inventory = load_inventory(_kubectl(tmp_path, old, {"a": [f"{GREEDY}/planted"], "b": []}))
    halts = {"a": {f"{GREEDY}/planted": LABEL_WHY}, "b": {}}
    daemons = [
        Node.of(n.name, n.platform, n.evidence, halts=halts[n.name]) for n in inventory.nodes
    ]
    before, after = load_policy_text(old), load_policy_text(new)
    from_labels = diff_fleet(inventory.nodes, before, after).to_dict()
    assert from_labels == diff_fleet(daemons, before, after).to_dict()


def _labelled(tmp_path: Path, extra: dict[str, str], identities: tuple[str, ...] = ("",)) -> Path:
    """A NodeList of CPU nodes labelled by a daemon running the guarded policy (nothing
    halted), with ``extra`` labels, one node per identity (``node.identity``)."""
    platform = load_platform(FIXTURES / "cpu.json")
    labels = node_labels(resolve_policies(platform, platform.env, load_policy_text(OLD_TEXT)))
    items = [
        {"metadata": {"name": f"n{i}", "labels": {**labels, **extra, IDENTITY: identity}}}
        for i, identity in enumerate(identities)
    ]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    return path


OLD_TEXT = GUARDED_GREEDY_POLICY
IDENTITY = f"{PREFIX}/node.identity"
MANY = {f"{PREFIX}/halted.fleet.feature_{i:04}.fast": "true" for i in range(1000)}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({f"{PREFIX}/halted.sampler.greedy.planted": "false"}, "planted'='false'",
                     id="value-false"),
        pytest.param({f"{PREFIX}/halted.sampler.greedy.planted": "True"}, "planted'='True'",
                     id="value-not-lower-case"),
        pytest.param({f"{PREFIX}/halted.sampler.greedy.planted": ""}, "planted'=''",
                     id="value-empty"),
        pytest.param({f"{PREFIX}/halted.greedy": "true"}, "halted.greedy'='true'",
                     id="no-implementation"),
        pytest.param({f"{PREFIX}/halted.Sampler.greedy.planted": "true"}, "Sampler",
                     id="not-a-feature-name"),
        pytest.param({f"{PREFIX}/halted.sampler..planted": "true"}, "sampler..planted",
                     id="empty-part"),
        pytest.param({f"{PREFIX}/halted.sampler-greedy.planted": "true"}, "sampler-greedy",
                     id="a-dash-not-a-cut-name"),
        pytest.param(MANY, "MAX_FEATURE_FILE_BYTES", id="more-than-a-feature-file-holds"),
    ],
)  # fmt: skip
def test_a_bad_halted_label_is_named(tmp_path: Path, extra: dict[str, str], expected: str) -> None:
    """A ``halted.*`` label kernelpolicy does not write is an error naming the node and the
    label (or the limit), not a node silently decided as if nothing were halted."""
    with pytest.raises(InventoryError, match=r"items\[0\] \(n0\)") as caught:
        load_inventory(_labelled(tmp_path, extra))
    assert expected in str(caught.value)


def test_a_kind_of_node_shares_its_platform_and_halts(tmp_path: Path) -> None:
    """Nodes apart only by identity share one Platform and one LabelHalts; their own
    identities stay theirs."""
    extra = {f"{PREFIX}/halted.sampler.greedy.planted": "true"}
    nodes = load_inventory(_labelled(tmp_path, extra, ("ab" * 16, "cd" * 16))).nodes
    assert nodes[0].platform is nodes[1].platform
    assert nodes[0].halts is nodes[1].halts
    assert nodes[0].halts == LabelHalts(("halted.sampler.greedy.planted",))
    assert [n.identity for n in nodes] == ["ab" * 16, "cd" * 16]


def test_a_halted_label_of_no_compared_candidate_decides_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A label naming a candidate neither policy set has (its daemon ran others) is shown as
    halted, named by the label, lifted; it changes no decision, as a daemon's such halt."""
    extra = {f"{PREFIX}/halted.fleet.gone.fast": "true"}
    document = _diff(tmp_path, _labelled(tmp_path, extra), OLD_TEXT, OLD_TEXT + OTHER, capsys)
    assert [(h["feature"], h["impl"], h["kept_by_new_policies"]) for h in document["halted"]] == [
        ("fleet.gone", "fast", False)
    ]
    assert [c["name"] for c in document["changes"] if c["kind"] == "decision"] == ["fleet.other"]


def test_the_fleet_page_quotes_the_label_reason() -> None:
    """docs/fleet.md, where diff from labels is described, gives the reason a labelled halt is
    shown with as the code writes it."""
    page = " ".join((ROOT / "docs" / "fleet.md").read_text().split())
    assert f"`{LABEL_WHY}`" in page
