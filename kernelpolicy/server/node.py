"""The node's daemon as a worker finds it: where a Resolution's run-time events go."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelpolicy.engine.reporting import RuntimeReporter
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
