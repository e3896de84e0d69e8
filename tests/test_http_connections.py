"""The HTTP listener's connections (issue 24, findings 5 and 8): caps in all and per peer,
header, body and idle timeouts, and a client hanging up mid-request counted as such, never as
a 500 and never logged once per hang-up."""

from __future__ import annotations

import asyncio
import io
import json
import resource
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernelpolicy.limits import (
    GRPC_DESCRIPTOR_SHARE,
    GRPC_RELAY_DESCRIPTORS,
    HTTP_DESCRIPTOR_SHARE,
    LOG_LINES_PER_MINUTE,
    MAX_GRPC_CONNECTIONS,
    MAX_HTTP_CONNECTIONS,
)
from kernelpolicy.server.connections import (
    Connection,
    ConnectionTable,
    Timeouts,
    connection_cap,
    descriptor_cap,
)
from kernelpolicy.server.grpc_relay import relay_connection_cap
from kernelpolicy.server.grpc_server import grpc_connection_cap
from kernelpolicy.server.http import HttpListener
from kernelpolicy.server.metrics import DaemonMetrics
from kernelpolicy.server.state import ServingState
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, wait_until
from tests.http_helpers import call

ONE = "/ofrep/v1/evaluate/flags/sampler.greedy"
BULK = "/ofrep/v1/evaluate/flags"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
LENGTH_100 = b"Host: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n"
CHUNKED = b"Host: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"

# The table: whom a new connection replaces (no I/O).


@pytest.mark.parametrize(
    ("held", "newcomer", "expected"),
    [
        pytest.param([], "a", None, id="empty"),
        pytest.param(["a", "b"], "c", None, id="room-left"),
        pytest.param(["a", "a", "b"], "a", ("a", 0, "replaced_peer_cap"), id="peer-cap-own-oldest"),
        pytest.param(["a", "b", "b", "c"], "d", ("b", 0, "replaced_total_cap"),
                     id="total-cap-heaviest-peers-oldest"),
        pytest.param(["a", "b", "c", "b"], "c", ("b", 0, "replaced_total_cap"),
                     id="total-cap-another-peer-heavier"),
        pytest.param(["a", "b", "c", "d"], "e", ("a", 0, "replaced_total_cap"),
                     id="total-cap-tie-first-peer"),
    ],
)  # fmt: skip
def test_connection_table_victim(
    held: list[str], newcomer: str, expected: tuple[str, int, str] | None
) -> None:
    """Caps of 4 in all and 2 per peer: (peer, its nth connection, reason) of the one replaced."""
    table = ConnectionTable(total=4, per_peer=2)
    connections = [Connection(peer, deadline=float(i)) for i, peer in enumerate(held)]
    for connection in connections:
        table.add(connection)
    victim = table.victim(newcomer)
    if expected is None:
        assert victim is None
    else:
        peer, index, reason = expected
        assert victim is not None
        assert (victim[0].peer, victim[1]) == (peer, reason)
        assert victim[0] is [c for c in connections if c.peer == peer][index]


def test_connection_table_remove_and_expire() -> None:
    table = ConnectionTable(total=4, per_peer=2)
    first, second = Connection("a", 1.0), Connection("a", 5.0)
    table.add(first)
    table.add(second)
    assert table.expired(2.0) == [first]
    assert table.remove(first)
    assert not table.remove(first)  # closing twice is harmless
    assert (table.count, table.of_peer("a")) == (1, 1)


