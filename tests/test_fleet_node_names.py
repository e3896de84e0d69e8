"""Node names reach diff's lines only as Kubernetes allows them (review: a name from kubectl's
JSON was kept raw, cut to 253 characters, and printed in the labels-disagree warning, so a node
named ``a\\x1b]0;x\\x07`` retitled the terminal of whoever ran the diff). A Node's name must be
a DNS-1123 subdomain, as the API server requires of every Node; a snapshot's file name, which
is no Kubernetes name, is escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import InventoryError
from kernelpolicy.fleet import load_inventory
from kernelpolicy.labels import PREFIX, label_name, node_labels
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import FIXTURES

POLICY = """schema = "kernelpolicy.policy/v1"
[features."fleet.attn"]
description = "fastnv on NVIDIA"
fallback = "current"
in_process = false
[[features."fleet.attn".candidates]]
impl = "fastnv"
vendor = "nvidia"
[[features."fleet.attn".candidates]]
impl = "current"
"""
HOSTILE = "a\x1b]0;x\x07"  # sets the terminal's title


def _stale_labels() -> dict[str, str]:
    """A CPU node's labels that say ``slownv``, which no policy here decides: a node with
    them is named in the labels-disagree warning."""
    platform = load_platform(FIXTURES / "cpu.json")
    labels = node_labels(resolve_policies(platform, platform.env, load_policy_text(POLICY)))
    return labels | {f"{PREFIX}/{label_name('impl.fleet.attn')}": "slownv"}


def _nodes(tmp_path: Path, *names: str) -> Path:
    items = [{"metadata": {"name": name, "labels": _stale_labels()}} for name in names]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": items}))
    return path


def _diff(tmp_path: Path, platforms: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``diff --policies P --against P --platforms PLATFORMS``: its code, stdout then stderr."""
    (tmp_path / "p").mkdir(exist_ok=True)
    (tmp_path / "p" / "p.toml").write_text(POLICY)
    policies = str(tmp_path / "p")
    code = main(["diff", "--policies", policies, "--against", policies,
                 "--platforms", str(platforms)])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out + err


def test_a_node_name_with_an_escape_sequence_never_reaches_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inventory is refused in one line that shows the name escaped; no ESC or BEL byte
    is printed. Before, the name went raw into the labels-disagree warning."""
    code, printed = _diff(tmp_path, _nodes(tmp_path, "ok-1", HOSTILE), capsys)
    assert code == 2, printed
    assert "\x1b" not in printed
    assert "\x07" not in printed
    assert r"node name 'a\x1b]0;x\x07' is not a DNS-1123 subdomain" in printed


NAMES = {
    "plain": ("gpu-7", True),
    "dotted": ("node-1.eu-west-1.compute.internal", True),
    "digits first": ("10-0-0-1", True),
    "253 characters": ("a" * 253, True),
    "a part over 63 characters": ("a" * 64 + ".b", True),  # Kubernetes allows it in a name
    "an escape sequence": (HOSTILE, False),
    "a line break": ("a\nb", False),
    "upper case": ("Gpu-7", False),
    "an underscore": ("gpu_7", False),
    "a leading dash": ("-gpu", False),
    "a trailing dot": ("gpu.", False),
    "two dots": ("a..b", False),
    "254 characters": ("a" * 254, False),
    "a right-to-left override": ("gpu\u202e7", False),
    "a number": (7, False),
}


@pytest.mark.parametrize(("name", "kept"), NAMES.values(), ids=list(NAMES))
def test_node_names_are_dns_1123_subdomains(tmp_path: Path, name: object, kept: bool) -> None:
    """A Node named as Kubernetes names Nodes is read under its name; any other name is an
    InventoryError naming the node's place in the list and its name, escaped and cut."""
    path = _nodes(tmp_path, name)  # type: ignore[arg-type]
    if kept:
        assert [node.name for node in load_inventory(path).nodes] == [name]
        return
    with pytest.raises(InventoryError, match=r"items\[0\]: node name .* DNS-1123") as info:
        load_inventory(path)
    message = str(info.value)
    assert message.isprintable()
    assert len(message) < 400


def test_a_snapshot_file_name_is_escaped(tmp_path: Path) -> None:
    """A directory's snapshot named with an escape sequence is the node of that name, escaped
    (a file name is the operator's own, not Kubernetes'; it is shown, never sent)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / f"{HOSTILE}.json").write_bytes((FIXTURES / "cpu.json").read_bytes())
    (node,) = load_inventory(tmp_path / "d").nodes
    assert node.name == r"a\x1b]0;x\x07"
