"""Every per-peer cap counts a peer as server.peers groups it: all of loopback one peer, another
IPv4 address its own, IPv6 by its /64. Before, each of 127.0.0.0/8's addresses (any local user
may bind one as its source) was a peer of its own, and five of them took every TCP call slot."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kernelpolicy.limits import MAX_GRPC_CALLS_PER_PEER, MAX_WATCH_STREAMS_PER_PEER
from kernelpolicy.server.connections import peer_of
from kernelpolicy.server.peers import peer_group, peer_key
from kernelpolicy.testing.daemon import running_daemon
from tests.h2_calls import EMPTY, RESOLVE, WATCH, H2Calls, half_sent
from tests.helpers import ROOT, fixture

pytestmark = pytest.mark.xdist_group("grpc-limits")

RELAYED = "unix-abstract:kernelpolicy-relay/3f2a9c0d1e7b/"  # as server.grpc_relay binds them


@pytest.mark.parametrize(
    ("host", "group"),
    [
        pytest.param("127.0.0.1", "loopback", id="ipv4-loopback"),
        pytest.param("127.255.255.254", "loopback", id="ipv4-loopback-far-end"),
        pytest.param("::1", "loopback", id="ipv6-loopback"),
        pytest.param("::ffff:127.0.0.9", "loopback", id="ipv4-mapped-loopback"),
        pytest.param("128.0.0.1", "128.0.0.1", id="just-past-loopback"),
        pytest.param("10.0.0.7", "10.0.0.7", id="ipv4-is-its-own-peer"),
        pytest.param("::ffff:10.0.0.7", "10.0.0.7", id="ipv4-mapped-is-its-ipv4"),
        pytest.param("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", id="ipv6-by-its-64"),
        pytest.param("2001:db8:1:2::ffff", "2001:db8:1:2::/64", id="same-64-same-peer"),
        pytest.param("2001:db8:1:3::1", "2001:db8:1:3::/64", id="next-64-another-peer"),
        pytest.param("fe80::1%eth0", "fe80::/64", id="link-local-zone-dropped"),
        pytest.param("::", "::/64", id="unspecified"),
        pytest.param("localhost", "localhost", id="a-name-is-itself"),
        pytest.param("x" * 500, "x" * 100, id="a-long-name-is-bounded"),
    ],
)  # fmt: skip
def test_peer_group(host: str, group: str) -> None:
    """An address's peer, the one grouping every per-peer cap uses."""
    assert peer_group(host) == group


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        pytest.param("ipv4:127.0.0.2:5000", "loopback", id="grpc-ipv4-loopback"),
        pytest.param("ipv4:127.0.0.3:5000", "loopback", id="grpc-another-127-address"),
        pytest.param("ipv6:[::1]:5000", "loopback", id="grpc-ipv6-loopback"),
        pytest.param("ipv6:%5B::1%5D:5000", "loopback", id="grpc-ipv6-escaped"),
        pytest.param("ipv6:[::ffff:127.0.0.5]:5000", "loopback", id="grpc-ipv4-mapped-loopback"),
        pytest.param("ipv6:[::ffff:10.0.0.7]:5000", "10.0.0.7", id="grpc-ipv4-mapped"),
        pytest.param("ipv4:10.0.0.7:5000", "10.0.0.7", id="grpc-ipv4"),
        pytest.param("ipv6:[2001:db8::7]:5000", "2001:db8::/64", id="grpc-ipv6"),
        pytest.param("ipv6:[fe80::1%25eth0]:9", "fe80::/64", id="grpc-ipv6-escaped-zone"),
        pytest.param("unix:/run/kp.sock", "unix", id="grpc-unix"),
        pytest.param(f"{RELAYED}ipv4:10.0.0.7:5123", "10.0.0.7", id="relayed-ipv4"),
        pytest.param(f"{RELAYED}ipv6:[2001:db8::7]:5123", "2001:db8::/64", id="relayed-ipv6"),
        pytest.param(f"{RELAYED}ipv6:%5B2001:db8::7%5D:5123", "2001:db8::/64",
                     id="relayed-ipv6-escaped"),
        pytest.param(f"{RELAYED}ipv4:127.0.0.9:5123", "loopback", id="relayed-loopback"),
        pytest.param(f"{RELAYED}ipv6:[::1]:5123", "loopback", id="relayed-ipv6-loopback"),
        pytest.param("unix-abstract:kernelpolicy-relay/3f2a9c", "unix", id="relay-no-peer"),
        pytest.param("unix-abstract:kernelpolicy-relay/", "unix", id="relay-bare-prefix"),
        pytest.param(f"{RELAYED}mine", "unix", id="relay-peer-of-no-kind"),
        pytest.param(f"{RELAYED}ipv4:mine", "unix", id="relay-ipv4-not-an-address"),
        pytest.param(f"{RELAYED}ipv4:", "unix", id="relay-ipv4-empty"),
        pytest.param(f"{RELAYED}ipv4:10.0.0.7%eth0:1", "unix", id="relay-ipv4-with-a-zone"),
        pytest.param(f"{RELAYED}ipv6:[mine]:1", "unix", id="relay-ipv6-not-an-address"),
        pytest.param(f"{RELAYED}ipv6:mine", "unix", id="relay-ipv6-no-brackets"),
        pytest.param(f"{RELAYED}ipv4:" + "x" * 500, "unix", id="relay-long-name"),
        pytest.param(f"{RELAYED}{RELAYED}ipv4:10.0.0.7:1", "unix", id="relay-in-a-relay"),
        pytest.param("unix-abstract:another/ipv4:10.0.0.7:1", "unix", id="abstract-not-relay"),
    ],
)  # fmt: skip
def test_peer_key_groups_grpc_peers(peer: str, key: str) -> None:
    """gRPC's peer strings go through the same grouping (calls and streams): a relayed
    connection as its TCP client's peer; a relay name without an IP address, which the relay
    never binds, as the unix socket's one peer, never a key its client chose."""
    assert peer_key(peer) == key


