"""A worker's end of the report socket: run-time events to the node's daemon, off the call path.

:func:`reporter_for` gives the process one :class:`Reporter` per report socket; ``resolve()``
and ``connect()`` attach it to their Resolution only where a daemon socket is configured
(``KERNELPOLICY_SOCKET``) or the default private one has a report socket beside it. A call
that loads an implementation, or fails over to the fallback, appends one event to a bounded
queue (``REPORT_QUEUE_EVENTS``; past it the event is dropped and counted in ``dropped``) and
returns: no lock, no I/O, no wait. A background thread, started with the first event, sends
batches every ``FLUSH_SECONDS``, adding the output guards' repaired counts (read there, so a
GPU counter's host synchronisation happens in that thread, never in a call). With the daemon
away, events wait coalesced (one entry per feature, implementation, kind and detail, at most
``REPORT_QUEUE_EVENTS`` entries) and the thread tries again at the next flush.

No grpc here: ``import kernelpolicy`` stays light.
"""

from __future__ import annotations

import atexit
import collections
import errno
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from kernelpolicy.errors import DaemonError, KernelPolicyError
from kernelpolicy.limits import (
    MAX_REPORT_COUNT,
    MAX_REPORT_DETAIL_CHARS,
    MAX_REPORT_LINE_BYTES,
    REPORT_BATCH_EVENTS,
    REPORT_QUEUE_EVENTS,
)
from kernelpolicy.safeio import parse_json
from kernelpolicy.server.reports import (
    Event,
    EventKind,
    encode_events,
    peer_credentials,
)
from kernelpolicy.server.sockets import report_path
from kernelpolicy.trust import owner_ok

__all__ = ["FLUSH_SECONDS", "Reporter", "report_path", "reporter_for", "request_clear"]

FLUSH_SECONDS = 1.0
"""How often the background thread sends what the worker saw."""
SEND_TIMEOUT = 2.0
"""Seconds the background thread waits on a stalled daemon before it tries again later."""
EXIT_FLUSH_SECONDS = 0.5
"""What a worker's exit waits at most to send its last events."""

_Key = tuple[EventKind, str, str, str]  # kind, feature, impl, detail


