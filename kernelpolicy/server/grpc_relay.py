"""The gRPC TCP listener's connections, capped per peer: the daemon accepts TCP itself and relays
each connection's bytes to its gRPC server, which listens on a private unix socket.

grpc counts a listener's connections (``grpc.max_allowed_incoming_connections``) with no share
per peer and offers no hook on accept: grpcio has no server "from a file descriptor" (core's
``grpc_server_add_channel_from_fd`` is not bound, grpc/grpc#23760 open, #14386 closed unmerged)
and no external connection acceptor (C++ only). One address opened 256 idle connections, and
every other TCP client was refused until grpc closed them as idle (120 s); it reconnected.

So here, as for the HTTP listener (:mod:`.connections`, the same table): at most
``MAX_GRPC_CONNECTIONS_PER_PEER`` connections from one peer (:mod:`.peers`: all of loopback
one peer) and the listener's total; past either, the new connection is accepted and replaces the
least recently active one of its own peer (or of the peer holding the most), which is closed at
once. A flood displaces only the flooder's connections; a client that is using its connection
keeps it. The bytes are moved by :mod:`.relay_pump` from the event loop's reader and writer
callbacks, parsing nothing: TLS, when set, runs from the client to the gRPC server through it.

The gRPC server must still count calls and streams by the client's peer, not by the relay: each
relayed connection to the unix socket is bound to an abstract name that carries the client's
address (``kernelpolicy-relay/<random>/ipv4:10.0.0.7:5123``), which grpc gives as the call's
peer and :func:`~.peers.peer_key` reads. Only the daemon's user can connect to the socket (its
directory is private), so no client can name itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from typing import Any

from kernelpolicy.limits import (
    GRPC_DESCRIPTOR_SHARE,
    GRPC_RELAY_DESCRIPTORS,
    MAX_GRPC_CONNECTIONS,
    MAX_GRPC_CONNECTIONS_PER_PEER,
    MAX_RELAY_SCAN_ENTRIES,
)
from kernelpolicy.server.addresses import split_address
from kernelpolicy.server.connections import (
    ACCEPT_RETRY_SECONDS,
    Connection,
    ConnectionTable,
    descriptor_cap,
    peer_of,
)
from kernelpolicy.server.peers import RELAY_PREFIX
from kernelpolicy.server.relay_pump import Pair, Pump
from kernelpolicy.server.sockets import MAX_SOCKET_PATH_BYTES

RELAY_DIRECTORY_PREFIX = "kernelpolicy-grpc-"
"""The relay's private directories: this prefix, the daemon's process ID, ``-`` and a random
part (the process ID tells a directory whose daemon died from a running daemon's)."""
_RELAY_DIRECTORY = re.compile(re.escape(RELAY_DIRECTORY_PREFIX) + r"([0-9]{1,10})-[A-Za-z0-9_]+")
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def grpc_peer(address: Any) -> str:
    """A TCP client's address as grpc writes a peer: ``ipv4:10.0.0.7:5123``,
    ``ipv6:[2001:db8::7]:5123``."""
    host, port = str(address[0]), int(address[1])
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


def listen_sockets(address: str) -> list[socket.socket]:
    """Listening sockets for ``address`` (``HOST:PORT``), as grpc binds them: every address the
    host resolves to, on one port (the first's, for port 0); a wildcard host, one dual-stack
    socket (IPv4 also where the machine has no IPv6).

    Raises:
        OSError: One of them cannot be bound (the caller says why, as for grpc).
    """
    split = split_address(address)
    host, port = split.host or "", split.number or 0
    if host in _WILDCARDS:
        try:
            return [_listening(socket.AF_INET6, ("::", port), dual=True)]
        except OSError:
            return [_listening(socket.AF_INET, ("0.0.0.0", port))]
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    bound: list[socket.socket] = []
    try:
        for family, _, _, _, where in dict.fromkeys(found):
            if bound:  # the port of the first, as grpc gives one port for all
                port = bound[0].getsockname()[1]
            bound.append(_listening(family, (where[0], port, *where[2:])))
    except OSError:
        for sock in bound:
            sock.close()
        raise
    return bound


def _listening(family: int, where: Any, *, dual: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
        sock.bind(where)
        sock.listen(socket.SOMAXCONN)  # a burst waits in the kernel's queue, no descriptor
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def relay_connection_cap(limit: int = MAX_GRPC_CONNECTIONS) -> int:
    """Relayed connections: ``limit``, and at most ``GRPC_DESCRIPTOR_SHARE`` of the descriptor
    limit counted in ``GRPC_RELAY_DESCRIPTORS`` a connection."""
    return descriptor_cap(limit, GRPC_DESCRIPTOR_SHARE, GRPC_RELAY_DESCRIPTORS)


class _Link:
    """One relayed connection: its table entry and, once both sides are connected, the pair
    of sockets the pump moves bytes between."""

    def __init__(self, relay: GrpcRelay, connection: Connection) -> None:
        self.relay = relay
        self.connection = connection
        self.pair: Pair | None = None

    def active(self) -> None:
        self.relay.table.touch(self.connection)

    def closed(self) -> None:
        self.relay.forget(self)

    def cut(self) -> None:
        """Close both sides at once, what is buffered dropped, and forget it."""
        self.relay.forget(self)
        if self.pair is not None and self.relay.pump is not None:
            self.relay.pump.cut(self.pair)


class GrpcRelay:
    """Accepts on the gRPC TCP listeners under the connection caps; relays to ``path``.

    Args:
        on_close: Called with a reason (``replaced_peer_cap``, ``replaced_total_cap``) and the
            peer when the relay closes a connection to let a new one in.
        total: Connections in all (default :func:`relay_connection_cap`).
        per_peer: Connections from one peer (``MAX_GRPC_CONNECTIONS_PER_PEER``).
    """

    def __init__(
        self,
        *,
        on_close: Callable[[str, str], None] = lambda reason, peer: None,
        total: int | None = None,
        per_peer: int = MAX_GRPC_CONNECTIONS_PER_PEER,
    ) -> None:
        total = relay_connection_cap() if total is None else total
        self.table = ConnectionTable(total, min(per_peer, total))
        self._on_close = on_close
        self._directory = _private_directory()  # 0700, this user's
        self.path = os.path.join(self._directory, "grpc.sock")
        self._sockets: list[socket.socket] = []
        self._links: dict[Connection, _Link] = {}
        self._tasks: list[asyncio.Future[Any]] = []
        self.pump: Pump | None = None  # made on the running loop, by :meth:`start`

    def bind(self, address: str) -> int:
        """Listen on ``address`` (``HOST:PORT``); the port bound. Accepting starts with
        :meth:`start`.

        Raises:
            RuntimeError: It cannot be bound (as grpc's own ``add_insecure_port`` raises).
        """
        try:
            sockets = listen_sockets(address)
        except OSError as exc:
            raise RuntimeError(f"cannot bind {address}: {exc}") from None
        self._sockets.extend(sockets)
        return int(sockets[0].getsockname()[1])

    def start(self) -> None:
        """Accept on every bound socket from the running loop, which moves the bytes too."""
        self.pump = Pump(asyncio.get_running_loop())
        self._tasks = [asyncio.ensure_future(self._accept(sock)) for sock in self._sockets]

    async def stop(self) -> None:
        """Stop accepting and close the listening sockets; relayed connections stay (the gRPC
        server's graceful stop ends their calls) until :meth:`close`."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in self._sockets:
            sock.close()

    def close(self) -> None:
        """Cut every relayed connection left and remove the private directory."""
        for link in list(self._links.values()):
            link.cut()
        if self.pump is not None:
            self.pump.stop()
        shutil.rmtree(self._directory, ignore_errors=True)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue  # ECONNABORTED and the like: that client is gone
            with contextlib.suppress(OSError):  # as grpc and asyncio do: small frames go at once
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._admit(sock, address)
            await asyncio.sleep(0)  # its joining starts (a task cancelled unstarted closes nothing)

    def _admit(self, sock: socket.socket, address: Any) -> None:
        connection = Connection(peer_of(address), float("inf"))
        replaced = self.table.victim(connection.peer)
        if replaced is not None:
            victim, reason = replaced
            if victim.task is not None:  # still being joined
                victim.task.cancel()
            self._links[victim].cut()
            self._on_close(reason, victim.peer)
        self.table.add(connection)
        link = self._links[connection] = _Link(self, connection)
        connection.task = asyncio.ensure_future(self._join(link, sock, grpc_peer(address)))

    async def _join(self, link: _Link, sock: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.setblocking(False)
            _bind_name(upstream, peer)
            await loop.sock_connect(upstream, self.path)
        except (OSError, asyncio.CancelledError):
            sock.close()
            upstream.close()
            link.cut()
            return
        finally:
            link.connection.task = None
        if link.connection not in self._links or self.pump is None:  # cut while connecting
            sock.close()
            upstream.close()
            return
        link.pair = Pair(sock, upstream, on_active=link.active, on_closed=link.closed)
        self.pump.add(link.pair)

    def forget(self, link: _Link) -> None:
        if self._links.pop(link.connection, None) is not None:
            self.table.remove(link.connection)


def _private_directory() -> str:
    """A new 0700 directory for the relay's socket, named for this process: in the temp
    directory (``TMPDIR``), or in ``/tmp`` where that is missing or would make the socket's path
    longer than a unix socket's may be (the relay then still listens: before it, TCP did not
    depend on ``TMPDIR``). Those a daemon that died left there are removed first."""
    prefix = f"{RELAY_DIRECTORY_PREFIX}{os.getpid()}-"
    for where in (None, "/tmp"):
        try:  # TMPDIR may name a directory that is not there
            directory = tempfile.mkdtemp(prefix=prefix, dir=where)
        except OSError:
            continue
        remove_stale_directories(os.path.dirname(directory))
        if len(os.fsencode(os.path.join(directory, "grpc.sock"))) <= MAX_SOCKET_PATH_BYTES:
            return directory
        os.rmdir(directory)
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # its own error, if any


def remove_stale_directories(parent: str) -> list[str]:
    """Remove from ``parent`` the relay directories of this user's daemons that are gone (a
    daemon killed before it could remove its own): a real directory, this user's, named for a
    process that does not run here, whose socket is there and refuses a connection (no one
    listens: a daemon of another PID namespace sharing ``/tmp`` still answers on its own),
    holding nothing but that socket. What it removed.

    At most ``MAX_RELAY_SCAN_ENTRIES`` entries of ``parent`` are looked at; anything else
    (another user's, a link, a running process's, a socket that answers or is not made yet,
    other content) is left alone.
    """
    removed: list[str] = []
    try:
        entries = os.scandir(parent)
    except OSError:
        return removed
    with entries:
        for _, entry in zip(range(MAX_RELAY_SCAN_ENTRIES), entries, strict=False):
            match = _RELAY_DIRECTORY.fullmatch(entry.name)
            if match is None or _running(int(match[1])):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    continue
                socket_path = os.path.join(entry.path, "grpc.sock")
                if not _refused(socket_path):
                    continue
                os.unlink(socket_path)
                os.rmdir(entry.path)  # fails, and keeps it, if anything else is in it
            except OSError:
                continue
            removed.append(entry.path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or no pid at all: not ours to judge
    return True


def _refused(path: str) -> bool:
    """Whether ``path`` is a unix socket no one listens on (a connection refused at once)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # not there yet, not a socket, busy: left alone
    finally:
        probe.close()
    return False


def _bind_name(sock: socket.socket, peer: str) -> None:
    """Bind ``sock`` to an abstract name carrying ``peer`` (grpc's form), new each time."""
    for _ in range(8):  # a name taken by someone else: another draw
        try:
            sock.bind(f"\0{RELAY_PREFIX}{secrets.token_hex(6)}/{peer}")
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, "no free relay name")