@pytest.mark.parametrize(
    ("address", "peer"),
    [
        pytest.param(("127.0.0.3", 5000), "loopback", id="http-ipv4-loopback"),
        pytest.param(("::1", 5000, 0, 0), "loopback", id="http-ipv6-loopback"),
        pytest.param(("::ffff:127.0.0.3", 5000, 0, 0), "loopback", id="http-dual-stack-loopback"),
        pytest.param(("192.0.2.9", 5000), "192.0.2.9", id="http-ipv4"),
        pytest.param(("2001:db8::9", 5000, 0, 0), "2001:db8::/64", id="http-ipv6"),
    ],
)  # fmt: skip
def test_http_connections_use_the_same_groups(address: tuple[object, ...], peer: str) -> None:
    """The HTTP listener's connection table counts by the same peer (socket address tuples)."""
    assert peer_of(address) == peer


SOURCES = [f"127.0.0.{2 + i}" for i in range(5)]
TCP_CALLS = 5 * MAX_GRPC_CALLS_PER_PEER  # as many as five peers' caps: the total never binds


def _settle(connections: list[H2Calls], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
    while not done() and time.monotonic() < deadline:
        for connection in connections:
            connection.pump(0.02)


@pytest.mark.parametrize(
    ("path", "payload", "end", "each", "cap", "limit"),
    [
        pytest.param(RESOLVE, half_sent(1000, 500), False, 20, MAX_GRPC_CALLS_PER_PEER,
                     "MAX_GRPC_CALLS_PER_PEER", id="half-sent-resolves"),
        pytest.param(WATCH, EMPTY, True, 8, MAX_WATCH_STREAMS_PER_PEER,
                     "MAX_WATCH_STREAMS_PER_PEER", id="watch-streams"),
    ],
)  # fmt: skip
def test_many_loopback_addresses_are_one_peer(
    path: str, payload: bytes, end: bool, each: int, cap: int, limit: str
) -> None:
    """A real daemon: five 127.x source addresses open calls that stay open; together they hold
    one peer's cap, and the rest are refused RESOURCE_EXHAUSTED naming the limit and the peer
    ``loopback``. Before, each address had a cap of its own and all were held."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                        grpc_tcp_calls=TCP_CALLS) as running:  # fmt: skip
        tcp = running.daemon.bound[0]
        connections = [H2Calls(tcp, source) for source in SOURCES]
        try:
            for connection in connections:
                for _ in range(each):
                    connection.open(path, payload, end=end)
            refused = len(SOURCES) * each - cap
            _settle(connections, lambda: sum(len(c.statuses) for c in connections) >= refused)
            ended = [(c.statuses[s], c.details[s]) for c in connections for s in c.statuses]
            assert [code for code, _ in ended] == [8] * refused  # RESOURCE_EXHAUSTED
            assert all(f"({limit} {cap})" in detail for _, detail in ended)
            assert all("from loopback" in detail for _, detail in ended)
            assert sum(c.held for c in connections) == cap
        finally:
            for connection in connections:
                connection.close()
