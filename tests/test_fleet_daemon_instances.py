"""kernelpolicy diff --daemons tells daemons apart by their instance (a random ID per daemon
start and the host name, published beside GetPlatform's snapshot): two real daemons started
from one ``--platform`` file are two nodes, named with their host; one daemon given by two
addresses is one instance, said as such."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.fleet.daemons import instance_of
from kernelpolicy.server.client import connect
from tests.helpers import FIXTURES, ROOT
from tests.serve_process import serve

OLD, NEW = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"


@pytest.fixture(scope="module")
def twins() -> Iterator[list[str]]:
    """Two ``kernelpolicy serve --platform h200.json`` processes: one snapshot file, two
    daemons (as on a node whose daemon was started twice, or two nodes given one file)."""
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: sockets hold 107 bytes
    try:
        with (
            serve(root / "a", FIXTURES / "h200.json", [ROOT / "policies", OLD]) as a,
            serve(root / "b", FIXTURES / "h200.json", [ROOT / "policies", OLD]) as b,
        ):
            yield [a.address, b.address]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _diff(capsys: pytest.CaptureFixture[str], addresses: list[str], *extra: str) -> tuple[str, str]:
    code = main(["diff", "--policies", f"+{OLD}", "--against", f"+{NEW}", "--daemons",
                 ",".join(addresses), *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def _published(address: str) -> dict[str, Any]:
    with connect(address) as client:
        published = json.loads(client.platform_json())["daemon"]
    assert isinstance(published, dict)
    return published


@pytest.mark.parametrize(
    ("given", "nodes", "instances", "same_daemon"),
    [
        pytest.param([0, 1], 2, 2, [], id="two-daemons-one-platform-file: two nodes"),
        pytest.param([0, "0-again"], 2, 1, [0, "0-again"],
                     id="one-daemon-by-two-addresses: one instance, said"),
        pytest.param([0], 1, 1, [], id="one-daemon"),
    ],
)  # fmt: skip
def test_daemons_are_told_apart_by_instance(
    twins: list[str],
    capsys: pytest.CaptureFixture[str],
    given: list[int | str],
    nodes: int,
    instances: int,
    same_daemon: list[int | str],
) -> None:
    """--json names each daemon's host and instance; only addresses of one instance are one
    daemon (two daemons of one snapshot file were one node before); the text counts them, one
    daemon given by two addresses once (it said 2 instances, 2 daemons on its host)."""
    again = twins[0].replace("/kp.sock", "/./kp.sock")  # another address of daemon 0
    addresses = [again if g == "0-again" else twins[int(g)] for g in given]
    out, err = _diff(capsys, addresses, "--json")
    document = json.loads(out)
    published = {a: _published(a) for a in addresses}
    assert document["nodes"] == nodes
    assert document["daemons"] == [{"address": a, **published[a]} for a in addresses]
    assert len({p["instance"] for p in published.values()}) == instances
    warned = [w for w in document["warnings"] if w["code"] == "same-daemon"]
    expected = [again if g == "0-again" else twins[int(g)] for g in same_daemon]
    assert [w["node_names"] for w in warned] == ([expected] if expected else [])
    if expected:
        host, instance = published[twins[0]]["host"], published[twins[0]]["instance"]
        assert f"one daemon, instance {host}/{instance}" in err
    text, _ = _diff(capsys, addresses)
    host = published[addresses[0]]["host"]
    counted = "1 daemon instance" if instances == 1 else f"{instances} daemon instances"
    shown = f" ({len(addresses)} addresses)" if len(addresses) != instances else ""
    assert f"answered: {counted} on 1 host{shown}\n" in text  # one daemon once
    assert (f"  {host}: 2 daemons" in text) is (instances == 2)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"instance": "0123abcd", "host": "gpu-7"}, "gpu-7/0123abcd", id="valid"),
        pytest.param({"instance": "0123abcd", "host": "a\nb"}, "a\\nb/0123abcd",
                     id="host-escaped"),
        pytest.param({"instance": "0123abcd"}, "?/0123abcd", id="no-host"),
        pytest.param({"instance": "XYZ", "host": "h"}, None, id="not-hex"),
        pytest.param({"instance": "a" * 65, "host": "h"}, None, id="too-long"),
        pytest.param({"host": "h"}, None, id="no-instance"),
        pytest.param("0123abcd", None, id="not-an-object"),
        pytest.param(None, None, id="a-daemon-of-before"),
    ],
)  # fmt: skip
def test_instance_of(value: object, expected: str | None) -> None:
    """A published instance is read as HOST/ID; anything else is no instance (the daemon is
    then told apart by its snapshot, as before)."""
    assert instance_of(value) == expected
