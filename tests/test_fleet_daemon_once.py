"""kernelpolicy diff --daemons counts each daemon once in its rollout progress, by the instance the
daemon draws at its start (``GetPlatform``'s ``daemon``), not by its addresses: one daemon given
by its TCP port and its unix socket is one daemon, named with both addresses, while two daemons
of one host (here of one process, as an embedding or the tests run them) stay two. The
inventory's duplicates grouped those too, which is why counting by them was reverted."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.fleet.result import Running, Runs, daemons_once
from kernelpolicy.policy.loader import policy_digest, read_policy_sources
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

OLD, NEW = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"
BROKEN = 'schema = "kernelpolicy.policy/v1"\n[features."fleet.example"\n'  # not TOML


@pytest.fixture(scope="module")
def addresses() -> Iterator[dict[str, str]]:
    """Two daemons in this process, on one host: ``a`` on TCP and on a unix socket, whose
    reload to step-50 failed (it runs step-0, failing); ``b`` on TCP, reloaded to step-50."""
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short: sockets hold 107 bytes
    try:
        with ExitStack() as stack:
            found = {}
            for name, text in (("a", BROKEN), ("b", (NEW / "fleet-example.toml").read_text())):
                policies = root / name / "policies"
                shutil.copytree(OLD, policies)
                listen = ["127.0.0.1:0"] + ([f"unix:{root}/a/kp.sock"] if name == "a" else [])
                running = stack.enter_context(running_daemon(
                    fixture("h200"), [ROOT / "policies", policies], listen=listen, watch=False,
                ))  # fmt: skip
                (policies / "fleet-example.toml").write_text(text)
                running.call(running.daemon.reload("test"))
                found[name] = running.daemon.bound[0]
                if name == "a":
                    found["a-unix"] = running.daemon.bound[1]
            yield found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _diff(capsys: pytest.CaptureFixture[str], given: list[str], *extra: str) -> str:
    code = main(["diff", "--policies", f"+{OLD}", "--against", f"+{NEW}", "--steps", "50",
                 "--daemons", ",".join(given), *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    ("given", "counts", "daemons"),
    [
        pytest.param(["a", "a-unix", "b"], (2, 1, 1, 1), [["a", "a-unix"], ["b"]],
                     id="one-daemon-by-two-addresses-beside-another: two daemons"),
        pytest.param(["a-unix", "a"], (1, 1, 0, 1), [["a-unix", "a"]],
                     id="one-daemon-by-two-addresses: one daemon, named by both"),
        pytest.param(["a", "b"], (2, 1, 1, 1), [["a"], ["b"]],
                     id="two-daemons-of-one-host-and-process: two"),
    ],
)  # fmt: skip
def test_rollout_progress_counts_each_daemon_once(
    addresses: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    given: list[str],
    counts: tuple[int, int, int, int],
    daemons: list[list[str]],
) -> None:
    """--json's policy_progress (daemons, --policies, --against, failing), daemon_policies (one
    entry a daemon, with every address) and the reload-failed warning count daemons, by the
    instance each publishes (one a daemon, its own even in a process of several)."""
    named = [[addresses[name] for name in group] for group in daemons]
    document = json.loads(_diff(capsys, [addresses[name] for name in given], "--json"))
    progress = document["policy_progress"]
    found = (progress["daemons"], progress["policies"], progress["against"], progress["failing"])
    assert found == counts
    assert [d["addresses"] for d in document["daemon_policies"]] == named
    assert [d["address"] for d in document["daemon_policies"]] == [g[0] for g in named]
    (failed,) = [w for w in document["warnings"] if w["code"] == "reload-failed"]
    assert (failed["nodes"], failed["node_names"]) == (1, [named[0][0]])
    published = {d["address"]: (d["host"], d["instance"]) for d in document["daemons"]}
    assert len(set(published.values())) == len(named)
    assert len({host for host, _ in published.values()}) == 1


def test_the_text_counts_daemons_and_names_their_addresses(
    addresses: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The progress line counts two daemons of three addresses; the failing daemon's line
    names its other address; the answered line counts instances, then addresses."""
    a, a_unix, b = (addresses[name] for name in ("a", "a-unix", "b"))
    text = _diff(capsys, [a, a_unix, b])
    assert "rollout progress: 1 of 2 daemons run --policies, 1 run --against, 0 other, " in text
    assert f"\n  {a} (also {a_unix}): runs --policies; last reload failed: " in text
    assert "answered: 2 daemon instances on 1 host (3 addresses)\n" in text


def _running(name: str) -> Running:
    sources = read_policy_sources([ROOT / "policies", OLD if name == "old" else NEW])
    return Running(policy_digest(sources), None)


@pytest.mark.parametrize(
    ("running", "instances", "expected"),
    [
        pytest.param([("x", "old"), ("y", "old")], {"x": "h/01", "y": "h/01"}, [("x", "y")],
                     id="one-instance-two-addresses: one"),
        pytest.param([("x", "old"), ("y", "old")], {"x": "h/01", "y": "h/02"}, [("x",), ("y",)],
                     id="two-instances-one-host: two"),
        pytest.param([("x", "old"), ("y", "old")], {}, [("x",), ("y",)],
                     id="daemons-of-before: one an address"),
        pytest.param([("x", "old"), ("y", "new"), ("z", "old")], {"x": "h/01", "z": "h/01"},
                     [("x", "z"), ("y",)], id="in-inventory-order: by first address"),
        pytest.param([("address y", "old"), ("y", "old")], {"address y": "address y"},
                     [("address y",), ("y",)],
                     id="an-instance-named-like-an-address: still apart"),
    ],
)  # fmt: skip
def test_daemons_once(
    running: list[tuple[str, str]], instances: dict[str, str], expected: list[tuple[str, ...]]
) -> None:
    """The API under the counts: addresses of one instance are one daemon, said by the first;
    nothing else is grouped."""
    said: Any = [(address, _running(name)) for address, name in running]
    digests = (_running("old").digest, _running("new").digest)
    found = daemons_once(said, instances, digests)
    assert [d.addresses for d in found] == expected
    assert [d.address for d in found] == [group[0] for group in expected]
    runs = dict(running)
    assert [d.runs for d in found] == [
        Runs.POLICIES if runs[group[0]] == "old" else Runs.AGAINST for group in expected
    ]
