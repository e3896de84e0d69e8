"""One TCP peer cannot hold every gRPC call of the daemon (MAX_GRPC_CALLS_PER_PEER), and a call
refused at once costs the daemon at most MAX_GRPC_UNREAD_BYTES of its data."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

import grpc
import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import (
    MAX_GRPC_CALLS_PER_PEER,
    MAX_GRPC_UNREAD_BYTES,
    MAX_TCP_REQUEST_BYTES,
    MAX_WATCH_STREAMS_PER_PEER,
)
from kernelpolicy.server import peers
from kernelpolicy.server.client import connect
from kernelpolicy.server.peer_calls import CallSlots
from kernelpolicy.testing.daemon import running_daemon
from tests.h2_calls import EMPTY, RESOLVE, WATCH, H2Calls, half_sent
from tests.helpers import ROOT, fixture

pytestmark = pytest.mark.xdist_group("grpc-limits")

A1, A2, B, UNIX = "ipv4:10.0.0.1:1", "ipv4:10.0.0.1:2", "ipv4:10.0.0.2:1", "unix:"
TCP_CALLS = 100  # the daemon's cap in all here, above one peer's and below two peers'


@pytest.mark.parametrize(
    "takes",
    [
        pytest.param([(A1, False), (A1, False)], id="within-the-cap"),
        pytest.param([(A1, False), (A1, False), (A1, True)], id="cap-plus-one"),
        pytest.param([(A1, False), (A2, False), (A1, True)], id="one-address-two-ports"),
        pytest.param([(A1, False), (A1, False), (B, False), (B, False)], id="two-peers-at-caps"),
        pytest.param([(UNIX, False), (UNIX, False), (UNIX, True)], id="unix-is-one-peer"),
    ],
)  # fmt: skip
def test_call_slots_table(takes: list[tuple[str, bool]]) -> None:
    """A cap of 2 calls per peer: each call taken in turn, or refused RESOURCE_EXHAUSTED naming
    MAX_GRPC_CALLS_PER_PEER."""
    slots = CallSlots(per_peer=2)
    for peer, refused in takes:
        if not refused:
            slots.take(peer)
            continue
        with pytest.raises(DaemonError, match=r"\(MAX_GRPC_CALLS_PER_PEER 2\)") as info:
            slots.take(peer)
        assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_call_slots_come_back() -> None:
    slots = CallSlots(per_peer=1)
    key = slots.take(A1)
    slots.give_back(key)
    slots.take(A2)
    assert (slots.count, slots.of(A1)) == (1, 1)


def _settle(connections: list[H2Calls], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
    while not done() and time.monotonic() < deadline:
        for connection in connections:
            connection.pump(0.02)


def _half_sent_resolves(connection: H2Calls, calls: int) -> None:
    for _ in range(calls):
        connection.open(RESOLVE, half_sent(1000, 500), end=False)


@pytest.fixture
def loopback_sources_as_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """127.0.0.2 and up count as peers of their own here, as remote hosts would: the daemon
    groups all of 127.0.0.0/8 as one peer (tests/test_grpc_peer_groups.py), and these tests
    need two peers on one machine."""
    monkeypatch.setattr(peers, "LOOPBACK_V4", ipaddress.IPv4Network("127.0.0.1/32"))


@pytest.mark.usefixtures("loopback_sources_as_hosts")
@pytest.mark.parametrize(
    ("connections", "watches", "resolves"),
    [
        pytest.param(2, 0, 70, id="half-sent-resolves-over-two-connections"),
        pytest.param(1, MAX_WATCH_STREAMS_PER_PEER, 50, id="watch-streams-then-half-sent"),
    ],
)
def test_one_peer_at_its_cap_does_not_stop_another(
    connections: int, watches: int, resolves: int
) -> None:
    """Peer A (127.0.0.2) opens more calls than TCP_CALLS and never finishes them: it holds
    MAX_GRPC_CALLS_PER_PEER, the rest are refused RESOURCE_EXHAUSTED naming the limit, and
    peer B (127.0.0.1, 127.0.0.3) is still answered. Before, A held all TCP_CALLS and B was
    refused."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        grpc_tcp_calls=TCP_CALLS) as running:  # fmt: skip
        tcp = running.daemon.bound[0]
        a = [H2Calls(tcp, "127.0.0.2") for _ in range(connections)]
        b = H2Calls(tcp, "127.0.0.3")
        try:
            for _ in range(watches):
                a[0].open(WATCH, EMPTY, end=True)
            _settle(a, lambda: len(a[0].answered) == watches)
            for connection in a:
                _half_sent_resolves(connection, resolves)
            opened = watches + connections * resolves
            refused = opened - MAX_GRPC_CALLS_PER_PEER
            _settle(a, lambda: sum(len(c.statuses) for c in a) >= refused)
            ended = [(c.statuses[s], c.details[s]) for c in a for s in c.statuses]
            assert [code for code, _ in ended] == [8] * refused  # RESOURCE_EXHAUSTED
            assert all("(MAX_GRPC_CALLS_PER_PEER 64)" in detail for _, detail in ended)
            assert sum(c.held for c in a) == MAX_GRPC_CALLS_PER_PEER
            assert len(a[0].answered) == watches  # A's streams still run
            with connect(tcp) as client:  # from 127.0.0.1
                assert client.resolve().decision("topk_per_row").impl == "torch"
            call = b.open(RESOLVE, EMPTY, end=True)
            stream = b.open(WATCH, EMPTY, end=True)
            _settle([b], lambda: call in b.statuses and stream in b.answered)
            assert (b.statuses.get(call), stream in b.answered) == (0, True)
        finally:
            for connection in [*a, b]:
                connection.close()


