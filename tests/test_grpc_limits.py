"""What one gRPC client can hold or cost the daemon: connections per listener (the TCP port
cannot take the unix socket's), hypothetical answers beside the event loop (a bounded number
at once and waiting), platform_json depth refused without a whole scan, and health and
reflection behind the same boundary as every other service."""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import (
    MAX_HYPOTHETICAL_RESOLVES,
    MAX_HYPOTHETICAL_WAITING,
    MAX_NESTING_DEPTH,
    MAX_TCP_REQUEST_BYTES,
)
from kernelpolicy.safeio import nesting_depth
from kernelpolicy.server.client import connect
from kernelpolicy.server.hypothetical import Hypotheticals
from kernelpolicy.testing.daemon import running_daemon
from tests.h2_calls import HalfSent
from tests.helpers import ROOT, fixture

pytestmark = pytest.mark.xdist_group("grpc-limits")

RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.5)
    try:
        while True:  # the server's SETTINGS first, then the end of the stream if it closed
            if sock.recv(4096) == b"":
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_idle_tcp_connections_cannot_take_the_unix_sockets() -> None:
    """Past the cap a new TCP connection replaces the least recently active one of its peer
    (the daemon's relay, server/grpc_relay.py): the flood displaces only its own connections, a
    new TCP client is served, and the workers' unix socket, a listener of its own, answers.
    Before the relay, grpc closed each new connection at once and no new client got in."""
    cap = 6
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    listen = ("127.0.0.1:0", f"unix:{directory}/kp.sock")
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False, listen=listen,
                        grpc_connections=cap) as running:  # fmt: skip
        host, port = running.daemon.bound[0].rsplit(":", 1)
        held = []
        for _ in range(cap + 4):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(PREFACE)
            held.append(sock)
        closed = [_closed_by_peer(sock) for sock in held]
        with connect(running.daemon.bound[0], connect_timeout=10) as client:
            assert client.resolve().decision("topk_per_row").impl == "torch"
        with connect(f"unix:{directory}/kp.sock") as client:
            assert client.resolve().decision("topk_per_row").impl == "torch"
        for sock in held:
            sock.close()
    # four of the flood replaced, never the newest: which four depends on when each one's
    # preface and the server's SETTINGS passed (the relay replaces the least recently active)
    assert (closed.count(True), closed[-1]) == (4, False)


def test_tcp_calls_in_flight_are_capped_apart_from_the_unix_socket() -> None:
    """Past MAX_GRPC_TCP_CALLS a TCP call is refused before its request is read, and a client
    is told what to do; the unix socket, a server of its own, still answers; once the
    half-sent calls end, TCP answers again."""
    cap = 4
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    unix = f"unix:{directory}/kp.sock"
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        listen=("127.0.0.1:0", unix), grpc_tcp_calls=cap) as running:  # fmt: skip
        tcp = running.daemon.bound[0]
        flood = HalfSent(tcp, streams=cap + 3, announce=100_000, send=50_000)
        try:
            for _ in range(100):
                flood.pump(0.05)
                if len(flood.statuses) == 3:
                    break
            assert sorted(flood.statuses.values()) == [RESOURCE_EXHAUSTED] * 3
            assert flood.held == cap
            refused = _resolve_until(tcp, lambda error: error is not None)
            assert refused is not None
            assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "MAX_GRPC_TCP_CALLS" in str(refused)
            assert "unix socket" in str(refused)
            assert _resolve_until(unix, lambda error: True) is None
        finally:
            flood.close()
        assert _resolve_until(tcp, lambda error: error is None) is None


