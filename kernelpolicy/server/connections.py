"""The HTTP listener's connections: how many, from whom, until when; accepted so that no client
can starve the daemon.

A held connection costs a file descriptor, and the descriptors are shared with the unix socket
the node's workers use and with gRPC: a listener that accepts without bound lets idle clients
take them all (then nothing answers, ``/healthz`` included). So the listener here

- holds at most ``MAX_HTTP_CONNECTIONS`` connections, and never more than
  ``HTTP_DESCRIPTOR_SHARE`` of the descriptor limit, so the rest stays for everything else;
- holds at most ``MAX_HTTP_CONNECTIONS_PER_PEER`` from one peer (:func:`peer_of`: an address,
  all of loopback, or an IPv6 /64);
- at either cap, still accepts: the new connection replaces the oldest one of the same peer
  (per-peer cap) or of the peer holding the most (total cap). A flood displaces only the
  flooder's own connections, and a new client (a kubelet probe, a Prometheus scrape) always
  gets in;
- closes a connection that has not sent its request's headers within
  ``MAX_HTTP_HEADER_SECONDS`` of being accepted, or within ``MAX_HTTP_IDLE_SECONDS`` of its last
  answer, or whose request runs past twice ``MAX_HTTP_BODY_SECONDS`` (the handler answers 408
  at once ``MAX_HTTP_BODY_SECONDS`` pass while reading the body).

:class:`ConnectionTable` decides (no I/O); :class:`GuardedListener` accepts, tracks and closes.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelpolicy.limits import (
    HTTP_DESCRIPTOR_SHARE,
    MAX_HTTP_BODY_SECONDS,
    MAX_HTTP_CONNECTIONS,
    MAX_HTTP_CONNECTIONS_PER_PEER,
    MAX_HTTP_HEADER_SECONDS,
    MAX_HTTP_IDLE_SECONDS,
)
from kernelpolicy.server.peers import peer_group

SWEEP_SECONDS = 1.0
"""How often deadlines are checked: a timeout is enforced within this much of its limit."""
ACCEPT_RETRY_SECONDS = 0.1
"""Pause after ``accept`` fails for want of descriptors or memory (as asyncio's own servers)."""
CLOSE_REASONS = (
    "client_hung_up", "header_timeout", "idle_timeout", "request_timeout",
    "replaced_peer_cap", "replaced_total_cap",
)  # fmt: skip
"""Why the daemon closed a connection, or saw it closed mid-request: a closed set (metrics)."""
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True)
class Timeouts:
    """Seconds a connection may take: to send its first request's headers (``header``), a
    request's body (``body``; the request is cut at twice that), and to send the next request's
    headers after an answer (``idle``)."""

    header: float = MAX_HTTP_HEADER_SECONDS
    body: float = MAX_HTTP_BODY_SECONDS
    idle: float = MAX_HTTP_IDLE_SECONDS


LIMITS = Timeouts()
"""The timeouts of ``kernelpolicy.limits``."""


