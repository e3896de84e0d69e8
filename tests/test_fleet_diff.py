"""kernelpolicy diff: inventories (snapshots, kubectl nodes), classes, changes, rollout steps."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.cli import main
from kernelpolicy.cli.diff_cmd import nodes_in_words, parse_steps
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import InventoryError, PlatformFileError, SettingsError
from kernelpolicy.fleet import diff_fleet, load_inventory, platform_from_labels
from kernelpolicy.fleet.diff import flag_options
from kernelpolicy.labels import PREFIX, node_labels, render_nfd
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policies, load_policy_text
from tests.helpers import FIXTURES, ROOT, bundled

NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def rolled_out(tmp_path: Path, percent: float = 50) -> Path:
    """The bundled pack with the FlashInfer sampler rolled out to ``percent``."""
    new = tmp_path / "new"
    new.mkdir()
    for path in sorted((ROOT / "policies").glob("*.toml")):
        text = path.read_text()
        if path.name == "10-sampler.toml":
            text = text.replace(
                'impl = "flashinfer"\n',
                f'impl = "flashinfer"\nrollout = {{ percent = {percent} }}\n',
                1,
            )
        (new / path.name).write_text(text)
    return new


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


@pytest.mark.parametrize("switches", [
    pytest.param({}, id="plain"),
    pytest.param({"VLLM_ROCM_USE_AITER": "1"}, id="aiter-on"),  # amd-aiter's version is read
])  # fmt: skip
@pytest.mark.parametrize("name", NAMES)
def test_labels_carry_every_fact_a_decision_reads(name: str, switches: dict[str, str]) -> None:
    """A node rebuilt from its labels gets the same decisions and engine settings as its
    snapshot, and its labels are valid Kubernetes labels."""
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / f"{name}.json").read_text()), "machine_id": "ab" * 16}
    )
    env = {**platform.env, "VLLM_USE_FLASHINFER_SAMPLER": "0", **switches}
    original = resolve_policies(platform, env, bundled())
    labels = node_labels(original)
    render_nfd(labels)
    rebuilt = platform_from_labels(labels)
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, bundled())
    assert {f: (d.impl, d.error_code) for f, d in again.decisions.items()} == {
        f: (d.impl, d.error_code) for f, d in original.decisions.items()
    }
    assert rebuilt.identity == platform.identity
    for engine in ("vllm", "sglang"):
        before, after = (
            engine_settings(original, engine, env),
            engine_settings(again, engine, rebuilt.env),
        )
        assert (after.env, after.flags) == (before.env, before.flags)


def test_an_aiter_dev_build_decides_the_same_from_its_labels() -> None:
    """The MI355X fixture's amd-aiter 0.1.16.post3.dev0+g1a2b3c4 with aiter on: rebuilt from
    its labels (what ``diff --platforms nodes.json`` reads), it keeps the version and aiter."""
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / "mi355x.json").read_text()), "machine_id": "ab" * 16}
    )
    original = resolve_policies(platform, {"VLLM_ROCM_USE_AITER": "1"}, bundled())
    rebuilt = platform_from_labels(node_labels(original))
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, bundled())
    assert rebuilt.libraries["amd-aiter"] == "0.1.16.post3.dev0+g1a2b3c4"
    decided = (
        original.decision("sampler.top_k_top_p").impl,
        again.decision("sampler.top_k_top_p").impl,
    )
    assert decided == ("aiter", "aiter")


STAGED = """
schema = "kernelpolicy.policy/v1"
[features."fleet.attn"]
description = "staged"
fallback = "current"
in_process = false
[[features."fleet.attn".candidates]]
impl = "fastnv"
vendor = "nvidia"
rollout = { percent = 10 }
[[features."fleet.attn".candidates]]
impl = "slownv"
vendor = "nvidia"
[[features."fleet.attn".candidates]]
impl = "current"
"""


@pytest.mark.parametrize(
    ("overrides", "env", "impl"),
    [
        pytest.param({}, {}, "slownv", id="none"),
        pytest.param({"fleet.attn": "fastnv"}, {}, "fastnv", id="settings-override"),
        pytest.param({}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"}, "fastnv", id="variable"),
        pytest.param({"fleet.attn": "current"}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"},
                     "fastnv", id="the-variable-wins"),
        pytest.param({"fleet.attn": "nope"}, {}, None, id="unknown-override"),
        pytest.param({"no.such": "x"}, {}, "slownv", id="override-of-no-feature"),
    ],
)  # fmt: skip
def test_labels_carry_the_forces_a_node_decides_with(
    overrides: dict[str, str], env: dict[str, str], impl: str | None
) -> None:
    """A node forced through settings (KERNELPOLICY_OVERRIDES) or a variable: rebuilt from its
    labels, it decides as it did (a settings override is labelled as its force variable)."""
    policies = load_policy_text(STAGED)
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / "h100-sxm.json").read_text()), "machine_id": "cd" * 16}
    )
    original = resolve_policies(platform, env, policies, overrides=overrides)
    labels = node_labels(original)
    rebuilt = platform_from_labels(labels)
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, policies)
    decided = [(r.decision("fleet.attn").impl, r.decision("fleet.attn").error_code)
               for r in (original, again)]  # fmt: skip
    assert decided[0] == decided[1]
    assert decided[0][0] == impl
    assert not any("NO_SUCH" in key for key in labels)


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
            assert f"changes on {nodes_in_words(cls['changed_nodes'])})" in out


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
    assert "(1 node; changes on h100-sxm)" in out
    assert "rollout sampler.top_k_top_p -> flashinfer at 0%:" in out
    assert "  0%: 0 nodes  (the policy)" in out
    assert "  100%: 3 nodes" in out
    assert "unchanged classes" in out


def bad(tmp_path: Path, kind: str) -> Path:
    if kind == "bad-snapshot":
        shutil.copytree(FIXTURES, tmp_path / "d")
        (tmp_path / "d/zz-broken.json").write_text('{"schema": "kernelpolicy.platform/v1"}')
        return tmp_path / "d"
    path = tmp_path / "x.json"
    texts: dict[str, Any] = {
        "empty-dir": None,
        "not-json": "{nope",
        "neither": json.dumps({"hello": 1}),
        "no-items": json.dumps({"kind": "List"}),
        "not-a-node": json.dumps({"kind": "List", "items": [3]}),
        "bad-count": json.dumps({"kind": "List", "items": [{"metadata": {"name": "g", "labels": {
            f"{PREFIX}/gpu.vendor": "nvidia", f"{PREFIX}/gpu.count": "many"}}}]}),
    }  # fmt: skip
    if texts[kind] is None:
        (tmp_path / "e").mkdir()
        return tmp_path / "e"
    path.write_text(texts[kind])
    return path


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        pytest.param("bad-snapshot", PlatformFileError, "zz-broken.json", id="bad-snapshot"),
        pytest.param("empty-dir", InventoryError, "no \\*.json snapshots", id="empty-dir"),
        pytest.param("not-json", InventoryError, "x.json", id="not-json"),
        pytest.param("neither", InventoryError, "kubectl get nodes", id="neither"),
        pytest.param("no-items", InventoryError, "items", id="no-items"),
        pytest.param("not-a-node", InventoryError, "not a Node object", id="not-a-node"),
        pytest.param("bad-count", PlatformFileError, "gpu.count", id="bad-count"),
    ],
)
def test_bad_inventory_is_one_clear_error(
    tmp_path: Path, kind: str, error: type[Exception], message: str
) -> None:
    """Each bad inventory raises one KernelPolicyError naming the file or node."""
    with pytest.raises(error, match=message):
        load_inventory(bad(tmp_path, kind))


def test_bad_inventory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the command line a bad snapshot is one line naming it, exit 2."""
    argv = [
        "diff",
        "--against",
        str(ROOT / "policies"),
        "--platforms",
        str(bad(tmp_path, "bad-snapshot")),
    ]
    assert main(argv) == 2
    assert "zz-broken.json" in capsys.readouterr().err


