"""The loop closed on the node, with real processes: two daemons (two nodes) on unix sockets,
workers that trip a kernel's output guard through one of them, the halt on that node only (its
answers, /metrics, labels, status), ``status --clear-halt``; reports from another user refused;
run-time failures halting through an in-process resolve(); readiness while a reload fails."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.server.reports import Rejection, report_socket_path
from kernelpolicy.testing.daemon import running_daemon
from tests.forks_helpers import Forks
from tests.halts_helpers import GUARDED, report_guard_trips
from tests.helpers import (
    FIXTURES,
    GUARDED_GREEDY_POLICY,
    ROOT,
    fixture,
    promtool_check_metrics,
    wait_until,
)
from tests.http_helpers import call
from tests.serve_process import serve, serve_env

FEATURE = GUARDED
POLICY = GUARDED_GREEDY_POLICY
FAILING = """schema = "kernelpolicy.policy/v1"
[features."sampler.top_k_top_p"]
description = "a kernel that fails when called"
fallback = "torch"
[[features."sampler.top_k_top_p".candidates]]
impl = "planted"
entry = "kernelpolicy.testing.buggy_kernels:sampler_fails_when_called"
halt_on = { runtime_failures = 1 }
[[features."sampler.top_k_top_p".candidates]]
impl = "torch"
"""


@dataclass
class Node:
    """A ``kernelpolicy serve`` process: its socket, HTTP URL, labels and log."""

    process: subprocess.Popen[bytes]
    address: str
    url: str
    labels: Path

    def metric(self, name: str, **labels: str) -> float | None:
        text = call(self.url, "GET", "/metrics").body.decode()
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    def label_file(self) -> str:
        return (self.labels / "kernelpolicy").read_text()


@contextmanager
def start_node(root: Path, name: str, policies: Path) -> Iterator[Node]:
    """A node serving ``policies`` on the CPU snapshot, writing its labels to ``name``/labels."""
    home = root / name
    (home / "labels").mkdir(parents=True)
    extra = ["--labels-dir", str(home / "labels")]
    with serve(home, FIXTURES / "cpu.json", [policies], extra_args=extra) as served:
        yield Node(served.process, served.address, served.url, home / "labels")


@pytest.fixture
def nodes() -> Iterator[tuple[Node, Node]]:
    # Short paths: a unix socket's path holds at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    (root / "policies").mkdir()
    (root / "policies" / "greedy.toml").write_text(POLICY)
    try:
        with (
            start_node(root, "a", root / "policies") as a,
            start_node(root, "b", root / "policies") as b,
        ):
            yield a, b
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Forks]:
    """Where the workers are forked from: an interpreter that has imported torch (about 2 s of
    CPU a worker, of its 2.5), and not kernelpolicy (tests/forks_helpers.py)."""
    forks = Forks(sys.executable, ["torch"], serve_env(), tmp_path)
    yield forks
    forks.close()


def worker(workers: Forks, node: Node, rows: int) -> dict[str, Any]:
    """``python -m tests.halt_worker ADDRESS ROWS``: a worker process of its own."""
    env = serve_env() | {"KERNELPOLICY_LOG_FORMAT": "off"}
    done = workers.module("tests.halt_worker", [node.address, str(rows)], env, ROOT)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def status(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "status", "--address", node.address, *args],
        capture_output=True, text=True, timeout=60, check=False, env=serve_env(), cwd=ROOT,
    )  # fmt: skip


def test_guard_trips_halt_the_kernel_on_that_node_only(
    nodes: tuple[Node, Node], workers: Forks
) -> None:
    """Workers on node a trip the guard twice (the policy's halt_on): a resolves without the
    kernel, says so in status, /metrics and its labels; b keeps it; --clear-halt lifts it."""
    a, b = nodes
    first = worker(workers, a, 1)
    assert (first["impl"], first["ids"], first["delivered"]) == ("planted", [0], True)
    wait_until(lambda: a.metric("kernelpolicy_worker_events_total", kind="guard_trip") == 1.0)
    assert a.metric("kernelpolicy_halted", feature=FEATURE, impl="planted") == 0.0
    worker(workers, a, 1)  # the second trip reaches guard_trips = 2
    wait_until(lambda: worker(workers, a, 0)["impl"] == "torch")
    assert worker(workers, b, 0)["impl"] == "planted"  # the other node is untouched
    assert a.metric("kernelpolicy_halted", feature=FEATURE, impl="planted") == 1.0
    assert a.metric("kernelpolicy_halts_total", feature=FEATURE, impl="planted") == 1.0
    assert a.metric("kernelpolicy_worker_events_total", kind="served", impl="planted") == 2.0
    assert b.metric("kernelpolicy_halted", feature=FEATURE, impl="planted") == 0.0
    promtool_check_metrics(call(a.url, "GET", "/metrics").body.decode())
    prefix = "kernelpolicy.feature.node.kubernetes.io"
    assert f"{prefix}/halted.sampler.greedy.planted=true" in a.label_file()
    assert f"{prefix}/impl.sampler.greedy=torch" in a.label_file()
    assert "halted." not in b.label_file()
    report = json.loads(status(a, "--json").stdout)
    assert "halt_on.guard_trips = 2" in report["halted"][FEATURE]["planted"]
    assert "HALTED: sampler.greedy/planted" in status(a).stdout
    cleared = status(a, "--clear-halt", FEATURE)
    assert (cleared.returncode, cleared.stdout.strip()) == (
        0, f"{a.address}: cleared sampler.greedy/planted",
    )  # fmt: skip
    assert worker(workers, a, 0)["impl"] == "planted"  # answered once the daemon resolved again
    assert "halted." not in a.label_file()
    assert a.metric("kernelpolicy_halted", feature=FEATURE, impl="planted") == 0.0
    again = status(a, "--clear-halt", FEATURE)  # nothing halted any more
    assert (again.returncode, again.stdout.strip()) == (0, f"{a.address}: {FEATURE}: not halted")
    unknown = status(a, "--clear-halt", "no.such")
    assert unknown.returncode == 2
    assert "unknown feature 'no.such'" in unknown.stderr
    log = (a.labels.parent / "log").read_text()
    assert '"event": "kernelpolicy.halt"' in log
    assert log.count('"event": "kernelpolicy.halt.cleared"') == 1  # not for "not halted"


def _report_as(uid: int, path: Path, line: bytes) -> int:
    """Send ``line`` to ``path`` from a child process running as ``uid``; its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, then speak
        try:
            os.setgid(uid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(str(path))
        except BaseException:
            os._exit(3)  # could not even connect
        try:
            sock.sendall(line)
            sock.recv(1)  # until the daemon closes the connection
        except OSError:
            pass  # the daemon hung up first (a refused peer): as expected
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_a_report_from_another_user_is_refused(tmp_path: Path) -> None:
    """Even where the operator opened the report socket to everyone (mode 0666), a process of
    another user is refused by its peer credentials: counted, and no kernel halted."""
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    directory.chmod(0o755)
    (tmp_path / "p.toml").write_text(POLICY)
    trips = json.dumps({"events": [{"kind": "guard_trip", "feature": FEATURE, "impl": "planted",
                                    "count": 5}]}).encode() + b"\n"  # fmt: skip
    try:
        with running_daemon(
            fixture("cpu"), [tmp_path / "p.toml"], listen=[f"unix:{directory}/kp.sock"],
            watch=False,
        ) as running:  # fmt: skip
            report = report_socket_path(directory / "kp.sock")
            report.chmod(0o666)
            assert _report_as(65534, report, trips) == 0  # connected, then closed unread
            assert running.daemon.state.halts.rejected[Rejection.PEER_UID] == 1
            assert running.daemon.state.halts.inputs() == {}
            assert _report_as(0, report, trips + b'{"clear_halt": "nope"}\n') == 0  # root may
            assert running.daemon.state.halts.inputs() == {
                f"{FEATURE}/planted": "its output guard repaired 5 output(s) in this node's "
                "workers (halt_on.guard_trips = 2)"
            }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_runtime_failures_halt_through_an_in_process_resolve(tmp_path: Path) -> None:
    """A worker using kernelpolicy.resolve() with KERNELPOLICY_SOCKET: a kernel failing at call
    time falls back in the worker and, at runtime_failures = 1, is halted on the node."""
    import torch

    from kernelpolicy.api import resolve

    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    (tmp_path / "p.toml").write_text(FAILING)
    feature = "sampler.top_k_top_p"
    try:
        with running_daemon(
            fixture("cpu"), [tmp_path / "p.toml"], listen=[f"unix:{directory}/kp.sock"],
            watch=False,
        ) as running:  # fmt: skip
            env = {"KERNELPOLICY_SOCKET": f"unix:{directory}/kp.sock", "KERNELPOLICY_LOG_FORMAT":
                   "off", "KERNELPOLICY_POLICY_PATHS": str(tmp_path / "p.toml")}  # fmt: skip
            resolution = resolve(fixture("cpu"), env=env)
            assert resolution.reporter is not None
            kernel = resolution.impl(feature)
            assert kernel(torch.randn(2, 50), torch.full((2,), 5), None).shape == (2,)
            assert resolution.decision(feature).impl == "torch"  # fell back in the worker
            assert resolution.reporter.flush(30.0) is True
            state = running.daemon.state
            wait_until(lambda: state.snapshot.resolution.decision(feature).impl == "torch")
            halted = state.halts.inputs()[f"{feature}/planted"]
            assert "halt_on.runtime_failures = 1" in halted
            assert "PassManager::run failed (planted)" in halted
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize(
    ("option", "expected"),
    [pytest.param(False, 200, id="default-ready"), pytest.param(True, 503, id="requires-current")],
)
def test_readiness_while_a_reload_fails(tmp_path: Path, option: bool, expected: int) -> None:
    """By default /readyz stays 200 on a failed reload (the last good set serves); with
    --ready-requires-current-policy it is 503 saying why, and 200 again once fixed."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "greedy.toml").write_text(POLICY)
    with running_daemon(
        fixture("cpu"), [policies], watch=False, http="127.0.0.1:0",
        ready_requires_current_policy=option,
    ) as running:  # fmt: skip
        url = running.daemon.fleet.url
        assert call(url, "GET", "/readyz").status == 200
        (policies / "bad.toml").write_text("schema = 1\n")
        running.call(running.daemon.reload())
        assert running.daemon.state.snapshot.policy_error is not None
        reply = call(url, "GET", "/readyz")
        assert reply.status == expected
        if option:
            assert reply.json()["why"].startswith("serving stale policies: the last reload failed")
        (policies / "bad.toml").unlink()
        running.call(running.daemon.reload())
        assert call(url, "GET", "/readyz").status == 200


def test_a_halt_reaches_the_nodes_in_process_workers(tmp_path: Path) -> None:
    """The daemon's halts file: a worker's resolve() on the node (and explain there) leaves out
    the candidate its daemon halted, takes it back once cleared; gone with the daemon."""
    import torch

    from kernelpolicy.api import resolve
    from kernelpolicy.server.reporter import request_clear

    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    (tmp_path / "p.toml").write_text(POLICY)
    address = f"unix:{directory}/kp.sock"
    env = {"KERNELPOLICY_SOCKET": address, "KERNELPOLICY_LOG_FORMAT": "off",
           "KERNELPOLICY_POLICY_PATHS": str(tmp_path / "p.toml")}  # fmt: skip
    halts_file = directory / "kp.halts.json"

    def decided(**options: Any) -> str:
        return str(resolve(fixture("cpu"), env=env, **options).decision(FEATURE).impl)

    try:
        with running_daemon(fixture("cpu"), [tmp_path / "p.toml"], listen=[address],
                            watch=False) as running:  # fmt: skip
            assert json.loads(halts_file.read_text()) == {"format": 1, "halts": {}}
            first = resolve(fixture("cpu"), env=env, node_halts=True)
            assert first.decision(FEATURE).impl == "planted"
            first.impl(FEATURE)(torch.full((2, 8), float("nan")))  # two guard trips
            assert first.reporter is not None
            assert first.reporter.flush(30.0) is True
            state = running.daemon.state
            wait_until(lambda: f"{FEATURE}/planted" in json.loads(halts_file.read_text())["halts"])
            assert state.snapshot.resolution.decision(FEATURE).impl == "torch"
            halted = resolve(fixture("cpu"), env=env, node_halts=True).decision(FEATURE)
            assert halted.impl == "torch"
            assert "halted on this node: its output guard repaired 2" in "\n".join(halted.reasons)
            assert decided() == "planted"  # another platform given: not this node's halts
            shown = subprocess.run(
                [sys.executable, "-m", "kernelpolicy", "explain", "--policies",
                 str(tmp_path / "p.toml"), FEATURE],
                capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                env=serve_env() | {"KERNELPOLICY_SOCKET": address},
            )  # fmt: skip
            assert shown.returncode == 0, shown.stderr
            assert "planted rejected: halted on this node" in shown.stdout
            assert request_clear(address, FEATURE, 10.0) == {"cleared": ["planted"]}
            wait_until(lambda: json.loads(halts_file.read_text())["halts"] == {})
            assert decided(node_halts=True) == "planted"
        assert not halts_file.exists()  # a stopped daemon halts nothing
        assert decided(node_halts=True) == "planted"
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _staged(percent: int, halt_on: str = "{ guard_trips = 2 }") -> str:
    """POLICY with the planted kernel in a rollout at ``percent`` and the given ``halt_on``."""
    return POLICY.replace(
        "halt_on = { guard_trips = 2 }", f"halt_on = {halt_on}\nrollout = {{ percent = {percent} }}"
    )


def test_a_rollout_step_keeps_the_nodes_halt(tmp_path: Path) -> None:
    """A daemon whose workers tripped the planted kernel's guard: the policy's next rollout step
    (50% -> 100%, reloaded) keeps the halt (its answer, label, kernelpolicy_halted and
    halts_total); a real change of the candidate (its halt_on) lifts it, and halts_total, a
    counter, stays at 1."""
    from kernelpolicy.platform.model import Platform

    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    policies, labels = tmp_path / "policies", tmp_path / "labels"
    policies.mkdir()
    labels.mkdir()
    (policies / "greedy.toml").write_text(_staged(50))
    node = Platform.from_dict({**fixture("cpu").to_dict(), "machine_id": "ef" * 16})
    halted_label = "kernelpolicy.feature.node.kubernetes.io/halted.sampler.greedy.planted=true"
    try:
        with running_daemon(
            node, [policies], listen=[f"unix:{directory}/kp.sock"], watch=False,
            http="127.0.0.1:0", labels_dir=labels,
        ) as running:  # fmt: skip
            state, url = running.daemon.state, running.daemon.fleet.url
            a = Node(None, "", url, labels)  # type: ignore[arg-type]  # no process: in-process

            def answer() -> tuple[str | None, float | None, float | None, bool]:
                return (
                    state.snapshot.resolution.decision(FEATURE).impl,
                    a.metric("kernelpolicy_halted", feature=FEATURE, impl="planted"),
                    a.metric("kernelpolicy_halts_total", feature=FEATURE, impl="planted"),
                    halted_label in a.label_file(),
                )

            assert answer() == ("planted", 0.0, 0.0, False)  # this node is in the 50% cohort
            report_guard_trips(report_socket_path(directory / "kp.sock"))
            wait_until(lambda: answer() == ("torch", 1.0, 1.0, True))
            (policies / "greedy.toml").write_text(_staged(100))
            running.call(running.daemon.reload())
            assert a.metric("kernelpolicy_rollout_percent", feature=FEATURE, impl="planted") == 100
            assert answer() == ("torch", 1.0, 1.0, True)  # still halted at the next step
            (policies / "greedy.toml").write_text(_staged(100, "{ guard_trips = 3 }"))
            running.call(running.daemon.reload())
            assert answer() == ("planted", 0.0, 1.0, False)  # a real change: lifted
    finally:
        shutil.rmtree(directory, ignore_errors=True)