def descriptor_cap(limit: int, share: float, per_connection: int = 1) -> int:
    """Connections a listener may hold: ``limit``, and at most ``share`` of this process's soft
    descriptor limit (``RLIMIT_NOFILE``) counted in ``per_connection`` descriptors a
    connection; at least one."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, int(soft * share / per_connection)))


def connection_cap(limit: int = MAX_HTTP_CONNECTIONS) -> int:
    """The total cap for this process: ``limit``, and at most ``HTTP_DESCRIPTOR_SHARE`` of the
    soft descriptor limit (``RLIMIT_NOFILE``)."""
    return descriptor_cap(limit, HTTP_DESCRIPTOR_SHARE)


@dataclass(eq=False)
class Connection:
    """One accepted connection. ``phase``: ``header`` (no request yet), ``busy`` (a request is
    being answered) or ``idle`` (kept alive between requests)."""

    peer: str
    deadline: float
    phase: str = "header"
    transport: asyncio.Transport | None = None  # None until accepted (TLS handshake)
    task: asyncio.Future[Any] | None = None  # the handshake, cancelled to close before it ends
    cut: bool = False  # closed by the listener (a cap or a deadline), not by its client


@dataclass
class ConnectionTable:
    """Connections by peer, oldest first; which one a new connection replaces. No I/O.

    Args:
        total: Connections in all.
        per_peer: Connections from one peer (:func:`peer_of`).
    """

    total: int
    per_peer: int
    count: int = 0
    _by_peer: dict[str, dict[Connection, None]] = field(default_factory=dict)

    def victim(self, peer: str) -> tuple[Connection, str] | None:
        """The connection a new one from ``peer`` replaces, and why; ``None`` if it fits."""
        mine = self._by_peer.get(peer)
        if mine is not None and len(mine) >= self.per_peer:
            return next(iter(mine)), "replaced_peer_cap"
        if self.count >= self.total:
            heaviest = max(self._by_peer.values(), key=len)  # ties: the peer seen first
            return next(iter(heaviest)), "replaced_total_cap"
        return None

    def add(self, connection: Connection) -> None:
        self._by_peer.setdefault(connection.peer, {})[connection] = None
        self.count += 1

    def remove(self, connection: Connection) -> bool:
        """Forget ``connection``; ``False`` if it was already gone."""
        mine = self._by_peer.get(connection.peer)
        if mine is None or mine.pop(connection, False) is False:
            return False
        if not mine:
            del self._by_peer[connection.peer]
        self.count -= 1
        return True

    def touch(self, connection: Connection) -> None:
        """``connection`` was active: it becomes its peer's newest, the last it would replace
        (the gRPC relay replaces a peer's least recently active connection, not its oldest)."""
        mine = self._by_peer.get(connection.peer)
        if mine is not None and mine.pop(connection, False) is None:
            mine[connection] = None

    def expired(self, now: float) -> list[Connection]:
        return [c for mine in self._by_peer.values() for c in mine if c.deadline <= now]

    def of_peer(self, peer: str) -> int:
        return len(self._by_peer.get(peer, ()))

    def of(self, connection: Connection) -> Connection | None:
        """``connection`` if the table still holds it."""
        return connection if connection in self._by_peer.get(connection.peer, ()) else None


def peer_of(address: Any) -> str:
    """The peer of an accepted socket's address: its host without the port, grouped as every
    per-peer cap groups it (:func:`~kernelpolicy.server.peers.peer_group`: all of loopback
    one peer, an IPv6 /64 one)."""
    return peer_group(str(address[0]) if isinstance(address, tuple) and address else str(address))


class _Tracked(asyncio.Protocol):
    """Passes everything to aiohttp's protocol; tells the listener when the connection ends."""

    def __init__(self, inner: Any, connection: Connection, listener: GuardedListener) -> None:
        self._inner = inner
        self._connection = connection
        self._listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._listener.attached(self._connection, transport)
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.detached(self._connection)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class GuardedListener:
    """Accepts on a listening socket under the caps, and closes connections past deadlines.

    Args:
        factory: Makes the protocol of one connection (aiohttp's ``runner.server``).
        ssl_context: TLS, or ``None``.
        on_close: Called with one of ``CLOSE_REASONS`` and the peer when the listener closes a
            connection, or (:meth:`hung_up`) when a client leaves in the middle of a request.
        total: The total cap (default :func:`connection_cap`).
        per_peer: The per-peer cap.
        timeouts: The deadlines (default: the ``MAX_HTTP_*_SECONDS`` limits).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        ssl_context: ssl.SSLContext | None = None,
        *,
        on_close: Callable[[str, str], None] = lambda reason, peer: None,
        total: int | None = None,
        per_peer: int = MAX_HTTP_CONNECTIONS_PER_PEER,
        timeouts: Timeouts = LIMITS,
    ) -> None:
        total = connection_cap() if total is None else total
        self.timeouts = timeouts
        self.table = ConnectionTable(total, min(per_peer, total))
        self._factory = factory
        self._ssl = ssl_context
        self._on_close = on_close
        self._by_transport: dict[asyncio.Transport, Connection] = {}
        self._tasks: list[asyncio.Future[Any]] = []
        self._sock: socket.socket | None = None

    def start(self, sock: socket.socket) -> None:
        """Serve ``sock`` (bound and listening) from the running loop."""
        sock.setblocking(False)
        self._sock = sock
        self._tasks = [asyncio.ensure_future(self._accept()), asyncio.ensure_future(self._sweep())]

    async def stop(self) -> None:
        """Stop accepting and close the listening socket; open connections are left to aiohttp's
        own shutdown, and any still shaking hands are cut."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
        for connection in self.table.expired(float("inf")):
            if connection.transport is None:
                self._close(connection, None)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                sock, address = await loop.sock_accept(self._sock)
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue  # ECONNABORTED and the like: that client is gone
            self._admit(sock, peer_of(address), loop)
            # Let the replaced connection's descriptor close before the next accept.
            await asyncio.sleep(0)

    def _admit(self, sock: socket.socket, peer: str, loop: asyncio.AbstractEventLoop) -> None:
        replaced = self.table.victim(peer)
        if replaced is not None:
            self._close(*replaced)
        connection = Connection(peer, loop.time() + self.timeouts.header)
        self.table.add(connection)
        connection.task = asyncio.ensure_future(self._attach(connection, sock, loop))

    async def _attach(
        self, connection: Connection, sock: socket.socket, loop: asyncio.AbstractEventLoop
    ) -> None:
        try:
            await loop.connect_accepted_socket(
                lambda: _Tracked(self._factory(), connection, self), sock, ssl=self._ssl,
                ssl_handshake_timeout=self.timeouts.header if self._ssl else None,
            )  # fmt: skip
        except (OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError):
            sock.close()  # a failed or cut handshake (the transport, if any, is closed)
            self.table.remove(connection)
        finally:
            connection.task = None

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        timeouts = self.timeouts
        every = min(SWEEP_SECONDS, timeouts.header / 2, timeouts.body / 2, timeouts.idle / 2)
        while True:
            await asyncio.sleep(every)
            for connection in self.table.expired(loop.time()):
                reason = {"header": "header_timeout", "idle": "idle_timeout"}
                self._close(connection, reason.get(connection.phase, "request_timeout"))

    def _close(self, connection: Connection, reason: str | None) -> None:
        if not self.table.remove(connection):
            return
        connection.cut = True
        if connection.transport is not None:
            connection.transport.abort()  # close() would wait for a client that never reads
        elif connection.task is not None:
            connection.task.cancel()
        if reason is not None:
            self._on_close(reason, connection.peer)

    def attached(self, connection: Connection, transport: asyncio.Transport) -> None:
        connection.transport = transport
        self._by_transport[transport] = connection

    def detached(self, connection: Connection) -> None:
        self.table.remove(connection)
        if connection.transport is not None and connection.phase != "busy":
            self._by_transport.pop(connection.transport, None)
        # else: the request's end (request_finished) forgets it

    def request_started(self, transport: Any) -> None:
        """A request's headers are in: it has twice the body timeout to be answered."""
        self._set(transport, "busy", 2 * self.timeouts.body)

    def request_finished(self, transport: Any) -> None:
        """A request is answered: the next one's headers are due within the idle timeout."""
        self._set(transport, "idle", self.timeouts.idle)
        connection = self._by_transport.get(transport)
        if connection is not None and self.table.of(connection) is None:
            del self._by_transport[transport]  # it went while the request ran

    def hung_up(self, transport: Any) -> None:
        """A request's client went away before its answer: counted as ``client_hung_up``
        (unless the listener itself cut the connection, which it counted then)."""
        connection = self._by_transport.get(transport)
        if connection is not None and not connection.cut:
            self._on_close("client_hung_up", connection.peer)

    def _set(self, transport: Any, phase: str, seconds: float) -> None:
        connection = self._by_transport.get(transport)
        if connection is not None:
            connection.phase = phase
            connection.deadline = asyncio.get_running_loop().time() + seconds
