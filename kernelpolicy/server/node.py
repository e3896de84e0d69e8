"""The node's daemon as a worker finds it: where a Resolution's run-time events go, and the
candidates the daemon halted on this node; and as a fleet tells it apart (its instance)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelpolicy.engine.reporting import RuntimeReporter
    from kernelpolicy.server.halts_file import NodeHalts
    from kernelpolicy.settings import Settings


def node_reporter(settings: Settings, address: str | None = None) -> RuntimeReporter | None:
    """The process's reporter to the node's daemon (run-time events, see
    :mod:`kernelpolicy.server.reporter`), or ``None``: ``KERNELPOLICY_REPORT=0``, a TCP
    ``address``, or no daemon socket configured (``KERNELPOLICY_SOCKET``) and none at the
    default private path. Costs one ``stat`` when nothing listens; starts no thread."""
    if not settings.report:
        return None
    from kernelpolicy.server.sockets import report_path

    given = address or settings.socket
    path = report_path(given, explicit=given is not None)
    if path is None:
        return None
    from kernelpolicy.server.reporter import reporter_for  # a daemon is there: now, not before

    return reporter_for(path)


def node_halts_path(settings: Settings) -> Path:
    """Where the node's daemon keeps its halts for workers: beside ``KERNELPOLICY_SOCKET``, else
    beside this user's default socket (:mod:`kernelpolicy.server.halts_file`)."""
    from kernelpolicy.server.sockets import default_socket_path, halts_file_path, socket_path

    given = settings.socket
    return halts_file_path(default_socket_path() if given is None else socket_path(given))


def node_halts(settings: Settings) -> NodeHalts:
    """The candidates the node's daemon halted, for a worker to resolve without them (none
    where no daemon runs). Costs one ``lstat`` without a daemon; never raises."""
    from kernelpolicy.server.halts_file import read_halts

    return read_halts(node_halts_path(settings))


def halts_for_node(settings: Settings) -> dict[str, str]:
    """:func:`node_halts`, with a file that was ignored said as a warning (``kernelpolicy``
    logger, in ``settings.log_format``). Without a halts file (no daemon on the node) it costs
    one ``lstat`` and imports nothing more: it is on every worker's first ``resolve()``."""
    path = node_halts_path(settings)
    if not os.path.lexists(path):
        return {}
    from kernelpolicy.server.halts_file import read_halts

    found = read_halts(path)
    if found.problem is not None:
        from kernelpolicy.logs import log_warning

        log_warning("kernelpolicy.halts.ignored", settings.log_format, problem=found.problem)
    return found.halts


def daemon_instance() -> dict[str, str]:
    """A daemon's start among a fleet's daemons: ``{"instance": <16 hex>, "host": <name>}``, a
    random ID drawn anew at each call and the host name. Each daemon draws one when it is made
    (``ServingState.instance``), not each process: two daemons of one process (an embedding,
    the tests' ``running_daemon``) are two. ``GetPlatform`` publishes it beside the snapshot
    (key ``daemon``), so that ``diff --daemons`` tells two daemons started from one
    ``--platform`` file apart, and counts one daemon given by two addresses once."""
    # os.urandom and uname, not secrets and socket: this module is on every worker's first
    # resolve() (halts_for_node), where those two imports cost 5-7 ms (bench_resolve.py)
    return {"instance": os.urandom(8).hex(), "host": os.uname().nodename[:253]}
