"""One TCP peer cannot hold every gRPC connection: the daemon accepts TCP itself and relays each
connection to its gRPC server (server/grpc_relay.py), at most MAX_GRPC_CONNECTIONS_PER_PEER from
one peer; past it a peer's new connection replaces that peer's least recently active one. Before,
grpc counted connections with no share per peer: one address opened them all and every other
TCP client read "not answering" until grpc closed them as idle (120 s)."""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_GRPC_CONNECTIONS_PER_PEER
from kernelpolicy.server import peers
from kernelpolicy.server.client import connect
from kernelpolicy.server.connections import Connection, ConnectionTable
from kernelpolicy.server.grpc_relay import GrpcRelay
from kernelpolicy.server.sockets import MAX_SOCKET_PATH_BYTES
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, wait_until

pytestmark = pytest.mark.xdist_group("grpc-limits")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
CAP = 40  # connections in all here: above one peer's share, below the flood


@pytest.mark.parametrize(
    ("touched", "victim"),
    [
        pytest.param([], "a1", id="none-touched-the-oldest"),
        pytest.param(["a1"], "a2", id="the-oldest-touched-the-next"),
        pytest.param(["a1", "a2"], "a3", id="all-but-one-touched"),
        pytest.param(["a2", "a1"], "a3", id="touched-in-any-order"),
        pytest.param(["b1"], "a1", id="another-peers-touch-changes-nothing"),
    ],
)  # fmt: skip
def test_a_peer_replaces_its_least_recently_active(touched: list[str], victim: str) -> None:
    """A per-peer share of 3: the peer's next connection replaces the one touched least
    recently (the relay touches a connection when bytes pass)."""
    table = ConnectionTable(total=10, per_peer=3)
    made = {f"{peer}{n}": Connection(peer, 0.0) for peer in "ab" for n in (1, 2, 3)}
    for connection in made.values():
        table.add(connection)
    for name in touched:
        table.touch(made[name])
    assert table.victim("a") == (made[victim], "replaced_peer_cap")


def _closed_by_daemon(socks: list[socket.socket], settle: float = 1.0) -> list[bool]:
    """Which of ``socks`` the daemon closed, read together until nothing has come for
    ``settle`` seconds (what they were sent, their settings, read and dropped)."""
    closed = [False] * len(socks)
    open_ones = {sock: index for index, sock in enumerate(socks)}
    while open_ones:
        ready, _, _ = select.select(list(open_ones), [], [], settle)
        if not ready:
            break
        for sock in ready:
            try:
                gone = sock.recv(4096) == b""
            except OSError:
                gone = True
            if gone:
                closed[open_ones.pop(sock)] = True
    return closed


@pytest.fixture(params=["another-peer", "same-loopback-peer"])
def flooder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the flood comes from: 127.0.0.2 as a peer of its own (as a remote host would be),
    or as part of the one peer ``loopback`` with the client that is asked after it."""
    if request.param == "another-peer":
        monkeypatch.setattr(peers, "LOOPBACK_V4", ipaddress.IPv4Network("127.0.0.1/32"))
    return str(request.param)


def test_one_source_cannot_take_every_connection(flooder: str) -> None:
    """127.0.0.2 opens more idle connections than the daemon holds in all: it keeps
    MAX_GRPC_CONNECTIONS_PER_PEER of them (its oldest replaced), and a client from 127.0.0.1 is
    answered, in its own peer or in the same (there its connection replaces one of the
    flood's). Before, the flood held all of grpc's connections and the client read "not
    answering"."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        grpc_connections=CAP) as running:  # fmt: skip
        host, port = running.daemon.bound[0].rsplit(":", 1)
        flood = []
        try:
            for _ in range(CAP + 20):
                sock = socket.create_connection((host, int(port)), source_address=("127.0.0.2", 0))
                sock.sendall(PREFACE)
                flood.append(sock)
            closed = _closed_by_daemon(flood)
            assert closed.count(False) == MAX_GRPC_CONNECTIONS_PER_PEER
            assert (
                closed[-MAX_GRPC_CONNECTIONS_PER_PEER:] == [False] * MAX_GRPC_CONNECTIONS_PER_PEER
            )
            with connect(running.daemon.bound[0], connect_timeout=10) as client:
                assert client.resolve().decision("topk_per_row").impl == "torch"
            still = [sock for sock, gone in zip(flood, closed, strict=True) if not gone]
            replaced = sum(_closed_by_daemon(still))
            assert replaced == (1 if flooder == "same-loopback-peer" else 0)
        finally:
            for sock in flood:
                sock.close()