@pytest.mark.parametrize(
    ("listener", "announce", "refused"),
    [
        pytest.param("tcp", MAX_TCP_REQUEST_BYTES + 1, True, id="tcp-over"),
        pytest.param("tcp", MAX_TCP_REQUEST_BYTES, False, id="tcp-at-limit"),
    ],
)
def test_announced_size_is_refused_before_the_body(
    listener: str, announce: int, refused: bool
) -> None:
    """A TCP request announcing more than MAX_TCP_REQUEST_BYTES is refused at its first five
    bytes: the daemon never buffers its body; one at the limit is held, waiting for the rest."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        flood = HalfSent(running.daemon.bound[0], streams=1, announce=announce, send=0)
        try:
            for _ in range(20):
                flood.pump(0.05)
            assert list(flood.statuses.values()) == ([RESOURCE_EXHAUSTED] if refused else [])
        finally:
            flood.close()


def _resolve_until(address: str, done: Any, tries: int = 100) -> DaemonError | None:
    """``connect(address).resolve()`` until ``done(error)`` (error None: answered); the last
    error. The daemon sees held calls start, and end, a moment after the client does."""
    error: DaemonError | None = None
    for _ in range(tries):
        try:
            with connect(address, timeout=10) as client:
                client.resolve()
            error = None
        except DaemonError as exc:
            error = exc
        if done(error):
            return error
        threading.Event().wait(0.05)
    return error


def test_hypothetical_answers_are_bounded() -> None:
    """MAX_HYPOTHETICAL_RESOLVES run at once, MAX_HYPOTHETICAL_WAITING wait, the next one is
    RESOURCE_EXHAUSTED; all the others are answered once the running ones finish."""
    release = threading.Event()
    started: list[int] = []

    def slow(state: Any, snapshot: Any, request: Any) -> Any:
        started.append(request)
        release.wait(30)
        return request

    async def scenario() -> tuple[list[Any], int]:
        pool = Hypotheticals(work=slow)
        calls = [
            asyncio.ensure_future(pool.resolve(None, None, n))  # type: ignore[arg-type]
            for n in range(MAX_HYPOTHETICAL_RESOLVES + MAX_HYPOTHETICAL_WAITING)
        ]
        deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
        while len(started) < MAX_HYPOTHETICAL_RESOLVES:
            assert time.monotonic() < deadline, (
                f"only {len(started)} of {MAX_HYPOTHETICAL_RESOLVES} hypothetical resolves started"
            )
            await asyncio.sleep(0.01)
        with pytest.raises(DaemonError, match="MAX_HYPOTHETICAL_WAITING") as refused:
            await pool.resolve(None, None, -1)  # type: ignore[arg-type]
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        running_before_release = len(started)
        release.set()
        return list(await asyncio.gather(*calls)), running_before_release

    answers, running = asyncio.run(scenario())
    assert running == MAX_HYPOTHETICAL_RESOLVES
    assert answers == list(range(MAX_HYPOTHETICAL_RESOLVES + MAX_HYPOTHETICAL_WAITING))


def test_node_answers_flow_while_hypotheticals_run() -> None:
    """A worker's plain Resolve is answered while hypothetical ones are still being worked
    out (they no longer hold the event loop)."""
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc

    release = threading.Event()

    def slow(state: Any, snapshot: Any, request: Any) -> Any:
        release.wait(30)
        return snapshot.resolution

    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        running.daemon.hypotheticals.work = slow
        channel = grpc.insecure_channel(running.daemon.bound[0])
        stub = pb_grpc.KernelPolicyStub(channel)
        pending = [
            stub.Resolve.future(pb.ResolveRequest(env={"A": "1"}), timeout=30) for _ in range(4)
        ]
        plain = stub.Resolve(pb.ResolveRequest(), timeout=10)  # answered meanwhile
        assert not any(call.done() for call in pending)
        release.set()
        assert all(call.result().fingerprint == plain.fingerprint for call in pending)
        channel.close()


def test_tcp_hypotheticals_never_get_the_unix_sockets_refused() -> None:
    """TCP clients that fill their hypothetical places (running and waiting) get the next one
    refused; a worker's hypothetical request on the unix socket waits for a thread instead, and
    is answered."""
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc

    release = threading.Event()

    def slow(state: Any, snapshot: Any, request: Any) -> Any:
        release.wait(30)
        return snapshot.resolution

    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    unix = f"unix:{directory}/kp.sock"
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        listen=("127.0.0.1:0", unix)) as running:  # fmt: skip
        running.daemon.hypotheticals.work = slow
        tcp = grpc.insecure_channel(running.daemon.bound[0])
        local = grpc.insecure_channel(unix)
        ask = pb.ResolveRequest(env={"A": "1"})
        held = [
            pb_grpc.KernelPolicyStub(tcp).Resolve.future(ask, timeout=30)
            for _ in range(MAX_HYPOTHETICAL_RESOLVES + MAX_HYPOTHETICAL_WAITING)
        ]
        for _ in range(300):  # the daemon sees them arrive a moment after they are sent
            if running.daemon.hypotheticals.waiting == MAX_HYPOTHETICAL_WAITING:
                break
            threading.Event().wait(0.05)
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.KernelPolicyStub(tcp).Resolve(ask, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        worker = pb_grpc.KernelPolicyStub(local).Resolve.future(ask, timeout=30)
        assert not worker.done()  # waiting for a thread, not refused
        release.set()
        assert worker.result().fingerprint
        assert all(call.result().fingerprint for call in held)
        tcp.close()
        local.close()


def test_platform_json_depth_stops_at_the_limit() -> None:
    """A megabyte of '[' is measured only until the depth passes the limit."""
    text = "[" * 1_000_000
    assert nesting_depth(text, stop_above=MAX_NESTING_DEPTH) == MAX_NESTING_DEPTH + 1
    assert nesting_depth("[[]]" * 10, stop_above=MAX_NESTING_DEPTH) == 2


def test_health_and_reflection_behind_the_boundary() -> None:
    """Health Watch works with the HTTP listener's metrics on; bytes that are not a health or
    reflection request are INVALID_ARGUMENT naming the message, never UNKNOWN."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        http="127.0.0.1:0") as running:  # fmt: skip
        channel = grpc.insecure_channel(running.daemon.bound[0])
        health = health_pb2_grpc.HealthStub(channel)
        first = next(iter(health.Watch(health_pb2.HealthCheckRequest(), timeout=5)))
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        garbage = b"\xff\xff\xff\xff\x0f"
        raw_check = channel.unary_unary("/grpc.health.v1.Health/Check")
        with pytest.raises(grpc.RpcError) as check:
            raw_check(garbage, timeout=5)
        raw_reflect = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        )
        with pytest.raises(grpc.RpcError) as reflect:
            list(raw_reflect(iter([garbage]), timeout=5))
        channel.close()
    expected = [
        (check, "grpc.health.v1.HealthCheckRequest"),
        (reflect, "grpc.reflection.v1alpha.ServerReflectionRequest"),
    ]
    for info, message in expected:
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == f"the request is not a valid {message} message"


