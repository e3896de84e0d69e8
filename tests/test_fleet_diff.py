"""kernelpolicy diff: the changes a new policy set makes across a fleet (its classes, the nodes
named, the engine settings that follow), its rollout steps, and its output. A node rebuilt from
its labels: tests/test_fleet_diff_labels.py; inventories: tests/test_fleet_diff_inventory.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.diff_cmd import nodes_in_words, parse_steps
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import SettingsError
from kernelpolicy.fleet import diff_fleet, load_inventory
from kernelpolicy.fleet.diff import flag_options
from kernelpolicy.labels import node_labels
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policies
from tests.fleet_helpers import NAMES, rolled_out
from tests.helpers import FIXTURES, ROOT, bundled


def inventory(tmp_path: Path, count: int) -> tuple[Path, Path]:
    """``count`` nodes cycling through the fixtures, as snapshots and as kubectl nodes."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    items = []
    for i in range(count):
        data = json.loads((FIXTURES / f"{NAMES[i % len(NAMES)]}.json").read_text())
        data["machine_id"] = hashlib.sha256(f"n{i}".encode()).hexdigest()[:32]
        (snapshots / f"n{i:04d}.json").write_text(json.dumps(data))
        platform = Platform.from_dict(data)
        labels = node_labels(resolve_policies(platform, platform.env, bundled()))
        items.append({"kind": "Node", "metadata": {"name": f"n{i:04d}", "labels": labels}})
    kubectl = tmp_path / "nodes.json"
    kubectl.write_text(json.dumps({"kind": "List", "items": items}))
    return snapshots, kubectl


def test_same_policies_change_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled pack against itself over the fixtures: no change, exit 0 with --exit-code."""
    assert main(["diff", "--against", str(ROOT / "policies"), "--exit-code"]) == 0
    assert f"{len(NAMES)} nodes in {len(NAMES)} classes; 0 of" in capsys.readouterr().out


def test_rollout_changes_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 50% rollout: the changed nodes, the engine settings that follow, the steps counted
    monotonically, exit 1 with --exit-code; snapshots and kubectl nodes agree."""
    new = rolled_out(tmp_path)
    snapshots, kubectl = inventory(tmp_path, 280)
    answers = []
    for source in (snapshots, kubectl):
        argv = ["diff", "--against", str(new), "--platforms", str(source), "--json"]
        assert main([*argv, "--exit-code"]) == 1
        answers.append(json.loads(capsys.readouterr().out))
    snap, kube = answers
    assert snap["nodes"] == kube["nodes"] == 280
    assert snap["changes"] == kube["changes"]
    kinds = {(c["kind"], c["name"]) for c in snap["changes"]}
    assert ("decision", "sampler.top_k_top_p") in kinds
    assert ("vllm env", "VLLM_USE_FLASHINFER_SAMPLER") in kinds
    assert ("sglang flag", "--sampling-backend") in kinds
    (rollout,) = snap["rollouts"]
    counts = [s["nodes"] for s in rollout["steps"]]
    assert counts == sorted(counts)
    at_50 = next(s["nodes"] for s in rollout["steps"] if s["percent"] == 50)
    at_100 = counts[-1]
    changed = next(c["nodes"] for c in snap["changes"] if c["name"] == "sampler.top_k_top_p")
    assert at_50 + changed == at_100  # every node that stays on flashinfer, or moves off it
    assert abs(at_50 / at_100 - 0.5) < 0.15  # 100 eligible nodes: 3 sigma


