"""gRPC requests that never finish arriving, spoken as raw HTTP/2 (the h2 library): what a
client that announces a message and sends only part of it makes the daemon hold.

Shared by tests/test_grpc_limits.py and benchmarks/bench_grpc_flood.py.
"""

from __future__ import annotations

import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

RESOLVE = "/kernelpolicy.v1.KernelPolicy/Resolve"


class HalfSent:
    """One TCP connection carrying ``streams`` Resolve calls, each announcing a message of
    ``announce`` bytes and sending ``send`` of them (``[``), as fast as the daemon's
    flow-control window lets, then nothing more. ``statuses`` maps each call the daemon ended
    to its grpc-status (``"reset"`` for a stream it reset)."""

    def __init__(self, address: str, streams: int, announce: int, send: int) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(0.05)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        self.statuses: dict[int, int | str] = {}
        self.streams: list[int] = []
        self.unsent: dict[int, bytes] = {}
        headers = [(":method", "POST"), (":scheme", "http"), (":path", RESOLVE),
                   (":authority", address), ("content-type", "application/grpc"),
                   ("te", "trailers")]  # fmt: skip
        for _ in range(streams):
            stream = self.h2.get_next_available_stream_id()
            self.h2.send_headers(stream, headers)
            self.streams.append(stream)
            self.unsent[stream] = b"\x00" + struct.pack(">I", announce) + b"[" * send
        self.sock.sendall(self.h2.data_to_send())
        self.closed = False

    @property
    def held(self) -> int:
        """Calls the daemon has not ended."""
        return sum(1 for stream in self.streams if stream not in self.statuses)

    def pump(self, seconds: float) -> None:
        """Send what the windows allow and read the daemon's frames, for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.closed:
            self._send_some()
            self._read_some()

    def _send_some(self) -> None:
        for stream, data in list(self.unsent.items()):
            if stream in self.statuses:
                del self.unsent[stream]
                continue
            try:
                room = min(
                    self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size
                )
            except h2.exceptions.StreamClosedError:
                del self.unsent[stream]
                continue
            if room > 0:
                self.h2.send_data(stream, data[:room])
                self.unsent[stream] = data[room:]
            if not self.unsent[stream]:
                del self.unsent[stream]
        try:
            self.sock.sendall(self.h2.data_to_send())
        except OSError:
            self.closed = True

    def _read_some(self) -> None:
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.h2.receive_data(data):
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                status = next(
                    (
                        value
                        for name, value in event.headers
                        if name in (b"grpc-status", "grpc-status")
                    ),
                    None,
                )
                if status is not None:
                    self.statuses[event.stream_id] = int(status)
            elif isinstance(event, h2.events.StreamReset):
                self.statuses.setdefault(event.stream_id, "reset")
        self.sock.sendall(self.h2.data_to_send())

    def close(self) -> None:
        self.sock.close()