@contextmanager
def _listener(behaviour: str) -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that closes each connection at once (``close``), resets it
    (``reset``) or holds it and says nothing (``silent``, as a TLS server does)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                sock, _ = server.accept()
            except TimeoutError:
                continue
            if behaviour == "reset":
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            if behaviour == "silent":
                held.append(sock)
            else:
                sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for sock in [*held, server]:
            sock.close()


@pytest.mark.parametrize(
    ("behaviour", "says"),
    [
        pytest.param("close", "closes it at once", id="closed-at-once-names-the-cap"),
        pytest.param("reset", "closes it at once", id="reset-at-once-names-the-cap"),
        pytest.param("silent", "is kernelpolicy serve running there", id="silent-is-not-the-cap"),
    ],
)  # fmt: skip
def test_a_client_turned_away_is_told_of_the_cap(behaviour: str, says: str) -> None:
    """A client whose connections are closed as soon as they are made is told the daemon's
    connection caps may be why, naming them; one that hears nothing is asked, as before, whether
    a daemon runs there."""
    with (
        _listener(behaviour) as address,
        pytest.raises(DaemonError) as info,
        connect(address, connect_timeout=1) as client,
    ):
        client.resolve()
    assert says in str(info.value)
    named = "MAX_GRPC_CONNECTIONS_PER_PEER" in str(info.value)
    assert named == (says == "closes it at once")


def _close_at_once(sock: socket.socket) -> None:
    sock.close()


def _preface_then_close(sock: socket.socket) -> None:
    sock.sendall(PREFACE)
    sock.close()


def _half_close_silent(sock: socket.socket) -> None:
    """End this way, read until the daemon ends the other, then close."""
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(30)
    while sock.recv(4096):
        pass
    sock.close()


def _half_close_then_read(sock: socket.socket) -> None:
    """Send the preface first, then as :func:`_half_close_silent`."""
    sock.sendall(PREFACE)
    _half_close_silent(sock)


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(_close_at_once, id="closed-at-once"),
        pytest.param(_preface_then_close, id="preface-then-closed"),
        pytest.param(_half_close_then_read, id="half-closed-after-the-preface"),
        pytest.param(_half_close_silent, id="half-closed-saying-nothing"),
    ],
)  # fmt: skip
def test_a_connection_ended_both_ways_is_let_go(client: Callable[[socket.socket], None]) -> None:
    """Once both the client and the gRPC server have ended a relayed connection, the relay lets
    it go (its place in the table, its descriptors). Before, each side's end of file was passed
    on and its side kept open, so neither closed: every such connection held its place until the
    peer's cap replaced it."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        relay = next(server.relay for server in running.daemon.servers if hasattr(server, "relay"))
        host, port = running.daemon.bound[0].rsplit(":", 1)
        for _ in range(3):
            client(socket.create_connection((host, int(port))))
        wait_until(lambda: relay.table.count == 0, f"{relay.table.count} connections still held")
        with connect(running.daemon.bound[0], connect_timeout=10) as answered:
            assert answered.resolve().decision("topk_per_row").impl == "torch"


@pytest.mark.parametrize(
    ("tmpdir", "in_tmp"),
    [
        pytest.param("short", False, id="tmpdir-used"),
        pytest.param("long", True, id="tmpdir-too-long-for-a-socket"),
        pytest.param("missing", True, id="tmpdir-missing"),
    ],
)  # fmt: skip
def test_the_relays_socket_fits_whatever_tmpdir_is(
    tmpdir: str, in_tmp: bool, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay's private socket is made in TMPDIR, or in /tmp where TMPDIR is missing or so
    long that the socket's path would not bind (107 bytes). Before, a long TMPDIR made every TCP
    listener fail with an internal error: TCP listening did not depend on TMPDIR before the
    relay."""
    where = {"short": short_dir, "long": short_dir / ("d" * 90), "missing": short_dir / "gone"}
    if tmpdir == "long":
        where["long"].mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where[tmpdir]))
    relay = GrpcRelay(total=4)
    try:
        assert len(os.fsencode(relay.path)) <= MAX_SOCKET_PATH_BYTES
        assert relay.path.startswith("/tmp/kernelpolicy-grpc-") == in_tmp
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.bind(relay.path)  # binds
        probe.close()
    finally:
        relay.close()