def test_serve_raises_its_descriptor_limit(tmp_path: Path) -> None:
    """serve starts with a soft limit of 1,024 and runs with its hard limit, so the listeners'
    shares are shares of that."""
    import subprocess
    import sys

    port_file = tmp_path / "port"
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (1024, "
        "resource.getrlimit(resource.RLIMIT_NOFILE)[1])); from kernelpolicy.cli import main; "
        f"sys.exit(main(['serve', '--quiet', '--no-watch', '--listen', '127.0.0.1:0', "
        f"'--platform', {str(ROOT / 'kernelpolicy/fixtures/platforms/cpu.json')!r}, "
        f"'--port-file', {str(port_file)!r}]))"
    )
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
        while not port_file.exists():
            assert process.poll() is None, f"serve exited {process.returncode}, no port file"
            assert time.monotonic() < deadline, "serve wrote no port file within 60 s"
            time.sleep(0.05)
        limits = Path(f"/proc/{process.pid}/limits").read_text()
    finally:
        process.terminate()
        process.wait(30)
    import resource

    (line,) = [row for row in limits.splitlines() if row.startswith("Max open files")]
    soft, hard = line.split()[3:5]
    expected = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert int(soft) == min(expected, 1 << 20)
    assert int(hard) == expected


def _listening(address: str) -> bool:
    family = socket.AF_UNIX if address.startswith("unix:") else socket.AF_INET
    target: Any = address.removeprefix("unix:")
    if family == socket.AF_INET:
        host, port = address.rsplit(":", 1)
        target = (host, int(port))
    with socket.socket(family) as probe:
        try:
            probe.connect(target)
        except OSError:
            return False
    return True


@pytest.mark.parametrize("first", ["tcp", "unix"])
def test_a_failed_start_leaves_no_listener(first: str) -> None:
    """A later --listen address that cannot be bound stops the daemon's start, and the
    addresses bound before it are given back (an unstarted grpc.aio server kept its port)."""
    from kernelpolicy.server.daemon import Daemon
    from kernelpolicy.server.state import ServingState

    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spare.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{spare.getsockname()[1]}"
        spare.close()
        directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
        bound = free if first == "tcp" else f"unix:{directory}/kp.sock"
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        state = ServingState(fixture("cpu"), {}, [ROOT / "policies"], {})
        daemon = Daemon(state, [bound, busy], watch=False, log_format="off")
        with pytest.raises(DaemonError, match="the address is in use"):
            asyncio.run(daemon.start())
        assert not _listening(bound)
