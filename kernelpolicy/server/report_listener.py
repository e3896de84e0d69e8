"""The daemon's end of the report socket: peer credentials checked, lines bounded, halts applied.

Each connection's process is read from the socket (``SO_PEERCRED``) when it is accepted: one
that runs as neither root nor the daemon's user is counted (``peer_uid``), logged at a bounded
rate and closed before a byte of it is read, so a worker of another user cannot halt (or clear)
a kernel, even where an operator opened the socket's mode to others. What an accepted worker
sends is bounded by line (``MAX_REPORT_LINE_BYTES``), events per line and connections
(``MAX_REPORT_CONNECTIONS``: the next replaces the oldest); a malformed line closes its
connection. Nothing a worker sends becomes a metric label: events about features and
implementations the policies lack are refused and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.limits import MAX_REPORT_CONNECTIONS, MAX_REPORT_LINE_BYTES
from kernelpolicy.server.halts import Halts
from kernelpolicy.server.halts_file import remove_halts, write_halts
from kernelpolicy.server.reports import Rejection, ReportError, parse_line, peer_credentials
from kernelpolicy.trust import owner_ok

__all__ = ["ReportListener", "start_report_listeners"]


class ReportListener:
    """Serve one report socket.

    Args:
        halts: Where events are counted and halts decided.
        changed: Called (on the event loop) after events halted a candidate or a clear lifted
            one: the daemon resolves again; done once its answers say so.
        log: ``log(level, event, **fields)``, throttled by the daemon.
        max_connections: Open connections kept (tests lower it).
    """

    def __init__(
        self,
        halts: Halts,
        changed: Callable[[], Awaitable[None]],
        log: Callable[..., None],
        max_connections: int = MAX_REPORT_CONNECTIONS,
    ) -> None:
        self.halts = halts
        self.changed = changed
        self.log = log
        self.max_connections = max_connections
        self.path: Path | None = None
        self.halts_file: Path | None = None  # the node's halts, for workers (.halts_file)
        self.unpublished: str | None = None  # why the last write of it failed, or None
        self._server: asyncio.AbstractServer | None = None
        self._open: dict[asyncio.StreamWriter, None] = {}  # in the order they came

    @property
    def connections(self) -> int:
        return len(self._open)

    async def start(self, path: Path) -> None:
        """Bind ``path`` (made ready by ``sockets.prepare_socket``), mode 0600, and listen."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # created 0600: only this user and root may connect
        try:
            sock.bind(str(path))
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        self.path = path
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=MAX_REPORT_LINE_BYTES + 1
        )

    def publish(self, halts: Mapping[str, str]) -> None:
        """Write the halts the daemon's answers use where this socket's workers read them
        (:mod:`kernelpolicy.server.halts_file`); a write that fails is logged and kept in
        :attr:`unpublished` until one succeeds (the daemon's metric
        ``kernelpolicy_halts_unpublished`` counts such sockets)."""
        if self.halts_file is None:
            return
        try:
            write_halts(self.halts_file, halts)
        except OSError as exc:
            self.unpublished = exc.strerror or str(exc)
            self.log("warning", "kernelpolicy.halts.unpublished", path=str(self.halts_file),
                     error=self.unpublished)  # fmt: skip
        else:
            self.unpublished = None

    async def stop(self) -> None:
        if self.halts_file is not None:
            remove_halts(self.halts_file)
        if self._server is not None:
            self._server.close()
            for writer in list(self._open):
                writer.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not self._admitted(writer):
                return
            self._open[writer] = None
            while len(self._open) > self.max_connections:
                oldest = next(iter(self._open))
                self._open.pop(oldest)
                self.halts.reject(Rejection.CONNECTIONS)
                oldest.close()
            while await self._one_line(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the worker went away
        finally:
            self._open.pop(writer, None)
            writer.close()

    def _admitted(self, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        try:
            pid, uid, _ = peer_credentials(sock)
        except OSError:
            return False
        if owner_ok(uid):
            return True
        self.halts.reject(Rejection.PEER_UID)
        self.log(
            "warning", "kernelpolicy.report.refused", pid=pid, uid=uid,
            message=f"a report from uid {uid} (pid {pid}), neither root nor uid {os.geteuid()} "
            "who runs this daemon: refused",
        )  # fmt: skip
        return False

    async def _one_line(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read and apply one line; False when the connection is done."""
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            return self._refused(
                ReportError("a line over MAX_REPORT_LINE_BYTES", Rejection.TOO_LARGE)
            )
        except asyncio.IncompleteReadError:
            return False  # closed, perhaps mid-line
        try:
            parsed = parse_line(line)
        except ReportError as exc:
            return self._refused(exc)
        if isinstance(parsed, str):
            await self._clear(parsed, writer)
            return True
        halted = self.halts.record(parsed)
        for feature, impl in halted:
            self.log("warning", "kernelpolicy.halt", feature=feature, impl=impl,
                     message=f"{impl} halted for {feature} on this node")  # fmt: skip
        if halted:
            self.changed()  # not awaited: the next line need not wait for it
        return True

    def _refused(self, error: ReportError) -> bool:
        self.halts.reject(error.rejection)
        self.log("warning", "kernelpolicy.report.rejected", reason=error.rejection.value,
                 message=str(error))  # fmt: skip
        return False

    async def _clear(self, feature: str, writer: asyncio.StreamWriter) -> None:
        answer: dict[str, Any]
        try:
            lifted = self.halts.clear(feature)
        except KeyError:
            answer = {"error": f"unknown feature {feature!r}"}
        else:
            answer = {"cleared": lifted}
            if lifted:  # nothing was halted: the answer says so, the log stays quiet
                self.log("info", "kernelpolicy.halt.cleared", feature=feature, impls=lifted)
                await self.changed()  # answered once the daemon's answers say so
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()


async def start_report_listeners(
    bound: list[str],
    default_socket: str | None,
    halts: Halts,
    changed: Callable[[], Awaitable[None]],
    log: Callable[..., None],
) -> list[ReportListener]:
    """A report socket beside each unix socket of ``bound`` (``x.sock`` -> ``x.report.sock``),
    checked as the daemon's own socket is (``sockets.prepare_socket``), and the halts file its
    workers read (``x.halts.json``, written by :meth:`ReportListener.publish`).

    Raises:
        DaemonError: A report socket's path cannot be used (another user's, in use, too long).
    """
    from kernelpolicy.server.reports import report_socket_path
    from kernelpolicy.server.sockets import halts_file_path, prepare_socket, socket_path

    listeners: list[ReportListener] = []
    try:
        for address in [a for a in bound if a.startswith("unix:")]:
            path = report_socket_path(socket_path(address))
            prepare_socket(f"unix:{path}", default=address == default_socket)
            listener = ReportListener(halts, changed, log)
            await listener.start(path)
            listener.halts_file = halts_file_path(socket_path(address))
            listeners.append(listener)
    except BaseException:
        for listener in listeners:
            await listener.stop()
        raise
    return listeners
