"""The gRPC relay's byte pump (server/relay_pump.py) on real socket pairs: bytes both ways in
order, a side that does not read holds the other back (no unbounded buffer), a half close
passed on with the other way still open, both ends or a failure close the pair and tell the
loop once, a cut closes it without telling, stop cuts every pair."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from kernelpolicy.server.relay_pump import READ_CHUNK_BYTES, Pair, Pump
from tests.helpers import wait_until

SETTLE = 10.0  # seconds a condition may take to come true before the test fails


@dataclass
class Relayed:
    """A pair in the pump: ``client`` stands for the TCP client, ``server`` for grpc."""

    client: socket.socket
    server: socket.socket
    pair: Pair
    closed: list[str]  # what the pump told of the pair's end
    active: list[str]  # and of its activity


class Pumping:
    """A pump on an event loop that runs in a thread of its own; every call to the pump is
    made on that loop, as the relay makes them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.runner = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner.start()
        self.pump: Pump = self.on_loop(Pump, self.loop)
        self.made: list[Relayed] = []

    def on_loop(self, function: Callable[..., Any], *args: Any) -> Any:
        async def call() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(SETTLE)

    def relayed(self) -> Relayed:
        client, client_inner = socket.socketpair()
        server_inner, server = socket.socketpair()
        for inner in (client_inner, server_inner):
            inner.setblocking(False)
        closed: list[str] = []
        active: list[str] = []
        pair = Pair(
            client_inner,
            server_inner,
            on_active=lambda: active.append("active"),
            on_closed=lambda: closed.append("closed"),
        )
        relay = Relayed(client, server, pair, closed, active)
        self.on_loop(self.pump.add, pair)
        self.made.append(relay)
        return relay

    def cut(self, relay: Relayed) -> None:
        self.on_loop(self.pump.cut, relay.pair)

    def stop(self) -> None:
        self.on_loop(self.pump.stop)


@contextmanager
def pumping() -> Iterator[Pumping]:
    pumping = Pumping()
    try:
        yield pumping
    finally:
        pumping.stop()
        pumping.loop.call_soon_threadsafe(pumping.loop.stop)
        pumping.runner.join(SETTLE)
        pumping.loop.close()
        for relay in pumping.made:
            relay.client.close()
            relay.server.close()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    sock.settimeout(SETTLE)
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        assert chunk, f"end of file after {len(got)} of {size} bytes"
        got += chunk
    return bytes(got)


def _fill(sock: socket.socket) -> int:
    """Send until a send blocks for a second; the bytes sent."""
    sock.settimeout(1.0)
    sent = 0
    try:
        while True:
            sent += sock.send(b"x" * READ_CHUNK_BYTES)
    except TimeoutError:
        return sent


def _at_end(sock: socket.socket) -> bool:
    """The other side closed (end of file, or reset)."""
    sock.settimeout(SETTLE)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(1, id="one-byte"),
        pytest.param(READ_CHUNK_BYTES + 1, id="over-a-chunk"),
        pytest.param(3 * 1024 * 1024 + 7, id="megabytes"),
    ],
)  # fmt: skip
def test_bytes_pass_both_ways_in_order(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    with pumping() as pumps:
        relay = pumps.relayed()
        for sender, reader, sent in ((relay.client, relay.server, data),
                                     (relay.server, relay.client, data[::-1])):  # fmt: skip
            sending = threading.Thread(target=sender.sendall, args=(sent,))
            sending.start()
            assert _read_exactly(reader, size) == sent
            sending.join(SETTLE)
        assert relay.closed == []


def test_a_side_that_does_not_read_holds_the_other_back() -> None:
    """grpc not reading: the pump holds at most one chunk and stops reading the client, whose
    send then blocks; nothing is lost once grpc reads again."""
    with pumping() as pumps:
        relay = pumps.relayed()
        sent = _fill(relay.client)
        held, reading = pumps.on_loop(lambda: (relay.pair.server.held, relay.pair.client.reading))
        assert len(held) <= READ_CHUNK_BYTES
        assert not reading
        assert _read_exactly(relay.server, sent) == b"x" * sent


@pytest.mark.parametrize("ends", ["client", "server"])
def test_an_end_of_file_is_passed_on_and_the_other_way_stays_open(ends: str) -> None:
    with pumping() as pumps:
        relay = pumps.relayed()
        first, other = (
            (relay.client, relay.server) if ends == "client" else (relay.server, relay.client)
        )
        first.sendall(b"last words")
        first.shutdown(socket.SHUT_WR)
        assert _read_exactly(other, 10) == b"last words"
        assert _at_end(other)
        other.sendall(b"answer")  # the other way still carries bytes
        assert _read_exactly(first, 6) == b"answer"
        assert relay.closed == []
        other.shutdown(socket.SHUT_WR)  # now neither way does: the pair is let go
        assert _at_end(first)
        wait_until(lambda: relay.closed == ["closed"], "the loop told of the close")


def test_a_side_gone_closes_the_pair_and_tells_the_loop_once() -> None:
    """The client closed (its end of file passed on); grpc's answer then cannot be written:
    the pair is closed and the loop told, once."""
    with pumping() as pumps:
        relay = pumps.relayed()
        relay.client.close()
        assert _at_end(relay.server)
        relay.server.sendall(b"late answer")  # the pump's write to the closed client fails
        wait_until(lambda: relay.closed == ["closed"], "the loop told of the close")
        assert pumps.on_loop(len, pumps.pump) == 0  # a closed pair is forgotten
        pumps.cut(relay)  # the loop cutting a pair that is gone already changes nothing
        other = pumps.relayed()
        other.client.sendall(b"still relaying")
        assert _read_exactly(other.server, 14) == b"still relaying"
        assert relay.closed == ["closed"]


def test_a_cut_closes_both_sides_without_telling_the_loop() -> None:
    with pumping() as pumps:
        relay, kept = pumps.relayed(), pumps.relayed()
        pumps.cut(relay)
        assert _at_end(relay.client)
        assert _at_end(relay.server)
        kept.client.sendall(b"ping")
        assert _read_exactly(kept.server, 4) == b"ping"
        assert relay.closed == []
        assert pumps.on_loop(len, pumps.pump) == 1  # the cut one is forgotten


def test_activity_is_told_at_most_once_a_second() -> None:
    with pumping() as pumps:
        relay = pumps.relayed()
        for _ in range(50):
            relay.client.sendall(b"x")
            _read_exactly(relay.server, 1)
        wait_until(lambda: relay.active == ["active"], "the first activity told")
        assert relay.active == ["active"]


def test_stop_cuts_every_pair() -> None:
    with pumping() as pumps:
        relays = [pumps.relayed() for _ in range(3)]
        assert pumps.on_loop(len, pumps.pump) == 3
        pumps.stop()
        assert pumps.on_loop(len, pumps.pump) == 0
        for relay in relays:
            assert _at_end(relay.client)
            assert _at_end(relay.server)
