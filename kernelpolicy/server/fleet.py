"""What the daemon adds for a fleet: the HTTP listener, its metrics, and the node-label file.

The daemon calls :class:`Fleet` at four points (before its gRPC server is built, once it has
started, after every reload attempt, at shutdown); everything here is off unless
``serve --http`` or ``serve --labels-dir`` asks for it, and the modules behind it (aiohttp,
prometheus-client) are imported only then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution
    from kernelpolicy.server.http import HttpListener
    from kernelpolicy.server.metrics import DaemonMetrics
    from kernelpolicy.server.state import ServingState
    from kernelpolicy.warming import Warming

WarmStart = Callable[["Resolution"], "Warming | str"]
"""``serve --warm``: given the daemon's first resolution, the warm run to make (or why there is
nothing to build: no device, a kernel cache that cannot be trusted)."""


@dataclass
class Fleet:
    """The optional fleet-facing parts of one daemon.

    Attributes:
        http: ``serve --http`` address (``PORT``, ``HOST:PORT``), or ``None`` for no HTTP.
        labels_dir: ``serve --labels-dir``: NFD's ``features.d``, or ``None``.
        tls: The gRPC listener's TLS files, used for HTTP too (``None``: plain HTTP).
        warn: Logs a warning (the daemon's logger).
        client_log: Logs what clients can cause over and over (``emit(level, event, **fields)``,
            throttled by the daemon): handler failures, hang-ups, connections closed.
        ready_requires_current_policy: ``serve --ready-requires-current-policy``: ``/readyz``
            says not ready while the last reload failed (the daemon serves stale policies).
        warm: ``serve --warm``: build the kernels the decisions can route to at start
            (:mod:`kernelpolicy.warming`); ``/readyz`` says not ready until they are built.
        log: Logs an event of the daemon's own (``log(level, event, **fields)``).
        unpublished_halts: The node's halts files that the daemon's last write failed (the
            daemon tries each once more when asked), each ``"path: why"``; ``/readyz`` says
            not ready while there is one, since the workers that read it run kernels the
            daemon halted.
        url: The bound ``http://host:port`` once started.
    """

    state: ServingState
    http: str | None = None
    labels_dir: Path | None = None
    tls: Any = None  # the daemon's TlsFiles (cert, key, client_ca), or None
    warn: Callable[[str, str], None] = lambda event, message: None
    client_log: Callable[..., None] = lambda level, event, **fields: None
    url: str | None = None
    ready: bool = False
    ready_requires_current_policy: bool = False
    warm: WarmStart | None = None
    log: Callable[..., None] = lambda level, event, **fields: None
    unpublished_halts: Callable[[], list[str]] = lambda: []
    warming: Warming | None = field(default=None, init=False)
    metrics: DaemonMetrics | None = field(default=None, init=False)
    listener: HttpListener | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.http is not None:
            from kernelpolicy.server.metrics import DaemonMetrics

            self.metrics = DaemonMetrics(self.state)

    def interceptors(self) -> list[Any]:
        """gRPC server interceptors: request counts and latency, when metrics are on."""
        return [self.metrics.interceptor()] if self.metrics is not None else []

    async def start(self) -> None:
        """Write the labels, then listen for HTTP.

        Raises:
            DaemonError: ``labels_dir`` is not a directory (a typo would otherwise only show as
                a warning per revision), or HTTP cannot listen.
        """
        if self.labels_dir is not None and not self.labels_dir.is_dir():
            from kernelpolicy.errors import DaemonError

            raise DaemonError(
                f"--labels-dir {self.labels_dir}: not a directory; expected Node Feature "
                "Discovery's features.d (/etc/kubernetes/node-feature-discovery/features.d)"
            )
        self.write_labels()
        if self.http is None or self.metrics is None:
            return
        from kernelpolicy.server.http import HttpListener, parse_http_address, server_ssl_context
        from kernelpolicy.server.sockets import is_loopback_host

        host, _ = parse_http_address(self.http)
        tls = self.tls
        ssl_context = server_ssl_context(tls.cert, tls.key, tls.client_ca) if tls else None
        if not is_loopback_host(host):
            self.warn(
                "kernelpolicy.serve.warning",
                f"HTTP on {self.http}, reachable beyond this machine"
                + ("" if tls else " WITHOUT TLS: set KERNELPOLICY_TLS_CERT_FILE/KEY_FILE"),
            )
        log = self.client_log
        self.listener = HttpListener(
            self.state, self.metrics, self.not_ready, ssl_context=ssl_context,
            on_error=lambda message: log("warning", "kernelpolicy.http.error", message=message),
            on_close=lambda reason, peer: log("info", "kernelpolicy.http.closed", reason=reason,
                                              peer=peer),
        )  # fmt: skip
        self.url = await self.listener.start(self.http)
        connections = self.listener.connections
        if connections is not None:
            self.metrics.count_open(
                "kernelpolicy_http_connections", "Open HTTP connections.",
                lambda: connections.table.count,
            )  # fmt: skip
        self.ready = True

    def not_ready(self) -> str | None:
        """Why /readyz says no, or ``None``. By default a failed reload keeps the daemon ready:
        it serves the last good policies, which is what every worker on the node should keep
        using; with ``ready_requires_current_policy`` it is not ready until a reload succeeds
        (flagd's and Kubernetes' reading of "serving stale configuration"). A halts file the
        daemon could not write makes it not ready whatever the options: the node's workers
        follow what they last read, so they may run a kernel the daemon halted."""
        if not self.ready:
            return "not serving (starting or shutting down)"
        unpublished = self.unpublished_halts()
        if unpublished:
            return (
                "halts not published to the node's workers, which may run a kernel the daemon "
                f"halted: {'; '.join(unpublished)}"
            )
        warming = self.warming
        if warming is not None and not warming.finished.is_set():
            built, total = warming.progress()
            return f"warming kernels (serve --warm): {built} of {total} variant groups done"
        error = self.state.snapshot.policy_error
        if self.ready_requires_current_policy and error is not None:
            return f"serving stale policies: the last reload failed: {error}"
        return None

    def reloaded(self, outcome: str) -> None:
        """After a reload attempt: ``changed``, ``unchanged`` or ``failed``."""
        if self.metrics is not None:
            self.metrics.reloads.labels(outcome).inc()
        if outcome == "changed":
            self.write_labels()

    def write_labels(self) -> None:
        if self.labels_dir is None:
            return
        from kernelpolicy.errors import KernelPolicyError
        from kernelpolicy.inputs import evidence_for
        from kernelpolicy.labels import nfd_text, node_labels, write_feature_file

        state = self.state
        snapshot = state.snapshot
        try:
            evidence = snapshot.evidence or evidence_for(  # the labels show it: always
                snapshot.policies, state.platform, state.cache_dir,
                allow_untrusted=state.allow_untrusted, always=True,
            )  # fmt: skip
            assert evidence is not None  # asked for always
            resolution = snapshot.resolution
            labels = node_labels(resolution, evidence)
            text = nfd_text(labels, resolution.fingerprint, resolution.policies.digest)
            write_feature_file(self.labels_dir, text)
        except KernelPolicyError as exc:  # a full disk must not stop the daemon serving
            self.warn("kernelpolicy.labels.failed", str(exc))

    async def start_warming(self) -> None:
        """``serve --warm``: start building, in processes, what the first resolution can route
        to; ``/readyz`` waits for it (the answers do not: they are right meanwhile, and calls
        are served by ready candidates while a variant builds)."""
        if self.warm is None:
            return
        import asyncio

        warming = self.warm(self.state.snapshot.resolution)
        if isinstance(warming, str):
            self.log("info", "kernelpolicy.warm", note=warming)
            return
        self.warming = warming
        warming.told = lambda result: self.log(
            "warning" if result["failed"] else "info", "kernelpolicy.warm.built",
            impl=result["impl"], dtype=result["dtype"], vocab=result["vocab"],
            seconds=result["seconds"], failed=result["failed"],
        )  # fmt: skip
        self.log("info", "kernelpolicy.warm.start", variant_groups=len(warming.tasks))
        task = asyncio.ensure_future(asyncio.to_thread(warming.run))
        task.add_done_callback(lambda done: self._warmed(warming, done))

    def _warmed(self, warming: Warming, done: Any) -> None:
        error = None if done.cancelled() else done.exception()
        failed = [f"{r['impl']} {r['dtype']} {r['vocab'] or ''}".strip() for r in warming.failed()]
        level = "warning" if failed or error else "info"
        self.log(level, "kernelpolicy.warm.done", variant_groups=len(warming.tasks),
                 failed=failed, error=None if error is None else str(error))  # fmt: skip

    async def stop(self) -> None:
        self.ready = False
        if self.listener is not None:
            await self.listener.stop()
