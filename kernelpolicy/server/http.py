"""The daemon's HTTP listener (aiohttp, on the daemon's event loop): OFREP, metrics, health.

| route | what |
|---|---|
| ``POST /ofrep/v1/evaluate/flags/{key}`` | OFREP single evaluation (see ``server.ofrep``) |
| ``POST /ofrep/v1/evaluate/flags`` | OFREP bulk evaluation, ``ETag`` / ``If-None-Match`` -> 304 |
| ``GET /metrics`` | Prometheus text format, or OpenMetrics when the scraper asks for it |
| ``GET /healthz`` | 200 while the daemon's event loop answers (liveness) |
| ``GET /readyz`` | 200 once a resolution is served, 503 before and while shutting down (*) |

(*) and, with ``serve --ready-requires-current-policy``, while the last reload failed.

Every request is bounded before a handler sees it: the request target and each header value
(``MAX_HTTP_HEADER_BYTES``), the number of headers (``MAX_HTTP_HEADERS``) and the body
(``MAX_HTTP_BODY_BYTES``, 413 past it; ``MAX_HTTP_BODY_SECONDS`` to send it, 408 past that);
flag keys are bounded by the OFREP layer. A body is never decompressed: a ``Content-Encoding``
other than ``identity`` is refused (415) unread and its connection closed, not read to the end
(1 MiB of gzip inflates to 1 GiB); ``Expect: 100-continue`` gets "100 Continue" only for a body
that will be read (``server.http_body``). Connections are bounded in number, per peer (one
grouping for every cap, ``server.peers``) and in time by ``server.connections``. Errors are JSON
(``{"errorDetails": ...}``, plus ``key`` and ``errorCode`` on OFREP routes), never a traceback.
A client that hangs up before its answer is no error of the daemon's: it is counted
(``kernelpolicy_http_connections_closed_total``), not answered, and not counted as a request.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import (
    MAX_HTTP_BODY_BYTES,
    MAX_HTTP_HEADER_BYTES,
    MAX_HTTP_HEADERS,
    shown,
)
from kernelpolicy.server import ofrep
from kernelpolicy.server.addresses import MAX_PORT, address_problem, split_address
from kernelpolicy.server.connections import LIMITS, GuardedListener, Timeouts
from kernelpolicy.server.http_body import (
    ACCEPTED_CONTENT_CODINGS,
    BadBody,
    BodyTimeout,
    HungUp,
    expect_continue,
    read_body,
)

if TYPE_CHECKING:
    from kernelpolicy.server.metrics import DaemonMetrics
    from kernelpolicy.server.state import ServingState

DEFAULT_HTTP_PORT = 50152
OFREP_ONE = "/ofrep/v1/evaluate/flags/{key}"
OFREP_BULK = "/ofrep/v1/evaluate/flags"
_METHODS = frozenset({"GET", "HEAD", "POST"})  # other methods are counted as "other"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parse_http_address(address: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` as (host, port); a bare port is loopback.

    Raises:
        DaemonError: Not one of those forms (a URL, dotted numbers that are no IPv4 address),
            or a port outside 0-65535, naming what was wrong and what was expected, before
            anything is probed or bound.
    """
    problem = address_problem(address, low=0, bare_port=True)
    if problem is not None:
        raise DaemonError(
            f"--http {address[:100]!r}: expected PORT, HOST:PORT or [IPV6]:PORT with a port "
            f"from 0 to {MAX_PORT}; {problem}"
        )
    split = split_address(address)
    assert split.number is not None  # address_problem checked it
    return split.host or "127.0.0.1", split.number


def server_ssl_context(cert: bytes, key: bytes, client_ca: bytes | None) -> ssl.SSLContext:
    """TLS for the HTTP listener from the gRPC listener's (already validated) PEM contents; with
    a CA, client certificates signed by it are required, as on gRPC.

    Python's ``ssl`` loads a certificate chain from files only: the PEM goes to a private
    temporary directory (0700, files 0600) for the moment it takes, then is deleted.

    Raises:
        DaemonError: The certificate and key do not load (a key that is not the certificate's).
    """
    import tempfile

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        with tempfile.TemporaryDirectory(prefix="kernelpolicy-tls-") as private:
            cert_file, key_file = Path(private) / "cert.pem", Path(private) / "key.pem"
            for path, data in ((cert_file, cert), (key_file, key)):
                path.touch(mode=0o600)
                path.write_bytes(data)
            context.load_cert_chain(cert_file, key_file)
        if client_ca is not None:
            context.load_verify_locations(cadata=client_ca.decode("ascii", "replace"))
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise DaemonError(
            f"TLS for --http: the certificate and key from KERNELPOLICY_TLS_CERT_FILE/"
            f"KEY_FILE do not load ({exc})"
        ) from None
    return context


