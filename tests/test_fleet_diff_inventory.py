"""kernelpolicy diff's inventories (a directory of snapshots, or kubectl's nodes): a bad one is
one clear error naming the file or node (exit 2 on the command line), too many nodes are refused
before any is read, unlabelled nodes are skipped, and a node's identity is its label's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import InventoryError, PlatformFileError
from kernelpolicy.fleet import load_inventory
from kernelpolicy.labels import PREFIX
from tests.helpers import FIXTURES, ROOT


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


BAD_NUMBERS = {
    "count-superscript-two": ("gpu.count", "\u00b2"),
    "count-arabic-indic-three": ("gpu.count", "\u0663"),
    "count-5000-digits": ("gpu.count", "1" * 5000),
    "count-over-the-limit": ("gpu.count", "257"),
    "units-superscript-two": ("gpu.compute_units", "1\u00b2"),
    "units-5000-digits": ("gpu.compute_units", "1" * 5000),
    "units-a-word": ("gpu.compute_units", "many"),
}


@pytest.mark.parametrize(("label", "value"), BAD_NUMBERS.values(), ids=list(BAD_NUMBERS))
def test_a_label_that_is_no_number_names_the_node_and_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str, value: str
) -> None:
    """A count label that is not ASCII digits within its bound is one error naming the node and
    the label ('\u00b2'.isdigit() holds, int() refuses it; 5,000 digits are over int()'s limit:
    both were 'kernelpolicy: error: ValueError: ...', naming neither)."""
    labels = {f"{PREFIX}/gpu.vendor": "nvidia", f"{PREFIX}/gpu.count": "8",
              f"{PREFIX}/gpu.arch": "sm_90", f"{PREFIX}/{label}": value}  # fmt: skip
    path = tmp_path / "n.json"
    node = {"metadata": {"name": "gpu-7", "labels": labels}}
    path.write_text(json.dumps({"kind": "List", "items": [node]}))
    with pytest.raises(PlatformFileError, match=rf"items\[0\] \(gpu-7\): label {label}=") as info:
        load_inventory(path)
    assert "expected an integer 0.." in str(info.value)
    assert len(str(info.value)) < 300
    assert main(["diff", "--against", str(ROOT / "policies"), "--platforms", str(path)]) == 2
    err = capsys.readouterr().err
    assert "ValueError" not in err
    assert f"(gpu-7): label {label}=" in err
