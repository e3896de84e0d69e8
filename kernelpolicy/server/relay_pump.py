"""The gRPC relay's byte pump: moves each relayed connection's bytes between the client's TCP
socket and the gRPC server's unix socket, from plain reader and writer callbacks on the event
loop.

asyncio's transports cost a relayed chunk a protocol call, a buffer and a transport write on
each side, about a tenth of a bare gRPC server's rate (``benchmarks/README.md``); here a chunk
is one ``recv`` and one ``send`` from the loop's reader callback. (A thread of its own moved
bytes no faster on two cores and slower on sixteen, where it fought the event loop's thread
for the interpreter.)

Flow control both ways: what a side cannot take yet is held (at most one chunk) and the other
side is not read until it is written. An end of file is passed on as a half close
(``shutdown(SHUT_WR)``) and the other way stays open; when both ways have ended, or either
fails, both sockets are closed. The pump parses nothing (TLS runs through it).

Everything runs on the loop that made the :class:`Pump`, as the relay's table does: it hands a
connected pair over with :meth:`Pump.add` and cuts one with :meth:`Pump.cut`; the pump calls a
pair's ``on_active`` (at most every ``TOUCH_SECONDS``) and ``on_closed`` (once, for a pair that
ended by itself).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

READ_CHUNK_BYTES = 64 * 1024
"""Read at most this much from a side at a time (and hold at most this much for the other)."""
TOUCH_SECONDS = 1.0
"""A pair's activity is told at most this often (its place among its peer's connections)."""


class _Side:
    """One socket of a pair: the bytes read from the other side that it has yet to take."""

    __slots__ = ("ended", "fd", "held", "other", "pair", "reading", "sock", "writing")

    def __init__(self, pair: Pair, sock: socket.socket) -> None:
        self.pair = pair
        self.sock = sock
        self.fd = sock.fileno()
        self.other: _Side = self
        self.held = b""  # read from the other side, not yet written here
        self.reading = False  # a reader callback is set for this side
        self.writing = False  # a writer callback is set (it holds bytes)
        self.ended = False  # this side sent its end of file


class Pair:
    """A relayed connection: the client's socket and the gRPC server's (both non-blocking),
    and what its owner is told (``on_active``, ``on_closed``)."""

    def __init__(
        self,
        client: socket.socket,
        server: socket.socket,
        *,
        on_active: Callable[[], None],
        on_closed: Callable[[], None],
    ) -> None:
        self.client = _Side(self, client)
        self.server = _Side(self, server)
        self.client.other, self.server.other = self.server, self.client
        self.on_active = on_active
        self.on_closed = on_closed
        self.touched = 0.0
        self.closed = False


class Pump:
    """Moves every added :class:`Pair`'s bytes from ``loop``'s callbacks (call it there)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pairs: dict[Pair, None] = {}

    def __len__(self) -> int:
        """The pairs being relayed (a closed or cut pair is forgotten at once)."""
        return len(self._pairs)

    def add(self, pair: Pair) -> None:
        """Start moving ``pair``'s bytes; its sockets are the pump's from now on."""
        self._pairs[pair] = None
        for side in (pair.client, pair.server):
            self._read(side, on=True)

    def cut(self, pair: Pair) -> None:
        """Close ``pair`` at once, whatever is held dropped; ``on_closed`` is not called."""
        self._close(pair, tell=False)

    def stop(self) -> None:
        """Cut every pair."""
        for pair in list(self._pairs):
            self._close(pair, tell=False)

    def _readable(self, side: _Side) -> None:
        try:
            data = side.sock.recv(READ_CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(side.pair)
            return
        pair = side.pair
        if not data:
            self._ended(side)
            return
        now = time.monotonic()
        if now - pair.touched >= TOUCH_SECONDS:
            pair.touched = now
            pair.on_active()
        other = side.other
        try:
            sent = other.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(pair)
            return
        if sent < len(data):  # hold the rest; read no more from here until it is written
            other.held = data[sent:]
            self._read(side, on=False)
            self._write(other, on=True)

    def _writable(self, side: _Side) -> None:
        if side.held:
            try:
                sent = side.sock.send(side.held)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(side.pair)
                return
            side.held = side.held[sent:]
            if side.held:
                return
            self._read(side.other, on=True)  # what it held came from there: read on
        self._write(side, on=False)

    def _ended(self, side: _Side) -> None:
        """``side`` sent its end of file: pass it on and keep the other way open, unless the
        other side has ended too (then neither way carries bytes). The other side holds
        nothing of this one's here: this side is read only while it does not."""
        side.ended = True
        self._read(side, on=False)
        if side.other.ended:
            self._close(side.pair)
        else:
            self._shut(side.other)

    def _shut(self, side: _Side) -> None:
        try:
            side.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(side.pair)

    def _read(self, side: _Side, *, on: bool) -> None:
        if on and not side.reading:
            self._loop.add_reader(side.fd, self._readable, side)
        elif side.reading and not on:
            self._loop.remove_reader(side.fd)
        side.reading = on

    def _write(self, side: _Side, *, on: bool) -> None:
        if on and not side.writing:
            self._loop.add_writer(side.fd, self._writable, side)
        elif side.writing and not on:
            self._loop.remove_writer(side.fd)
        side.writing = on

    def _close(self, pair: Pair, *, tell: bool = True) -> None:
        if pair.closed:
            return
        pair.closed = True
        self._pairs.pop(pair, None)
        for side in (pair.client, pair.server):
            self._read(side, on=False)
            self._write(side, on=False)
            side.sock.close()
        if tell:
            pair.on_closed()