def _json(status: int, document: dict[str, Any] | None, headers: Any = ()) -> web.Response:
    body = ofrep.Answer(status, document).body()
    response = web.Response(status=status, body=body or None, headers=dict(headers))
    if document is not None:
        response.content_type = "application/json"
    return response


async def _refuse_body(request: web.Request, error: BadBody) -> web.StreamResponse:
    """The OFREP ``PARSE_ERROR`` for a body that cannot be read as sent (with ``key`` on the
    one-flag route, as ``ofrep`` answers), sent at once, then the connection closed.

    Closed, not kept: aiohttp would read the rest of the body first (for up to
    ``MAX_HTTP_BODY_SECONDS``), the work that refusing it unread is there to spare, and a body
    whose framing is broken leaves nothing to read the next request from. A client still
    sending may see a reset after the answer.

    Raises:
        HungUp: The client went away before the answer was sent.
    """
    document = {"errorCode": "PARSE_ERROR", "errorDetails": error.details}
    key = request.match_info.get("key")
    if key is not None:
        document = {"key": shown(key), **document}
    headers = (
        {"Accept-Encoding": ", ".join(ACCEPTED_CONTENT_CODINGS)} if error.status == 415 else {}
    )
    response = _json(error.status, document, headers)
    response.force_close()  # Connection: close
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:
        raise HungUp from None
    request.protocol.force_close()  # the transport sends what it holds, then closes
    return response


