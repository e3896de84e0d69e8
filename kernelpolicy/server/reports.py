"""The report socket's wire format: what workers tell their node's daemon, and how it is read.

gRPC does not hand a server the peer credentials of a unix-socket connection, so reports travel
over a second unix socket beside the daemon's gRPC socket, in the same private directory
(``kernelpolicy.sock`` -> ``kernelpolicy.report.sock``), where the daemon reads each
connection's ``SO_PEERCRED`` and accepts only root and its own user.

One message per line, UTF-8 JSON of at most ``MAX_REPORT_LINE_BYTES``:

* ``{"events": [{"kind": "guard_trip", "feature": "sampler.greedy", "impl": "aiter",
  "count": 3, "detail": "clamp_token_ids"}, ...]}``: at most ``REPORT_BATCH_EVENTS`` events,
  ``kind`` one of :data:`EVENT_KINDS`. No answer: a worker never waits on its daemon.
* ``{"clear_halt": "sampler.greedy"}``: answered with one line, ``{"cleared": [impls]}`` or
  ``{"error": "..."}``.

Nothing here imports grpc: workers load it with ``import kernelpolicy``'s reporter.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import (
    MAX_FLAG_KEY_CHARS,
    MAX_REPORT_COUNT,
    MAX_REPORT_DETAIL_CHARS,
    MAX_REPORT_LINE_BYTES,
    REPORT_BATCH_EVENTS,
)
from kernelpolicy.safeio import parse_json
from kernelpolicy.server.sockets import report_socket_path

__all__ = [
    "EVENT_KINDS",
    "Event",
    "EventKind",
    "Rejection",
    "ReportError",
    "encode_events",
    "parse_line",
    "peer_credentials",
    "report_socket_path",
]


class EventKind(StrEnum):
    """What a worker saw (closed set; also the ``kind`` label of the daemon's metrics)."""

    SERVED = "served"  # the implementation was loaded to serve calls in a worker
    GUARD_TRIP = "guard_trip"  # its output guard repaired outputs (count: how many)
    RUNTIME_FAILURE = "runtime_failure"  # it failed when loaded or called; the fallback serves


EVENT_KINDS = tuple(kind.value for kind in EventKind)


class Rejection(StrEnum):
    """Why the daemon refused a report (closed set; the ``reason`` label of its metric)."""

    PEER_UID = "peer_uid"  # the connection's process runs as neither root nor the daemon's user
    MALFORMED = "malformed"  # not a message of this format
    TOO_LARGE = "too_large"  # a line over MAX_REPORT_LINE_BYTES
    UNKNOWN = "unknown"  # an event names a feature or implementation the policies lack
    CONNECTIONS = "connections"  # a connection replaced past MAX_REPORT_CONNECTIONS


class ReportError(KernelPolicyError):
    """A report line that is not a message of this format (``rejection`` says which way)."""

    def __init__(self, message: str, rejection: Rejection = Rejection.MALFORMED) -> None:
        super().__init__(message)
        self.rejection = rejection


@dataclass(frozen=True)
class Event:
    """One thing a worker saw, for ``count`` times, about one implementation of a feature."""

    kind: EventKind
    feature: str
    impl: str
    count: int = 1
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "feature": self.feature,
            "impl": self.impl,
            "count": self.count,
            "detail": self.detail,
        }


_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a connected unix socket."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return int(pid), int(uid), int(gid)


def encode_events(events: list[Event]) -> bytes:
    """One report line (the caller keeps ``len(events) <= REPORT_BATCH_EVENTS``)."""
    document = {"events": [event.to_dict() for event in events]}
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def parse_line(line: bytes) -> list[Event] | str:
    """A report line: its events, or the feature of a clear-halt request.

    Raises:
        ReportError: The line is too long, not JSON, or not a message of this format.
    """
    if len(line) > MAX_REPORT_LINE_BYTES:
        raise ReportError(
            f"a line of {len(line)} bytes is over MAX_REPORT_LINE_BYTES ({MAX_REPORT_LINE_BYTES})",
            Rejection.TOO_LARGE,
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportError("a line that is not UTF-8") from None
    document = parse_json(text, "report", ReportError, limit=4)
    if not isinstance(document, dict) or len(document) != 1:
        raise ReportError('expected {"events": [...]} or {"clear_halt": FEATURE}')
    if "clear_halt" in document:
        return _text(document["clear_halt"], "clear_halt", MAX_FLAG_KEY_CHARS, empty=False)
    events = document.get("events")
    if not isinstance(events, list) or len(events) > REPORT_BATCH_EVENTS:
        raise ReportError(f"'events': expected a list of at most {REPORT_BATCH_EVENTS} events")
    return [_event(item) for item in events]


_EVENT_KEYS = frozenset({"kind", "feature", "impl", "count", "detail"})


def _event(item: object) -> Event:
    if not isinstance(item, dict) or not _EVENT_KEYS.issuperset(item):
        raise ReportError(f"an event: expected an object with keys {sorted(_EVENT_KEYS)}")
    kind = item.get("kind")
    if kind not in EVENT_KINDS:
        raise ReportError(f"an event's kind: expected one of {', '.join(EVENT_KINDS)}")
    count = item.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_REPORT_COUNT:
        raise ReportError(f"an event's count: expected an integer in 1-{MAX_REPORT_COUNT}")
    return Event(
        EventKind(kind),
        _text(item.get("feature"), "feature", MAX_FLAG_KEY_CHARS, empty=False),
        _text(item.get("impl"), "impl", MAX_FLAG_KEY_CHARS, empty=False),
        count,
        _text(item.get("detail", ""), "detail", MAX_REPORT_DETAIL_CHARS, empty=True),
    )


def _text(value: object, key: str, limit: int, *, empty: bool) -> str:
    if not isinstance(value, str) or len(value) > limit or (not value and not empty):
        raise ReportError(f"{key!r}: expected a string of {0 if empty else 1}-{limit} characters")
    return value
