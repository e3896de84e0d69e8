"""gRPC calls spoken as raw HTTP/2 (the h2 library), the one raw client of the tests and
benchmarks: what a client that announces a message and sends only part of it makes the daemon
hold (:class:`HalfSent`), what one peer can hold and whether another is still served meanwhile
(:class:`H2Calls`).

A connection binds its source address (``127.0.0.2`` and so on: Linux answers the whole
127.0.0.0/8 on loopback) and can open a new call whenever it likes. The daemon counts all of
127.0.0.0/8 as one peer (kernelpolicy/server/peers.py): clients from several 127.x addresses
share one peer's caps, unless the test narrows that group to 127.0.0.1/32
(``peers.LOOPBACK_V4``, as tests/test_grpc_peers.py and tests/test_grpc_request_deadline.py do
for two peers on one machine; tests/test_grpc_peer_groups.py shows five of them as one). Shared
by tests/test_grpc_peers.py, tests/test_grpc_peer_groups.py, tests/test_grpc_limits.py,
tests/test_grpc_request_deadline.py, benchmarks/bench_grpc_peers.py and
benchmarks/bench_grpc_flood.py.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions

RESOLVE = "/kernelpolicy.v1.KernelPolicy/Resolve"
WATCH = "/kernelpolicy.v1.KernelPolicy/Watch"
EMPTY = b"\x00\x00\x00\x00\x00"
"""A whole gRPC message of zero bytes: an empty ResolveRequest or WatchRequest."""


def half_sent(announce: int, send: int) -> bytes:
    """The start of a message announcing ``announce`` bytes, ``send`` of them (``[``) sent."""
    return b"\x00" + struct.pack(">I", announce) + b"[" * send


class H2Calls:
    """One TCP connection from ``source`` to the daemon at ``address`` (``host:port``).

    :meth:`open` starts a call of ``path`` sending ``payload`` (ended there if ``end``), as fast
    as the daemon's flow-control windows let; :meth:`pump` moves frames. ``statuses`` maps each
    call the daemon ended to its grpc-status (``"reset"`` for a stream it reset), ``answered``
    the calls that got a message back, ``details`` each ended call's grpc-message; ``settled``
    says whether the daemon's HTTP/2 SETTINGS have arrived.
    """

    def __init__(self, address: str, source: str = "127.0.0.1") -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self.sock = socket.create_connection((host, int(port)), timeout=5,
                                             source_address=(source, 0))  # fmt: skip
        self.sock.settimeout(0.02)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        self.statuses: dict[int, int | str] = {}
        self.details: dict[int, str] = {}
        self.answered: set[int] = set()
        self.streams: list[int] = []
        self.unsent: dict[int, tuple[bytes, bool]] = {}
        self.closed = False
        self.settled = False  # the daemon's SETTINGS are in
        self._flush()

    def open(self, path: str, payload: bytes, *, end: bool) -> int:
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path),
                   (":authority", self.address), ("content-type", "application/grpc"),
                   ("te", "trailers")]  # fmt: skip
        stream = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream, headers)
        self.streams.append(stream)
        self.unsent[stream] = (payload, end)
        self._send_some()
        return stream

    @property
    def held(self) -> int:
        """Calls the daemon has not ended."""
        return sum(1 for stream in self.streams if stream not in self.statuses)

    def pump(self, seconds: float) -> None:
        """Send what the windows allow and read the daemon's frames, for ``seconds``."""
        deadline = time.monotonic() + seconds
        while not self.closed:
            self._send_some()
            self._read_some()
            if time.monotonic() >= deadline:
                break

    def _send_some(self) -> None:
        for stream, (data, end) in list(self.unsent.items()):
            rest = b"" if stream in self.statuses else self._send_data(stream, data, end)
            if rest:
                self.unsent[stream] = (rest, end)
            else:
                del self.unsent[stream]
        self._flush()

    def _send_data(self, stream: int, data: bytes, end: bool) -> bytes:
        """Send what the stream's window lets of ``data``; the rest, to send later."""
        try:
            room = min(self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size)
            if room > 0 or not data:
                self.h2.send_data(stream, data[:room], end_stream=end and len(data) <= room)
                return data[room:]
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return b""
        return data

    def _flush(self) -> None:
        try:
            self.sock.sendall(self.h2.data_to_send())
        except OSError:
            self.closed = True

    def _read_some(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return
        for event in events:
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                fields = {str(name): str(value) for name, value in event.headers}
                if "grpc-status" in fields:
                    self.statuses[event.stream_id] = int(fields["grpc-status"])
                    self.details[event.stream_id] = unquote(fields.get("grpc-message", ""))
            elif isinstance(event, h2.events.DataReceived):
                self.answered.add(event.stream_id)
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self.settled = True
            elif isinstance(event, h2.events.StreamReset):
                self.statuses.setdefault(event.stream_id, "reset")
        self._flush()

    def close(self) -> None:
        self.sock.close()
        self.closed = True


class HalfSent(H2Calls):
    """One connection from 127.0.0.1 carrying ``streams`` Resolve calls, each announcing a
    message of ``announce`` bytes and sending ``send`` of them (``[``), as fast as the daemon's
    flow-control window lets, then nothing more."""

    def __init__(self, address: str, streams: int, announce: int, send: int) -> None:
        super().__init__(address)
        for _ in range(streams):
            self.open(RESOLVE, half_sent(announce, send), end=False)