class HttpListener:
    """The HTTP routes over one serving state.

    Args:
        state: What to answer from (``state.snapshot`` is read once per request).
        metrics: The registry ``/metrics`` exposes; every request is counted in it.
        not_ready: Returns why the daemon is not ready, or ``None`` when it is.
        ssl_context: TLS, or ``None`` for plain HTTP.
        on_error: Called with a message when a handler fails unexpectedly (answered 500).
        on_close: Called with a reason (``connections.CLOSE_REASONS``) and the peer (its
            address grouped, ``connections.peer_of``: all of loopback one peer) when the
            listener closes a connection or a client hangs up mid-request.
        max_connections: The total connection cap (default: ``connections.connection_cap()``).
        timeouts: Header, body and idle timeouts (default: the ``MAX_HTTP_*_SECONDS`` limits).
    """

    def __init__(
        self,
        state: ServingState,
        metrics: DaemonMetrics,
        not_ready: Callable[[], str | None],
        *,
        ssl_context: ssl.SSLContext | None = None,
        on_error: Callable[[str], None] | None = None,
        on_close: Callable[[str, str], None] | None = None,
        max_connections: int | None = None,
        timeouts: Timeouts = LIMITS,
    ) -> None:
        self.state = state
        self.metrics = metrics
        self.not_ready = not_ready
        self.ssl_context = ssl_context
        self.on_error = on_error
        self.on_close = on_close
        self.max_connections = max_connections
        self.timeouts = timeouts
        self._runner: web.AppRunner | None = None
        self.connections: GuardedListener | None = None
        self.url = ""

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_HTTP_BODY_BYTES, middlewares=[self._middleware])
        one = OFREP_ONE.replace("{key}", "{key:.+}")
        app.router.add_post(one, self._ofrep_one, expect_handler=expect_continue)
        app.router.add_post(OFREP_BULK, self._ofrep_bulk, expect_handler=expect_continue)
        # flagd accepts both
        app.router.add_post(OFREP_BULK + "/", self._ofrep_bulk, expect_handler=expect_continue)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self, address: str) -> str:
        """Listen on ``address`` (see :func:`parse_http_address`).

        Raises:
            DaemonError: The address is in use or not valid here.

        Returns:
            The URL bound, ``http://host:port`` (``https://`` with TLS), the port filled in.
        """
        host, port = parse_http_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server(
                (host, port), family=family, reuse_port=False, backlog=socket.SOMAXCONN
            )  # a burst waits in the kernel's queue (no descriptor) rather than being dropped
        except OSError as exc:
            raise DaemonError(
                f"cannot listen on {address} for HTTP: {exc.strerror or exc}; pick another "
                "with --http"
            ) from None
        runner = await self._set_up()
        assert runner.server is not None  # set up
        # Not a web.SockSite: the listener accepts under the connection caps (see
        # server.connections), the protocol of each connection still aiohttp's.
        self.connections = GuardedListener(
            runner.server, self.ssl_context, on_close=self._closed, total=self.max_connections,
            timeouts=self.timeouts,
        )  # fmt: skip
        self.connections.start(sock)
        self._runner = runner
        bound = sock.getsockname()[1]
        shown_host = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if self.ssl_context else 'http'}://{shown_host}:{bound}"
        return self.url

    async def _set_up(self) -> web.AppRunner:
        # aiohttp logs each malformed request (over a limit, not HTTP) with a traceback; the
        # client got its 400, and the daemon's log is no place for a stranger's bad bytes.
        quiet = logging.getLogger("kernelpolicy.http.protocol")
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
            quiet.propagate = False
        # aiohttp's own idle timer is only a backstop: the listener's deadlines come first. After
        # an answer sent before the whole body came (413, 408), aiohttp reads on for at most
        # the body timeout, so that the client sees the answer rather than a reset.
        backstop = 2 * max(self.timeouts.header, self.timeouts.idle)
        # auto_decompress off: aiohttp's parser never inflates a body (_body refuses encoded ones).
        runner = web.AppRunner(
            self.application(), handle_signals=False, access_log=None, logger=quiet,
            max_line_size=MAX_HTTP_HEADER_BYTES, max_field_size=MAX_HTTP_HEADER_BYTES,
            max_headers=MAX_HTTP_HEADERS, keepalive_timeout=backstop,
            lingering_time=self.timeouts.body, auto_decompress=False,
        )  # fmt: skip
        await runner.setup()
        return runner

    async def stop(self) -> None:
        if self.connections is not None:
            await self.connections.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _closed(self, reason: str, peer: str) -> None:
        self.metrics.connections_closed.labels(reason).inc()
        if self.on_close is not None:
            self.on_close(reason, peer)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        if route == OFREP_ONE.replace("{key}", "{key:.+}"):
            route = OFREP_ONE
        guard = self.connections
        transport = request.transport  # None once the connection is lost: kept from here
        if guard is not None:
            guard.request_started(transport)
        try:
            response = await self._answer(request, handler, route)
        except HungUp:  # nobody to answer: not a request the daemon failed
            if guard is not None:
                guard.hung_up(transport)
            return web.Response(status=499)
        finally:
            if guard is not None:
                guard.request_finished(transport)
        method = request.method if request.method in _METHODS else "other"
        self.metrics.observe_http(route, method, response.status, time.perf_counter() - start)
        return response

    async def _answer(
        self, request: web.Request, handler: Handler, route: str
    ) -> web.StreamResponse:
        """The handler's answer, or the JSON error it maps to (``HungUp`` passes through)."""
        try:
            return await handler(request)
        except HungUp:
            raise
        except BodyTimeout:
            response = _json(
                408, {"errorDetails": f"the request body took over MAX_HTTP_BODY_SECONDS "
                                      f"({self.timeouts.body:g} s)"},
            )  # fmt: skip
            response.force_close()
            return response
        except BadBody as exc:
            return await _refuse_body(request, exc)
        except web.HTTPRequestEntityTooLarge:
            return _json(
                413,
                {"errorDetails": f"request body over MAX_HTTP_BODY_BYTES ({MAX_HTTP_BODY_BYTES})"},
            )
        except web.HTTPException as exc:  # 404 and 405 from the router
            return _json(exc.status, {"errorDetails": exc.reason}, exc.headers)
        except Exception as exc:
            if self.on_error is not None:
                self.on_error(f"{request.method} {route}: {type(exc).__name__}: {exc}")
            return _json(500, {"errorDetails": "internal error; see the daemon's log"})

    async def _ofrep_one(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, self.timeouts.body)
        answer = ofrep.evaluate_one(self.state.snapshot, request.match_info["key"], body)
        return _json(answer.status, answer.document, answer.headers)

    async def _ofrep_bulk(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, self.timeouts.body)
        answer = ofrep.evaluate_bulk(
            self.state.snapshot, body, request.headers.get("If-None-Match")
        )
        return _json(answer.status, answer.document, answer.headers)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        body, content_type = self.metrics.exposition(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        return _json(200, {"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.StreamResponse:
        why = self.not_ready()
        snapshot = self.state.snapshot
        digest = snapshot.policies.digest  # which policies, ready or not (a stale set's too)
        if why is not None:
            return _json(503, {"status": "not ready", "why": why, "policy_digest": digest})
        return _json(
            200,
            {
                "status": "ready",
                "revision": snapshot.revision,
                "fingerprint": snapshot.resolution.fingerprint,
                "policy_digest": digest,
                "policy_error": snapshot.policy_error,
            },
        )
