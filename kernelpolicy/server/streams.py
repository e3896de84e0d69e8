"""Open server streams (Watch, flagd EventStream), capped per peer and in all.

Each open stream holds a subscription and about 54 KiB for as long as its client keeps it, so
the daemon bounds them: ``MAX_WATCH_STREAMS_PER_PEER`` from one peer and
``MAX_WATCH_STREAMS`` from TCP peers in all, a peer being what :func:`~.peers.peer_key` groups
(all of loopback one peer, an IPv6 /64 one). Every client of the unix socket (the node's
workers, the daemon's own user) counts as the one peer ``unix``, outside the TCP total: no TCP
client, however many addresses it has, can take the workers' streams. A stream past a cap is
refused with ``RESOURCE_EXHAUSTED`` and a message naming the limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_WATCH_STREAMS, MAX_WATCH_STREAMS_PER_PEER
from kernelpolicy.server.peers import UNIX_PEER, peer_key


class PeerCounts:
    """What each peer holds, by the key :func:`peer_key` gives: the one counter per peer that
    the stream slots here and the call slots (:mod:`.peer_calls`) each keep of their own
    things. Checks no cap (its owner does) and does no I/O."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    @property
    def count(self) -> int:
        """Held by every peer together."""
        return sum(self._held.values())

    def of(self, key: str) -> int:
        """Held by the peer ``key`` (a :func:`peer_key`)."""
        return self._held.get(key, 0)

    def add(self, key: str) -> None:
        self._held[key] = self._held.get(key, 0) + 1

    def remove(self, key: str) -> None:
        """One fewer held by ``key``; a peer that holds none is forgotten."""
        held = self._held.pop(key, 0) - 1
        if held > 0:
            self._held[key] = held


class StreamSlots:
    """Counts open streams by peer; :meth:`slot` holds one for as long as a stream runs.

    Args:
        total: Streams from TCP peers in all (``MAX_WATCH_STREAMS``).
        per_peer: Streams from one peer (``MAX_WATCH_STREAMS_PER_PEER``).
    """

    def __init__(
        self, total: int = MAX_WATCH_STREAMS, per_peer: int = MAX_WATCH_STREAMS_PER_PEER
    ) -> None:
        self.total = total
        self.per_peer = per_peer
        self._open = PeerCounts()
        self.tcp = 0

    @property
    def count(self) -> int:
        """Open streams, unix socket included."""
        return self._open.count

    def take(self, peer: str) -> str:
        """Hold a slot for ``peer`` (a gRPC peer string); returns the key to give back.

        Raises:
            DaemonError: RESOURCE_EXHAUSTED, naming the cap that is reached.
        """
        key = peer_key(peer)
        held = self._open.of(key)
        if held >= self.per_peer:
            raise DaemonError(
                f"{held} streams already open from {key}, the most one peer may hold "
                f"(MAX_WATCH_STREAMS_PER_PEER {self.per_peer}); close one or reuse it",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
        if key != UNIX_PEER and self.tcp >= self.total:
            raise DaemonError(
                f"{self.tcp} streams already open over TCP, the most the daemon holds "
                f"(MAX_WATCH_STREAMS {self.total}); try again later",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
        self._open.add(key)
        self.tcp += key != UNIX_PEER
        return key

    def give_back(self, key: str) -> None:
        self._open.remove(key)
        self.tcp -= key != UNIX_PEER

    @contextmanager
    def slot(self, peer: str) -> Iterator[None]:
        key = self.take(peer)
        try:
            yield
        finally:
            self.give_back(key)
