"""kernelpolicy diff's one-line class summaries tell classes apart that differ only in an
operator's force (a settings override or a ``KERNELPOLICY_FORCE_*`` variable) or a switch the
policies read: kubectl nodes whose labels a real resolution wrote, diffed by the CLI over real
policy files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.labels import node_labels
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import FIXTURES

OLD = """
schema = "kernelpolicy.policy/v1"
[features."fleet.attn"]
description = "forced on some nodes"
fallback = "current"
in_process = false
[[features."fleet.attn".candidates]]
impl = "fastnv"
vendor = "nvidia"
switches = [{ env = "FLEET_FAST", unset = "auto", true = "on", false = "off" }]
[[features."fleet.attn".candidates]]
impl = "current"
[features."fleet.other"]
description = "what the change changes"
fallback = "current"
in_process = false
{better}[[features."fleet.other".candidates]]
impl = "current"
"""
NEW = OLD.replace("{better}", '[[features."fleet.other".candidates]]\nimpl = "better"\n')
BASE = "nvidia sm_90 NVIDIA-H100-80GB-HBM3 x8, driver 570.133.20, torch 2.9.1+cu128"


def _nodes(tmp_path: Path, kinds: list[tuple[dict[str, str], dict[str, str]]]) -> Path:
    """``kubectl get nodes -o json`` of one node per (overrides, env), labelled by its daemon."""
    policies = load_policy_text(OLD.replace("{better}", ""))
    items = []
    for number, (overrides, env) in enumerate(kinds):
        snapshot = json.loads((FIXTURES / "h100-sxm.json").read_text())
        platform = Platform.from_dict({**snapshot, "machine_id": f"{number:x}" * 32})
        resolution = resolve_policies(platform, env, policies, overrides=overrides)
        labels = node_labels(resolution)
        items.append({"kind": "Node", "metadata": {"name": f"n{number}", "labels": labels}})
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    return path


def _diff(tmp_path: Path, nodes: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    for name, text in (("old", OLD.replace("{better}", "")), ("new", NEW)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "p.toml").write_text(text)
    code = main(["diff", "--policies", str(tmp_path / "old"), "--against", str(tmp_path / "new"),
                 "--platforms", str(nodes), *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    ("kinds", "summaries"),
    [
        pytest.param([({}, {}), ({"fleet.attn": "current"}, {})],
                     [BASE, f"{BASE}; forced fleet.attn=current"], id="a-settings-override"),
        pytest.param([({}, {}), ({}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"})],
                     [BASE, f"{BASE}; forced fleet.attn=fastnv"], id="a-force-variable"),
        pytest.param([({}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"}),
                      ({}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "current"})],
                     [f"{BASE}; forced fleet.attn=fastnv", f"{BASE}; forced fleet.attn=current"],
                     id="two-forces"),
        pytest.param([({}, {}), ({}, {"FLEET_FAST": "0"})],
                     [BASE, f"{BASE}; FLEET_FAST=0"], id="a-switch-the-policies-read"),
        pytest.param([({}, {}), ({}, {})], [BASE], id="alike: one class"),
    ],
)  # fmt: skip
def test_classes_apart_by_a_force_say_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kinds: list[tuple[dict[str, str], dict[str, str]]],
    summaries: list[str],
) -> None:
    """Each class's summary names the force or switch that sets it apart, in --json and in the
    text (where every class changes, so each has its line)."""
    nodes = _nodes(tmp_path, kinds)
    document = json.loads(_diff(tmp_path, nodes, capsys, "--json"))
    assert [c["summary"] for c in document["classes"]] == summaries
    text = _diff(tmp_path, nodes, capsys)
    shown = [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in text.splitlines()
             if line.startswith("class ")]  # fmt: skip
    assert shown == summaries


@pytest.mark.parametrize(
    ("variable", "value", "shown"),
    [
        pytest.param("FLEET_FAST", "\x1b[2J\nclass x: fake", r"FLEET_FAST=\x1b[2J\nclass x: fake",
                     id="a-switch-with-an-escape-and-a-line-break"),
        pytest.param("KERNELPOLICY_FORCE_FLEET_ATTN", "cur\rrent",
                     r"forced fleet.attn=cur\rrent", id="a-force-with-a-carriage-return"),
        pytest.param("FLEET_FAST", "1" * 100, "FLEET_FAST=" + "1" * 60, id="a-long-value-cut"),
    ],
)  # fmt: skip
def test_a_nodes_values_reach_the_summary_escaped(variable: str, value: str, shown: str) -> None:
    """A value as an inventory or a daemon gave it is cut and escaped in the summary: no line
    break or terminal escape reaches diff's output (one came through raw)."""
    from kernelpolicy.fleet.classes import summary

    snapshot = json.loads((FIXTURES / "h100-sxm.json").read_text())
    platform = Platform.from_dict({**snapshot, "env": {variable: value}})
    text = summary(platform, ["fleet.attn"], ["FLEET_FAST"])
    assert shown in text
    assert text.isprintable()


def test_a_saved_getplatform_answer_is_in_its_nodes_class() -> None:
    """A GetPlatform answer saved and given as a --platforms snapshot carries its daemon's
    instance beside the document; two copies from two daemons are one class, as the snapshot."""
    from kernelpolicy.fleet.classes import class_key

    snapshot = json.loads((FIXTURES / "h100-sxm.json").read_text())
    keys = {
        class_key(Platform.from_dict({**snapshot, "daemon": {"instance": i, "host": "h"}}))
        for i in ("0123456789abcdef", "fedcba9876543210")
    }
    assert keys == {class_key(Platform.from_dict(snapshot))}