def test_a_peers_slots_come_back_when_its_calls_end() -> None:
    """A peer at its cap that closes its connection gets its calls answered again."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        tcp = running.daemon.bound[0]
        first = H2Calls(tcp, "127.0.0.2")
        _half_sent_resolves(first, MAX_GRPC_CALLS_PER_PEER + 1)
        _settle([first], lambda: len(first.statuses) == 1)
        assert list(first.statuses.values()) == [8]
        first.close()
        deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
        while not _answered_once(tcp, "127.0.0.2"):
            assert time.monotonic() < deadline, "the closed calls' slots never came back"


def _answered_once(tcp: str, source: str) -> bool:
    connection = H2Calls(tcp, source)
    call = connection.open(RESOLVE, EMPTY, end=True)
    _settle([connection], lambda: call in connection.statuses)
    connection.close()
    return connection.statuses.get(call) == 0


@pytest.mark.parametrize(
    "before",
    [
        pytest.param(0, id="fresh-connection"),
        pytest.param(8, id="after-eight-requests-of-256-kib"),
    ],
)
def test_a_refused_call_sends_at_most_the_unread_bytes(before: int) -> None:
    """The window a new call may fill before the daemon reads its request is
    MAX_GRPC_UNREAD_BYTES, also after large requests (no BDP growth); those requests, read,
    still arrive whole (the answer is about their bytes, not the window)."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        connection = H2Calls(running.daemon.bound[0])
        try:
            size = MAX_TCP_REQUEST_BYTES - 64
            calls = [connection.open(RESOLVE, half_sent(size, size), end=True)
                     for _ in range(before)]  # fmt: skip
            _settle([connection], lambda: len(connection.statuses) == before)
            assert [connection.statuses[c] for c in calls] == [3] * before  # INVALID_ARGUMENT
            _settle([connection], lambda: connection.settled)
            assert connection.h2.remote_settings.initial_window_size <= MAX_GRPC_UNREAD_BYTES
            stream = connection.open(RESOLVE, b"", end=False)
            assert connection.h2.local_flow_control_window(stream) <= MAX_GRPC_UNREAD_BYTES
        finally:
            connection.close()