class Reporter:
    """Batches a worker's run-time events and sends them to its daemon's report socket.

    Attributes:
        path: The report socket.
        dropped: Events dropped because the queue was full (the daemon away or slow).
        sent: Events delivered.
        send_failures: Flushes that could not reach the daemon.
    """

    def __init__(
        self, path: Path, *, capacity: int = REPORT_QUEUE_EVENTS, interval: float = FLUSH_SECONDS
    ) -> None:
        self.path = path
        self.capacity = capacity
        self.interval = interval
        self.dropped = 0
        self.sent = 0
        self.send_failures = 0
        self._queue: collections.deque[Event] = collections.deque()
        self._pending: dict[_Key, int] = {}  # drained, coalesced, not delivered yet
        self._guards: list[list[Any]] = []  # [feature, impl, guard, repaired count taken]
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._start_lock = threading.Lock()
        self._last_failed = False

    # The call path: an append, never a wait.

    def report(
        self, kind: EventKind | str, feature: str, impl: str, count: int = 1, detail: str = ""
    ) -> None:
        """Queue one event (dropped and counted when the queue is full)."""
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            return
        self._queue.append(
            Event(EventKind(kind), feature, impl, count, detail[:MAX_REPORT_DETAIL_CHARS])
        )
        if self._thread is None:
            self._start()

    def loaded(self, feature: str, impl: str, function: Any) -> None:
        """``impl`` was loaded to serve ``feature``: say so, and watch its output guards."""
        guard = function
        while "repaired" in getattr(guard, "__dict__", {}):  # the guards, outermost first
            self._guards.append([feature, impl, guard, 0])
            guard = guard.kernel
        self.report(EventKind.SERVED, feature, impl)

    # The background thread.

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kernelpolicy-reporter", daemon=True
                )
                self._thread.start()
                atexit.register(self.flush, EXIT_FLUSH_SECONDS)

    def flush(self, timeout: float = 5.0) -> bool:
        """Ask the thread to send now and wait (at most ``timeout`` s) until what was seen so
        far is delivered; False when the daemon could not be reached or time ran out."""
        if self._thread is None:
            self._start()
        deadline = time.monotonic() + timeout
        while True:
            self._idle.clear()
            self._wake.set()
            if not self._idle.wait(max(0.0, deadline - time.monotonic())):
                return False
            if not self._pending and not self._queue:
                return True
            if self._last_failed or time.monotonic() >= deadline:
                return False

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self._send_pending()
            except Exception:  # a reporter must never take its worker down
                self.send_failures += 1
                self._close()
            self._idle.set()

    def _drain(self) -> None:
        for watched in self._guards:
            feature, impl, guard, taken = watched
            count = int(guard.repaired)  # a GPU counter synchronises here, in this thread
            if count > taken:
                self._add((EventKind.GUARD_TRIP, feature, impl, str(guard.name)), count - taken)
                watched[3] = count
        while self._queue:
            event = self._queue.popleft()
            self._add((event.kind, event.feature, event.impl, event.detail), event.count)

    def _add(self, key: _Key, count: int) -> None:
        if key in self._pending or len(self._pending) < self.capacity:
            self._pending[key] = self._pending.get(key, 0) + count
        else:
            self.dropped += 1

    def _send_pending(self) -> None:
        self._drain()
        while self._pending:
            keys = list(self._pending)[:REPORT_BATCH_EVENTS]
            batch = [
                Event(k[0], k[1], k[2], min(self._pending[k], MAX_REPORT_COUNT), k[3]) for k in keys
            ]
            self._last_failed = not self._send(encode_events(batch))
            if self._last_failed:
                self.send_failures += 1
                return
            for key in keys:
                del self._pending[key]
            self.sent += len(batch)

    def _send(self, line: bytes) -> bool:
        try:
            if self._sock is None:
                self._sock = _connect(self.path, SEND_TIMEOUT)
            self._sock.sendall(line)
            return True
        except (OSError, DaemonError):
            self._close()
            return False

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _connect(path: Path, timeout: float) -> socket.socket:
    """A connection to the report socket ``path`` whose daemon runs as root or this user.

    Raises:
        DaemonError: Another user's process listens there (the message starts "refusing").
        OSError: Nothing answers.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        pid, uid, _ = peer_credentials(sock)
    except OSError:
        sock.close()
        raise
    if not owner_ok(uid):
        sock.close()
        raise DaemonError(
            f"refusing the daemon on unix:{path}: it runs as uid {uid} (pid {pid}), neither "
            f"root nor uid {os.geteuid()} (you)"
        )
    return sock


_REPORTERS: dict[Path, Reporter] = {}


def _forget_in_child() -> None:
    """A forked worker has none of its parent's threads or sockets: it starts its own."""
    _REPORTERS.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def reporter_for(path: Path) -> Reporter:
    """This process's reporter for the report socket ``path`` (one per socket)."""
    reporter = _REPORTERS.get(path)
    if reporter is None:
        reporter = _REPORTERS.setdefault(path, Reporter(path))
    return reporter


def request_clear(address: str, feature: str, timeout: float) -> dict[str, Any]:
    """Ask the daemon at ``address`` to lift ``feature``'s halts: ``{"cleared": [...]}`` or
    ``{"error": ...}``.

    Raises:
        DaemonError: ``address`` is not a unix socket, the daemon is refused, or nothing answers.
    """
    path = report_path(address, explicit=True)
    if path is None:
        raise DaemonError(
            f"{address}: --clear-halt goes over the daemon's unix socket only (its peer "
            "credentials say who asks); give --address unix:/path"
        )
    try:
        with _connect(path, timeout) as sock:
            sock.sendall(json.dumps({"clear_halt": feature}).encode() + b"\n")
            reply = sock.makefile("rb").readline(MAX_REPORT_LINE_BYTES)
    except OSError as exc:
        reason = "no such socket" if exc.errno == errno.ENOENT else exc.strerror or str(exc)
        raise DaemonError(f"unix:{path}: not answering ({reason})") from None
    try:  # bounded: depth, strict numbers (a deep answer raised RecursionError)
        answer = parse_json(reply.decode("utf-8", "replace"), "answer", KernelPolicyError)
    except KernelPolicyError:
        answer = None
    if not isinstance(answer, dict):
        raise DaemonError(f"unix:{path}: no answer to --clear-halt (closed the connection)")
    return answer
