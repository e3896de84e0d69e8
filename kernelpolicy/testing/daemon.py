"""Run a real daemon in this process, on loopback, for tests (yours and ours)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from kernelpolicy.platform.model import Platform

if TYPE_CHECKING:
    from kernelpolicy.server.daemon import Daemon

T = TypeVar("T")

CALL_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class RunningDaemon:
    """What :func:`running_daemon` yields: the started daemon (``daemon.bound[0]`` is its
    address, ``daemon.state`` what it serves, ``daemon.fleet.url`` its HTTP listener's URL),
    and :meth:`call` to run one of its coroutines on the event loop it runs on."""

    daemon: Daemon
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (such as ``daemon.reload()``) on the daemon's loop and return its
        result, waiting at most ``CALL_TIMEOUT_SECONDS``."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_TIMEOUT_SECONDS)


@contextmanager
def running_daemon(
    platform: Platform,
    policy_paths: Sequence[Path],
    env: Mapping[str, str] | None = None,
    *,
    listen: Sequence[str] = ("127.0.0.1:0",),
    watch: bool = True,
    overrides: Mapping[str, str] | None = None,
    tls: Any = None,
    log_format: str = "off",
    log_stream: TextIO | None = None,
    default_socket: str | None = None,
    http: str | None = None,
    labels_dir: Path | None = None,
    ready_requires_current_policy: bool = False,
    grpc_connections: int | None = None,
    grpc_tcp_calls: int | None = None,
    warm: Any = None,
) -> Iterator[RunningDaemon]:
    """A started :class:`~kernelpolicy.server.daemon.Daemon` on its own event-loop thread.

    Yields a :class:`RunningDaemon`: ``running.daemon.bound[0]`` is its address,
    ``running.call(running.daemon.reload())`` reloads it. ``tls`` takes a
    :class:`~kernelpolicy.server.tls.TlsFiles` (``TlsFiles.load(cert, key)``); ``log_format``
    (``json`` or ``console``) and ``log_stream`` turn the daemon's log on; ``default_socket``
    names the listen address treated as the default socket (its directory is made private).
    ``http`` (such as ``"127.0.0.1:0"``) adds the HTTP listener, whose URL is then
    ``running.daemon.fleet.url``; ``labels_dir`` writes the NFD feature file there;
    ``ready_requires_current_policy`` makes ``/readyz`` say no while a reload is failing;
    ``grpc_connections`` caps each gRPC listener's connections, ``grpc_tcp_calls`` the calls in
    flight on its TCP listeners (default: the daemon's own caps); ``warm`` is ``serve --warm``'s
    start (:data:`kernelpolicy.server.fleet.WarmStart`).
    """
    from kernelpolicy.server.daemon import Daemon
    from kernelpolicy.server.state import ServingState

    state = ServingState(platform, env or {}, list(policy_paths), overrides or {})
    make = functools.partial(
        Daemon, state, list(listen), tls=tls, log_format=log_format, watch=watch,
        reload_debounce_ms=50, log_stream=log_stream, default_socket=default_socket,
        http=http, labels_dir=labels_dir,
        ready_requires_current_policy=ready_requires_current_policy,
        grpc_connections=grpc_connections, grpc_tcp_calls=grpc_tcp_calls, warm=warm,
    )  # fmt: skip
    with _serving_on_own_loop(make) as running:
        yield running


@contextmanager
def _serving_on_own_loop(make: Callable[[], Daemon]) -> Iterator[RunningDaemon]:
    """Build the daemon with ``make`` on a new event loop in its own thread, and serve until the
    block ends; yields once every listener is bound, and stops it on the way out.

    Raises:
        BaseException: Whatever the daemon's start-up raised, in the caller's thread.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            daemon = make()
            holder["daemon"] = daemon
            await daemon.serve(handle_signals=False, on_started=ready.set)

        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # surface start-up failures to the caller
            holder["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="kernelpolicy-daemon", daemon=True)
    thread.start()
    ready.wait(30)
    if "error" in holder:
        raise holder["error"]
    daemon: Daemon = holder["daemon"]
    try:
        yield RunningDaemon(daemon, loop)
    finally:
        loop.call_soon_threadsafe(daemon.stop)
        thread.join(30)
        loop.close()
