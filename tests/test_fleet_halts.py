"""kernelpolicy diff --daemons shows a kernel halted on live daemons' nodes as what it is: halted
on N nodes (named), by which failure, and whether the new policies keep the halt (the daemon's
own rule); it decides with the halts, so a halted node is not a daemon that "disagrees". Two
real daemons, one halted by worker reports on its report socket."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.server.client import connect
from tests.halts_helpers import GUARD_TRIPS_WHY, GUARDED, OTHER, report_guard_trips
from tests.helpers import FIXTURES, GUARDED_GREEDY_POLICY, wait_until
from tests.serve_process import serve

FEATURE = GUARDED
OLD = GUARDED_GREEDY_POLICY


def _halted(address: str) -> dict[str, str]:
    with connect(address) as client:
        return dict(client.decisions(include_inputs=True).inputs.halted)


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[Path, list[str]]]:
    """Two daemons serving OLD on the CPU snapshot; the first one's workers tripped the
    planted kernel's guard twice (reported on its report socket), so it halted the kernel."""
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: sockets hold 107 bytes
    (root / "old").mkdir()
    (root / "old" / "p.toml").write_text(OLD)
    try:
        with (
            serve(root / "a", FIXTURES / "cpu.json", [root / "old"]) as a,
            serve(root / "b", FIXTURES / "cpu.json", [root / "old"]) as b,
        ):
            report_guard_trips(root / "a" / "kp.report.sock")
            wait_until(lambda: bool(_halted(a.address)), "the daemon did not halt")
            yield root, [a.address, b.address]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _diff(root: Path, new: str, capsys: Any, addresses: list[str], *extra: str) -> tuple[str, str]:
    (root / "new").mkdir(exist_ok=True)
    (root / "new" / "p.toml").write_text(new)
    code = main(["diff", "--policies", str(root / "old"), "--against", str(root / "new"),
                 "--daemons", ",".join(addresses), *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


CHANGES = [
    pytest.param(OLD + OTHER, True, [], id="another-feature-changes: the halt is kept"),
    pytest.param(OLD.replace("the aiter greedy bug", "aiter's greedy bug"), False,
                 [(FEATURE, "torch", "planted", "a")],
                 id="the-feature-changes: the halt lifts, the halted node changes back"),
]  # fmt: skip


@pytest.mark.parametrize(("new", "kept", "decisions"), CHANGES)
def test_a_halted_kernel_is_shown_as_halted(
    nodes: tuple[Path, list[str]],
    capsys: pytest.CaptureFixture[str],
    new: str,
    kept: bool,
    decisions: list[tuple[str, str, str, str]],
) -> None:
    """--json's ``halted`` names the kernel, its node and the failure; the halted node's class
    says so; no daemon disagrees; the decisions that change are those the daemons will make."""
    root, addresses = nodes
    out, err = _diff(root, new, capsys, addresses, "--json")
    document = json.loads(out)
    assert document["halted"] == [{
        "feature": FEATURE, "impl": "planted", "nodes": 1, "node_names": [addresses[0]],
        "kept_by_new_policies": kept,
        "reasons": [{"why": GUARD_TRIPS_WHY, "nodes": 1, "node_names": [addresses[0]]}],
    }]  # fmt: skip
    assert [w["code"] for w in document["warnings"]] == []
    assert "disagree" not in err
    summaries = {c["summary"] for c in document["classes"] if addresses[0] in c["changed_nodes"]}
    assert summaries == {f"none, torch 2.13.0+cpu; halted {FEATURE}/planted"}
    found = [
        (c["name"], c["old"], c["new"], "a" if c["node_names"] == [addresses[0]] else "?")
        for c in document["nodes_by_change"] if c["kind"] == "decision" and c["name"] == FEATURE
    ]  # fmt: skip
    assert found == decisions
    text, _ = _diff(root, new, capsys, addresses)
    fate = "keep" if kept else "lift (the feature's policy changes)"
    assert (f"  {FEATURE}/planted: halted on 1 of 2 nodes (50.0%); the new policies {fate} "
            "the halt") in text  # fmt: skip
    assert f"    {GUARD_TRIPS_WHY} ({addresses[0]})" in text