@pytest.mark.parametrize(
    ("cap", "soft_limit", "expected"),
    [
        pytest.param(connection_cap, 256, int(256 * HTTP_DESCRIPTOR_SHARE), id="low-limit"),
        pytest.param(connection_cap, 1024,
                     min(MAX_HTTP_CONNECTIONS, int(1024 * HTTP_DESCRIPTOR_SHARE)), id="1024"),
        pytest.param(connection_cap, 4096, MAX_HTTP_CONNECTIONS, id="high-limit"),
        pytest.param(grpc_connection_cap, 256, int(256 * GRPC_DESCRIPTOR_SHARE), id="grpc-low"),
        pytest.param(grpc_connection_cap, 4096, MAX_GRPC_CONNECTIONS, id="grpc-high"),
        pytest.param(relay_connection_cap, 256,
                     int(256 * GRPC_DESCRIPTOR_SHARE / GRPC_RELAY_DESCRIPTORS), id="relay-low"),
        pytest.param(relay_connection_cap, 8192, MAX_GRPC_CONNECTIONS, id="relay-high"),
        pytest.param(lambda: relay_connection_cap(7), 4096, 7, id="relay-limit"),
        pytest.param(lambda: descriptor_cap(100, 0.5, 3), 4, 1, id="at-least-one"),
        pytest.param(lambda: descriptor_cap(100, 0.5, 3), 60, 10, id="per-connection"),
    ],
)  # fmt: skip
def test_connection_cap_leaves_descriptors(
    cap: Callable[[], int], soft_limit: int, expected: int
) -> None:
    """No listener takes more than its share of the descriptor limit (counted in the
    descriptors one connection holds), nor more than its limit, nor fewer than one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft_limit > hard:
        pytest.skip(f"the hard limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft_limit, hard))
    try:
        assert cap() == expected
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# Timeouts, on a real listener with short ones (the limits themselves are 10 s and more).

SHORT = Timeouts(header=0.3, body=0.3, idle=0.6)
HEADERS = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
HALF = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


async def _trickle(writer: asyncio.StreamWriter) -> None:
    """A header sent one byte at a time, never finished (slowloris)."""
    writer.write(b"GET /healthz HTTP/1.1\r\nX: ")
    while not writer.is_closing():
        writer.write(b"a")
        await asyncio.sleep(0.05)


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except ConnectionError:
        pass
    return data


Send = Callable[[asyncio.StreamWriter], Any]


@pytest.mark.parametrize(
    ("send", "reason", "reply"),
    [
        pytest.param(lambda w: None, "header_timeout", b"", id="silent"),
        pytest.param(lambda w: w.write(HALF), "header_timeout", b"", id="half-header"),
        pytest.param(_trickle, "header_timeout", b"", id="trickled-header"),
        pytest.param(lambda w: w.write(HEADERS), "idle_timeout", b"HTTP/1.1 200",
                     id="idle-after-an-answer"),
        pytest.param(lambda w: w.write(b"POST " + ONE.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                       b"Content-Length: 100\r\n\r\n{\"con"),
                     None, b"HTTP/1.1 408", id="body-too-slow"),
    ],
)  # fmt: skip
def test_timeouts_close_connections(send: Send, reason: str | None, reply: bytes) -> None:
    """Each stalled client is closed by the daemon, counted by reason; a body too slow gets
    408. The wait below only bounds a hang: the test checks what happens, not how fast."""
    state = ServingState(fixture("cpu"), {}, [ROOT / "policies"], {})
    metrics = DaemonMetrics(state)

    async def scenario() -> bytes:
        listener = HttpListener(state, metrics, lambda: None, timeouts=SHORT)
        url = await listener.start("127.0.0.1:0")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":")[2]))
            sending = send(writer)
            task = asyncio.ensure_future(sending) if asyncio.iscoroutine(sending) else None
            data = await asyncio.wait_for(_until_closed(reader), 30)
            writer.close()
            if task is not None:
                await asyncio.wait_for(task, 30)
            return data
        finally:
            await listener.stop()

    data = asyncio.run(scenario())
    assert data.startswith(reply)
    closed = {
        s.labels["reason"]: s.value
        for s in next(iter(metrics.connections_closed.collect())).samples
        if s.name.endswith("_total")
    }
    assert closed == {r: float(r == reason) for r in closed}


# Hang-ups, on a real daemon.

HANGUPS = LOG_LINES_PER_MINUTE + 5


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER of 0), not an end of file."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _half_close(sock: socket.socket) -> None:
    sock.shutdown(socket.SHUT_WR)
    sock.recv(1)  # the daemon closes its side: no answer owed to a client that left


@pytest.fixture(scope="module")
def logged() -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], watch=False, http="127.0.0.1:0",
        log_format="json", log_stream=log,
    ) as running:  # fmt: skip
        url = running.daemon.fleet.url
        assert url is not None
        yield url, log


def _closed_count(url: str) -> tuple[float, bool]:
    """(client hang-ups counted, whether any request was counted as a 5xx)."""
    text = call(url, "GET", "/metrics").body.decode()
    hung = 0.0
    for line in text.splitlines():
        if line.startswith('kernelpolicy_http_connections_closed_total{reason="client_hung_up"}'):
            hung = float(line.rsplit(" ", 1)[1])
    server_error = any(
        line.startswith("kernelpolicy_http_requests_total") and 'status="5' in line
        for line in text.splitlines()
    )
    return hung, server_error


@pytest.mark.parametrize(
    ("path", "head", "body", "leave"),
    [
        pytest.param(ONE, LENGTH_100, b'{"con', socket.socket.close, id="close-mid-body"),
        pytest.param(ONE, LENGTH_100, b'{"con', _half_close, id="half-close-mid-body"),
        pytest.param(ONE, LENGTH_100, b'{"con', _reset, id="reset-mid-body"),
        pytest.param(BULK, LENGTH_100, b"", socket.socket.close, id="close-before-body-bulk"),
        pytest.param(ONE, CHUNKED, b'40\r\n{"context"', socket.socket.close,
                     id="close-mid-chunk"),
    ],
)  # fmt: skip
def test_hang_ups_are_not_server_errors(
    logged: tuple[str, io.StringIO],
    path: str,
    head: bytes,
    body: bytes,
    leave: Callable[[socket.socket], Any],
) -> None:
    """A client that leaves mid-request: counted as client_hung_up, no 5xx in the request
    counter, no error logged, and at most LOG_LINES_PER_MINUTE lines for all of them. The
    client waits for "100 Continue" (the daemon is handling the request) before it leaves."""
    url, log = logged
    before, _ = _closed_count(url)
    lines_before = log.getvalue().count('"kernelpolicy.http.closed"')
    port = int(url.rsplit(":", 1)[1])
    for _ in range(HANGUPS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST %s HTTP/1.1\r\n%s" % (path.encode(), head))
        assert sock.recv(len(CONTINUE), socket.MSG_WAITALL) == CONTINUE
        sock.sendall(body)
        leave(sock)
        sock.close()

    def all_counted_or_a_5xx() -> bool:
        hung, server_error = _closed_count(url)
        return server_error or hung >= before + HANGUPS

    wait_until(all_counted_or_a_5xx, "the hang-ups were not all counted")
    hung, server_error = _closed_count(url)
    assert not server_error
    assert hung == before + HANGUPS
    text = log.getvalue()
    assert '"kernelpolicy.http.error"' not in text
    assert text.count('"kernelpolicy.http.closed"') - lines_before <= LOG_LINES_PER_MINUTE
    hang_up_lines = [json.loads(x) for x in text.splitlines() if "client_hung_up" in x]
    # the module's daemon logs into one stream: the first case's lines are there for all
    assert {(line["level"], line["event"], line["reason"]) for line in hang_up_lines} == {
        ("info", "kernelpolicy.http.closed", "client_hung_up")
    }
