"""``kernelpolicy serve``: the asyncio gRPC daemon, its listeners, reloads and shutdown."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kernelpolicy.errors import DaemonError
from kernelpolicy.logs import get_logger
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server.services import FlagdV1, FlagdV2, KernelPolicyService
from kernelpolicy.server.state import ServingState

DEFAULT_PORT = 50151
MAX_MESSAGE_BYTES = 1 << 20  # requests are small; anything bigger is refused (RESOURCE_EXHAUSTED)
SERVICES = (
    pb.DESCRIPTOR.services_by_name["KernelPolicy"].full_name,
    f1.DESCRIPTOR.services_by_name["Service"].full_name,
    f2.DESCRIPTOR.services_by_name["Service"].full_name,
)


def default_unix_socket() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path("/tmp")
    return f"unix:{base / f'kernelpolicy-{os.getuid()}.sock'}"


def is_loopback(address: str) -> bool:
    """Whether a listen address stays on this machine (loopback or a unix socket)."""
    if address.startswith("unix:"):
        return True
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        ca = self.client_ca.read_bytes() if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )


@dataclass
class Daemon:
    """One server with every service, bound to ``listen`` addresses.

    Attributes:
        bound: The addresses actually bound (with the port the OS chose for ``:0``).
    """

    state: ServingState
    listen: Sequence[str]
    tls: TlsFiles | None = None
    log_format: str = "console"
    watch: bool = True
    reload_debounce_ms: int = 300
    bound: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log = get_logger(self.log_format) if self.log_format != "off" else None
        self._stopping = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self.server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.health = health.aio.HealthServicer()

    def _emit(self, event: str, **fields: Any) -> None:
        if self.log is not None:
            self.log.info(event, **fields)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        add_service(
            server, pb.DESCRIPTOR.services_by_name["KernelPolicy"], KernelPolicyService(self.state)
        )
        add_service(server, f1.DESCRIPTOR.services_by_name["Service"], FlagdV1(self.state))
        add_service(server, f2.DESCRIPTOR.services_by_name["Service"], FlagdV2(self.state))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME),
            server,
        )  # fmt: skip
        for address in self.listen:
            if not is_loopback(address):
                self._emit(
                    "kernelpolicy.serve.warning",
                    message=f"listening on {address}, reachable beyond this machine"
                    + ("" if self.tls else " WITHOUT TLS: set KERNELPOLICY_TLS_CERT_FILE/KEY_FILE"),
                )
            try:
                if self.tls is not None and not address.startswith("unix:"):
                    port = server.add_secure_port(address, self.tls.credentials())
                else:
                    port = server.add_insecure_port(address)
            except RuntimeError:
                raise DaemonError(
                    f"cannot listen on {address}: the address is in use (another kernelpolicy "
                    "serve?) or not valid here; pick another with --listen"
                ) from None
            self.bound.append(address if address.startswith("unix:") else _with_port(address, port))
        await server.start()
        self.server = server
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self._emit(
            "kernelpolicy.serve.start",
            listen=self.bound,
            revision=self.state.snapshot.revision,
            fingerprint=self.state.snapshot.resolution.fingerprint,
            policies=[name for name, _ in self.state.snapshot.sources],
        )

    async def _set_health(self, status: Any) -> None:
        for service in ("", *SERVICES):
            await self.health.set(service, status)

    async def reload(self, why: str = "request") -> None:
        """Re-read the policy files; a bad set keeps the last good one and is reported."""
        async with self._reload_lock:
            prepared = await asyncio.to_thread(self.state.prepare_reload)
            change = self.state.commit(prepared)
            snapshot = self.state.snapshot
            if isinstance(prepared, str):
                self._emit("kernelpolicy.reload.failed", why=why, error=prepared,
                           serving_revision=snapshot.revision)  # fmt: skip
            else:
                self._emit(
                    "kernelpolicy.reload",
                    why=why,
                    revision=snapshot.revision,
                    changed=list(change.flags) if change else [],
                    fingerprint=snapshot.resolution.fingerprint,
                )

    async def _watch_files(self) -> None:
        from watchfiles import awatch

        targets = {p if p.is_dir() else p.parent for p in self.state.policy_paths}
        async for _ in awatch(
            *targets, stop_event=self._stopping, debounce=self.reload_debounce_ms,
            step=50, recursive=True, force_polling=False,
        ):  # fmt: skip
            await self.reload("files changed")

    async def serve(
        self, *, handle_signals: bool = True, on_started: Callable[[], None] | None = None
    ) -> None:
        """Start, then run until stop() or SIGTERM/SIGINT; SIGHUP reloads."""
        await self.start()
        if on_started is not None:
            on_started()
        loop = asyncio.get_running_loop()
        if handle_signals:
            loop.add_signal_handler(
                signal.SIGHUP, lambda: asyncio.ensure_future(self.reload("SIGHUP"))
            )
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stopping.set)
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
        await self.server.stop(grace)


def _serialize(message: Any) -> bytes:
    """Messages are serialised as usual; answers cached as bytes go out as they are."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_service(server: Any, service: Any, servicer: Any) -> None:
    """Register ``servicer`` for a service descriptor, as the generated ``add_*_to_server``
    does, except that handlers may return pre-serialised bytes (the cached hot answers)."""
    from google.protobuf.message_factory import GetMessageClass

    handlers = {}
    for method in service.methods:
        request_class = GetMessageClass(method.input_type)
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request_class.FromString,
            response_serializer=_serialize,
        )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(service.full_name, handlers)]
    )


def _with_port(address: str, port: int) -> str:
    host = address.rsplit(":", 1)[0]
    return f"{host}:{port}"
