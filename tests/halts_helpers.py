"""Set-ups the halt tests share: a daemon whose halts file a test can block, a report of
the planted greedy kernel's guard trips (``tests.helpers.GUARDED_GREEDY_POLICY``) that halts it,
and the reason it is halted with and a policy change that keeps the halt (:data:`OTHER`)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kernelpolicy.server.report_listener import ReportListener
from kernelpolicy.server.reports import Event, EventKind, encode_events
from kernelpolicy.server.sockets import halts_file_path
from kernelpolicy.testing.daemon import RunningDaemon, running_daemon
from tests.helpers import ROOT, fixture
from tests.http_helpers import metric_line

GUARDED = "sampler.greedy"
"""The feature of ``GUARDED_GREEDY_POLICY``, whose ``planted`` kernel halts at two guard trips."""
GUARD_TRIPS_WHY = (
    "its output guard repaired 2 output(s) in this node's workers (halt_on.guard_trips = 2)"
)
"""Why a daemon halted the planted kernel after :func:`report_guard_trips`."""
OTHER = """
[features."fleet.other"]
description = "a feature the change adds"
fallback = "current"
in_process = false
[[features."fleet.other".candidates]]
impl = "current"
"""
"""A feature a policy change adds (appended to a pack): a change that keeps another feature's
halt."""


def report_guard_trips(report_socket: Path) -> None:
    """What a node's workers report when the planted greedy kernel's output guard repaired two
    outputs, sent to a daemon's report socket: enough for its ``halt_on.guard_trips = 2``."""
    trips = Event(EventKind.GUARD_TRIP, GUARDED, "planted", 2, "clamp_token_ids")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as report:
        report.connect(str(report_socket))
        report.sendall(encode_events([trips]))


@dataclass
class HaltsDaemon:
    """A daemon on the bundled policies, listening on a unix socket (so with a report listener
    and a halts file beside it) and on HTTP."""

    running: RunningDaemon
    url: str
    listener: ReportListener
    halts_file: Path

    def publish(self) -> None:
        """The listener writes the node's halts (none) again, on the daemon's loop."""

        async def publish() -> None:
            self.listener.publish({})

        self.running.call(publish())

    def block(self) -> None:
        """The halts file's name taken by a directory: every write of it fails."""
        self.halts_file.unlink()
        (self.halts_file / "taken").mkdir(parents=True)

    def free(self) -> None:
        """The directory that took the halts file's name gone: a write succeeds again."""
        shutil.rmtree(self.halts_file)

    def unpublished(self) -> str:
        """The /metrics line of the ``kernelpolicy_halts_unpublished`` gauge."""
        return metric_line(self.url, "kernelpolicy_halts_unpublished")


@contextmanager
def halts_daemon(directory: Path) -> Iterator[HaltsDaemon]:
    """A :class:`HaltsDaemon` whose socket is ``directory``/kp.sock (a short path: a socket's
    holds 107 bytes), on the CPU snapshot."""
    address = f"unix:{directory / 'kp.sock'}"
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False, http="127.0.0.1:0"
    ) as running:
        url = running.daemon.fleet.url
        assert url is not None
        [listener] = running.daemon.reports
        yield HaltsDaemon(running, url, listener, halts_file_path(directory / "kp.sock"))