def test_the_changed_nodes_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Per class, --json names exactly the nodes whose own resolution changes (each node
    resolved on its own here, as its daemon would), in inventory order; the text names the
    first three of them and counts the rest."""
    new = rolled_out(tmp_path)
    snapshots, _ = inventory(tmp_path, 56)
    assert main(["diff", "--against", str(new), "--platforms", str(snapshots), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    policies = load_policies([new])
    expected = []
    for path in sorted(snapshots.glob("*.json")):
        platform = Platform.from_dict(json.loads(path.read_text()))
        before = resolve_policies(platform, platform.env, bundled())
        after = resolve_policies(platform, platform.env, policies)
        if (
            before.decisions["sampler.top_k_top_p"].impl
            != after.decisions["sampler.top_k_top_p"].impl
        ):
            expected.append(path.stem)
    named = [name for cls in document["classes"] for name in cls["changed_nodes"]]
    assert sorted(named) == expected
    assert len(expected) == document["changed_nodes"] > 3
    for cls in document["classes"]:
        assert cls["example"] == (cls["changed_nodes"] or [cls["example"]])[0]
    assert main(["diff", "--against", str(new), "--platforms", str(snapshots)]) == 0
    out = capsys.readouterr().out
    for cls in document["classes"]:
        if cls["changed_nodes"]:
            assert f"changes on {nodes_in_words(cls['changed_nodes'])}" in out


@pytest.mark.parametrize(
    ("names", "text"),
    [
        pytest.param(["a"], "a", id="one"),
        pytest.param(["a", "b"], "a and b", id="two"),
        pytest.param(["a", "b", "c"], "a, b and c", id="three"),
        pytest.param(["a", "b", "c", "d", "e"], "a, b, c and 2 more", id="more"),
        pytest.param([f"n{i}" for i in range(1003)], "n0, n1, n2 and 1,000 more", id="many"),
    ],
)
def test_changed_nodes_in_words(names: list[str], text: str) -> None:
    assert nodes_in_words(names) == text


def test_text_output_names_classes_and_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text lists each changed class with its node count and each rollout step."""
    assert main(["diff", "--against", str(rolled_out(tmp_path, 0))]) == 0
    out = capsys.readouterr().out
    assert "changes across the fleet:" in out
    assert "decision sampler.top_k_top_p: flashinfer -> triton  3 of 14 nodes (21.4%)" in out
    assert "\n  1 node; changes on h100-sxm\n" in out  # below its summary: 80 columns
    assert "rollout sampler.top_k_top_p -> flashinfer at 0%:" in out
    assert "  0%: 0 nodes  (the policy)" in out
    assert "  100%: 3 nodes" in out
    assert "unchanged classes" in out


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        pytest.param("1,10,50,100", (1.0, 10.0, 50.0, 100.0), id="list"),
        pytest.param("0.5", (0.5,), id="one"),
        pytest.param("", None, id="empty"),
        pytest.param("10,x", None, id="not-a-number"),
        pytest.param("150", None, id="over-100"),
        pytest.param(",".join(["1"] * 17), None, id="too-many"),
    ],
)
def test_parse_steps(text: str, steps: tuple[float, ...] | None) -> None:
    """--steps takes percents 0-100, at most MAX_ROLLOUT_STEPS of them."""
    if steps is None:
        with pytest.raises(SettingsError):
            parse_steps(text)
    else:
        assert parse_steps(text) == steps


@pytest.mark.parametrize(
    ("words", "options"),
    [
        pytest.param(
            ["--a", "x", "--b=y", "--c"], {"--a": "x", "--b": "y", "--c": "(set)"}, id="forms"
        ),
        pytest.param(["--list", "p", "q"], {"--list": "p q"}, id="several-values"),
        pytest.param([], {}, id="none"),
    ],
)
def test_flag_options(words: list[str], options: dict[str, str]) -> None:
    """Flags are compared per option."""
    assert flag_options(words) == options


def test_diff_fleet_in_process() -> None:
    """The API: the same set twice over the fixtures changes nothing, one class per fixture."""
    policies: PolicySet = load_policies([ROOT / "policies"])
    result = diff_fleet(load_inventory(FIXTURES).nodes, policies, policies)
    assert (result.nodes, len(result.classes), result.changed) == (len(NAMES), len(NAMES), False)


@pytest.mark.parametrize(
    ("plus", "warned"),
    [
        pytest.param("", True, id="without-plus-replaces-the-pack"),
        pytest.param("+", False, id="with-plus-adds-to-it"),
    ],
)
def test_a_new_set_that_drops_features_is_said(
    plus: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """--against without + replaces the policies: a new set missing the current set's
    features (every node 'changes' to unset) gets a warning naming them and the + form."""
    assert main(["diff", "--against", plus + str(ROOT / "docs/rollout/step-50")]) == 0
    err = capsys.readouterr().err
    said = "kernelpolicy: warning: the new set has none of 18 features of the current one"
    assert (said in err) is warned
    assert ("+PATH adds to the bundled pack" in err) is warned