def test_too_many_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over MAX_INVENTORY_NODES nodes is refused before any is read."""
    import kernelpolicy.fleet.inventory as module

    monkeypatch.setattr(module, "MAX_INVENTORY_NODES", 3)
    with pytest.raises(InventoryError, match="MAX_INVENTORY_NODES"):
        load_inventory(FIXTURES)


def test_nodes_without_labels_are_skipped(tmp_path: Path) -> None:
    """A Node kernelpolicy never labelled is skipped and named, not guessed at."""
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": [{"metadata": {"name": "cpu-1"}}]}))
    found = load_inventory(path)
    assert (found.nodes, found.skipped) == ((), ("cpu-1",))


IDENTITIES = [
    pytest.param("cda9f4ad802221e153fb5fcc18229d05", "cda9f4ad802221e153fb5fcc18229d05",
                 id="the label's identity"),
    pytest.param(None, None, id="no label: none, as its daemon had none"),
    pytest.param("not-an-identity", None, id="a malformed label: none"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "identity"), IDENTITIES)
def test_kubectl_identity_is_the_labels(
    tmp_path: Path, label: str | None, identity: str | None
) -> None:
    """A node's identity is its node.identity label, never status.nodeInfo.machineID: a node
    labelled without one was probed without a machine ID or GPU UUIDs, its daemon put it in no
    partial rollout, and the diff must predict that (it counted such a node in before)."""
    labels = {f"{PREFIX}/gpu.vendor": "none", f"{PREFIX}/gpu.count": "0"}
    if label is not None:
        labels[f"{PREFIX}/node.identity"] = label
    item = {
        "metadata": {"name": "a", "labels": labels},
        "status": {"nodeInfo": {"machineID": "5a2b" * 8}},
    }
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"kind": "List", "items": [item]}))
    (node,) = load_inventory(path).nodes
    assert node.identity == identity


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
