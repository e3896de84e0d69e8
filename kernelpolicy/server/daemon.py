"""``kernelpolicy serve``: the asyncio gRPC daemon, its listeners, reloads and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from grpc_health.v1 import health, health_pb2

from kernelpolicy.engine.decide import halts_of
from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_GRPC_TCP_CALLS, shown
from kernelpolicy.logs import get_logger
from kernelpolicy.server.addresses import check_address, split_address, with_port
from kernelpolicy.server.bind_failure import why_not_bound
from kernelpolicy.server.fleet import Fleet, WarmStart
from kernelpolicy.server.grpc_server import SERVICES, grpc_connection_cap, grpc_server
from kernelpolicy.server.hypothetical import Hypotheticals
from kernelpolicy.server.ratelog import Throttle
from kernelpolicy.server.report_listener import ReportListener, start_report_listeners
from kernelpolicy.server.rpc_boundary import Boundary
from kernelpolicy.server.sockets import (
    default_socket_address,
    is_loopback_host,
    prepare_socket,
)
from kernelpolicy.server.state import ServingState, reload_failure
from kernelpolicy.server.tls import TlsFiles

__all__ = ["DEFAULT_PORT", "Daemon", "TlsFiles", "default_unix_socket", "is_loopback"]

DEFAULT_PORT = 50151
"""The default TCP listener, on 127.0.0.1 only, for flagd/OpenFeature providers and grpcurl.
kernelpolicy's own clients (``connect()``, ``status``) default to the unix socket, whose peer
they can check; TCP carries no identity (see docs/daemon-security.md)."""
RELOAD_SWITCH_INTERVAL = 0.0005
"""Seconds between interpreter-lock hand-overs while a reload builds the next set."""


def default_unix_socket() -> str:
    """The default socket address (``unix:`` + a path in a private directory)."""
    return default_socket_address()


def is_loopback(address: str) -> bool:
    """Whether a listen address stays on this machine (loopback or a unix socket)."""
    if address.startswith("unix:"):
        return True
    return is_loopback_host(split_address(address).host or "")


@dataclass
class Daemon:
    """One gRPC server with every service, bound to ``listen`` addresses.

    Start-up, reloads and shutdown are separate from the gRPC listener (``_grpc_server``), so
    that another listener can share the same ServingState, reload loop and signals.

    Attributes:
        bound: The addresses actually bound (with the port the OS chose for ``:0``).
    """

    state: ServingState
    listen: Sequence[str]
    tls: TlsFiles | None = None
    log_format: str = "console"
    watch: bool = True
    reload_debounce_ms: int = 300
    default_socket: str | None = None  # this address gets a private directory (0700)
    quiet: bool = False  # log warnings and errors only
    log_stream: TextIO | None = None  # default: stderr
    bound: list[str] = field(default_factory=list)
    http: str | None = None  # serve --http: OFREP, /metrics, /healthz, /readyz
    labels_dir: Path | None = None  # serve --labels-dir: the NFD feature file, per revision
    ready_requires_current_policy: bool = False  # /readyz says no while a reload is failing
    grpc_connections: int | None = None  # per gRPC listener; None: grpc_connection_cap()
    grpc_tcp_calls: int | None = None  # in flight on TCP listeners; None: MAX_GRPC_TCP_CALLS
    warm: WarmStart | None = None  # serve --warm: kernels built at start, /readyz waits

    def __post_init__(self) -> None:
        self.log = (
            get_logger(self.log_format, self.log_stream) if self.log_format != "off" else None
        )
        self._stopping = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self.servers: list[Any] = []  # gRPC: one for the TCP listeners, one for unix sockets
        self._started: list[Any] = []  # those of them started (a failed start stops the rest)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.health = health.aio.HealthServicer()
        # Requests with their own platform_json or env, over TCP and on the unix socket: two
        # queues over the same two threads (TCP clients cannot fill the workers' queue).
        self.hypotheticals = Hypotheticals()
        self.unix_hypotheticals = Hypotheticals(threads=self.hypotheticals.threads)
        # What clients can cause again and again is logged at a bounded rate (server.ratelog).
        self.client_log = Throttle(self._client_log)
        self.boundary = Boundary(self.client_log)
        self.fleet = Fleet(
            self.state, self.http, self.labels_dir, tls=self.tls,
            warn=lambda event, message: self._log("warning", event, message=message),
            client_log=self.client_log,
            ready_requires_current_policy=self.ready_requires_current_policy,
            warm=self.warm, log=self._log, unpublished_halts=self._unpublished_halts,
        )  # fmt: skip
        self.reports: list[ReportListener] = []  # one beside each unix socket
        self._halts_pending = False
        self._halts_task: asyncio.Future[None] | None = None
        if self.fleet.metrics is not None:
            self.fleet.metrics.count_open(
                "kernelpolicy_grpc_streams", "Open gRPC server streams (Watch, EventStream).",
                lambda: self.boundary.streams.count,
            )  # fmt: skip
            self.fleet.metrics.count_open(
                "kernelpolicy_report_connections", "Open worker connections to the report socket.",
                lambda: sum(listener.connections for listener in self.reports),
            )  # fmt: skip
            self.fleet.metrics.count_open(
                "kernelpolicy_halts_unpublished",
                "Report sockets whose halts file the last write failed (workers miss halts).",
                lambda: sum(listener.unpublished is not None for listener in self.reports),
            )  # fmt: skip

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, **fields)

    def _client_log(self, level: str, event: str, **fields: Any) -> None:
        if level != "info" or not self.quiet:
            self._log(level, event, **fields)

    def _emit(self, event: str, **fields: Any) -> None:
        if not self.quiet:
            self._log("info", event, **fields)

    def _grpc_server(self, *, unix: bool) -> Any:
        return grpc_server(
            self.state, self.boundary, self.health, self.fleet.interceptors(),
            connections=self.grpc_connections or grpc_connection_cap(),
            hypotheticals=self.unix_hypotheticals if unix else self.hypotheticals,
            tcp_calls=None if unix else self.grpc_tcp_calls or MAX_GRPC_TCP_CALLS,
        )  # fmt: skip

    def _bind(self, server: Any, address: str) -> None:
        if not is_loopback(address):
            self._log(
                "warning", "kernelpolicy.serve.warning",
                message=f"listening on {address}, reachable beyond this machine"
                + ("" if self.tls else " WITHOUT TLS: set KERNELPOLICY_TLS_CERT_FILE/KEY_FILE"),
            )  # fmt: skip
        unix = address.startswith("unix:")
        if unix:
            prepare_socket(address, default=address == self.default_socket)
        # The socket file is created by bind(): 0600, so only this user (and root) may connect.
        old_umask = os.umask(0o177) if unix else None
        try:
            if self.tls is not None and not unix:
                port = server.add_secure_port(address, self.tls.credentials())
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:  # gRPC names no cause: a plain socket bound there finds it
            raise DaemonError(f"cannot listen on {address}: {why_not_bound(address)}") from None
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        # a relative socket named absolute (--port-file, status): found from any directory
        bound = f"unix:{os.path.abspath(address.removeprefix('unix:'))}" if unix else None
        self.bound.append(bound or with_port(address, port))

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        servers: dict[bool, Any] = {}  # by "is a unix socket", bound in --listen's order
        try:
            for given in self.listen:
                address = check_address(given, "--listen", listening=True)
                unix = address.startswith("unix:")
                if unix not in servers:
                    servers[unix] = self._grpc_server(unix=unix)
                    self.servers.append(servers[unix])
                self._bind(servers[unix], address)
            for server in self.servers:
                await server.start()
                self._started.append(server)
            await self._start_reports()
            self._publish_halts()
            await self.fleet.start_warming()  # before /readyz can answer
            await self.fleet.start()
        except BaseException:
            await self._stop_reports()
            await self._stop_servers(None)  # no gRPC listener left behind by a failed start
            raise
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self._emit(
            "kernelpolicy.serve.start",
            listen=self.bound,
            revision=self.state.snapshot.revision,
            fingerprint=self.state.snapshot.resolution.fingerprint,
            policy_digest=self.state.snapshot.policies.digest,
            policies=[name for name, _ in self.state.snapshot.sources],
        )

    async def _start_reports(self) -> None:
        """A report socket beside each unix socket (see :mod:`.report_listener`)."""
        self.reports = await start_report_listeners(
            self.bound, self.default_socket, self.state.halts, self._halts_changed, self.client_log
        )

    def _publish_halts(self, listeners: Sequence[ReportListener] | None = None) -> None:
        """The halts of the answer now served, where the node's workers read them (in the
        files of ``listeners``, by default every report listener's)."""
        listeners = self.reports if listeners is None else listeners
        if listeners:
            halts = halts_of(self.state.snapshot.resolution.decisions)
            for listener in listeners:
                listener.publish(halts)

    def _unpublished_halts(self) -> list[str]:
        """``/readyz``: the halts files whose last write failed, after one more try each (so
        that a node whose cause went away, a full disk or a name taken, is ready at the next
        probe); each ``"path: why"``. Only a failed file is written again: a ready node's probe
        writes nothing."""
        failed = [listener for listener in self.reports if listener.unpublished is not None]
        self._publish_halts(failed)
        return [
            f"{listener.halts_file}: {listener.unpublished}"
            for listener in failed
            if listener.unpublished is not None
        ]

    async def _stop_reports(self) -> None:
        for listener in self.reports:
            await listener.stop()

    def _halts_changed(self) -> asyncio.Future[None]:
        """A halt was added or cleared: resolve again once (done when the answers say so)."""
        if self._halts_task is None or not self._halts_pending:
            self._halts_pending = True
            self._halts_task = asyncio.ensure_future(self._apply_halts())
        return self._halts_task

    async def _apply_halts(self) -> None:
        async with self._reload_lock:  # after any reload in progress, never beside it
            self._halts_pending = False
            prepared = await asyncio.to_thread(self.state.prepare_halts)
            if prepared is None or self.state.commit(prepared) is None:
                return
            self._publish_halts()
            self.fleet.write_labels()
            halted = sorted(self.state.halts.inputs())
            self._client_log("warning" if halted else "info", "kernelpolicy.halts",
                             revision=self.state.snapshot.revision, halted=halted)  # fmt: skip

    async def _set_health(self, status: Any) -> None:
        for service in ("", *SERVICES):
            await self.health.set(service, status)

    async def reload(self, why: str = "request") -> None:
        """Re-read the policy files off the event loop and swap the answer in atomically.

        Never raises: a bad set, or any failure while building it, keeps the last good set,
        is logged as ``kernelpolicy.reload.failed`` (warning) and shows in Explain and status.
        """
        async with self._reload_lock:
            # The load and resolution run in a worker thread: answers keep flowing. While it
            # runs, the interpreter lock changes hands more often, so that a request waits for
            # the worker's slice (RELOAD_SWITCH_INTERVAL) rather than the default 5 ms.
            interval = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, RELOAD_SWITCH_INTERVAL))
            try:
                prepared = await asyncio.to_thread(self.state.prepare_reload)
            except Exception as exc:  # prepare_reload catches; this is a backstop
                prepared = reload_failure(exc)
            finally:
                sys.setswitchinterval(interval)
            change = self.state.commit(prepared)
            if change is not None:
                self._publish_halts()  # a changed feature's halts are gone
            snapshot = self.state.snapshot
            self.fleet.reloaded(
                "failed" if isinstance(prepared, str) else "changed" if change else "unchanged"
            )
            if isinstance(prepared, str):
                self._log("warning", "kernelpolicy.reload.failed", why=why, error=prepared,
                          serving_revision=snapshot.revision,
                          serving_policy_digest=snapshot.policies.digest)  # fmt: skip
            else:
                self._say_reload(why, snapshot, list(change.flags) if change else [])

    def _say_reload(self, why: str, snapshot: Any, changed: list[str]) -> None:
        """The ``kernelpolicy.reload`` event: at error level, with ``decision_errors``, where the
        new decisions hold an error of a feature every model uses (as serve says at start), even
        when ``quiet``; one kind of model's errors are its ``model_kind_errors`` (level kept)."""
        from kernelpolicy.logs import bounded

        resolution = snapshot.resolution
        one_kind = snapshot.policies.model_kind_features
        errors = resolution.errors
        fields: dict[str, Any] = {
            "why": why, "revision": snapshot.revision, "changed": changed,
            "fingerprint": resolution.fingerprint, "policy_digest": snapshot.policies.digest,
        }  # fmt: skip
        if kinds := {n: e for n, e in errors.items() if n in one_kind}:
            fields["model_kind_errors"] = bounded(kinds)
        if every := {n: e for n, e in errors.items() if n not in one_kind}:
            self._log("error", "kernelpolicy.reload", decision_errors=bounded(every), **fields)
        else:
            self._emit("kernelpolicy.reload", **fields)

    async def _watch_files(self) -> None:
        """Reload on every change; if watching itself fails, say so and start again."""
        from watchfiles import awatch

        from kernelpolicy.policy.loader import expand_policy_paths

        while not self._stopping.is_set():
            try:
                # "+DIR" entries (added to the bundled pack) name DIR, not a path called "+DIR".
                paths = [Path(p) for p in expand_policy_paths(self.state.policy_paths)]
                targets = {p if p.is_dir() else p.parent for p in paths}
                async for _ in awatch(
                    *targets, stop_event=self._stopping, debounce=self.reload_debounce_ms,
                    step=50, recursive=True, force_polling=False,
                ):  # fmt: skip
                    await self.reload("files changed")
            except Exception as exc:  # the watcher must never die
                self._log(
                    "warning", "kernelpolicy.watch.failed", error=shown(str(exc), 300),
                    detail=traceback.format_exception_only(exc)[-1].strip()[:300],
                )  # fmt: skip
                await asyncio.sleep(1.0)
                await self.reload("watch restarted")

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload("SIGHUP")))
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)

    async def serve(
        self,
        *,
        handle_signals: bool = True,
        on_started: Callable[[], None] | None = None,
        pending_reload: Callable[[], bool] | None = None,
    ) -> None:
        """Run until stop() or SIGTERM/SIGINT; SIGHUP reloads.

        Args:
            handle_signals: Install the signal handlers (before anything slow happens).
            on_started: Called once every listener is bound.
            pending_reload: Whether a SIGHUP arrived before the loop could handle it (see
                :mod:`kernelpolicy.server.signals`); then the daemon reloads once started.
        """
        loop = asyncio.get_running_loop()
        if handle_signals:
            self._install_signals(loop)
        await self.start()
        if on_started is not None:
            on_started()
        if pending_reload is not None and pending_reload():
            await self.reload("SIGHUP")
        watcher = asyncio.ensure_future(self._watch_files()) if self.watch else None
        await self._stopping.wait()
        await self.shutdown()
        if watcher is not None:
            watcher.cancel()

    def stop(self) -> None:
        """Ask the daemon to shut down; safe to call from any thread."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._stopping.set)
        else:
            self._stopping.set()

    async def shutdown(self, grace: float = 5.0) -> None:
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        self._emit("kernelpolicy.serve.stop", grace_seconds=grace)
        await self.fleet.stop()
        await self._stop_reports()
        await self._stop_servers(grace)

    async def _stop_servers(self, grace: float | None) -> None:
        """Stop every gRPC server; one bound but never started is started first, since only a
        started grpc.aio server gives its ports back when stopped."""
        for server in self.servers:
            if server not in self._started:
                with contextlib.suppress(Exception):  # one that cannot start holds no port
                    await server.start()
        await asyncio.gather(*(server.stop(grace) for server in self.servers))
        self.servers, self._started = [], []
