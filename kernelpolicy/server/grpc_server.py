"""The daemon's gRPC server: its limits, and its services, each through the one boundary.

Each listener (the TCP port, the unix socket) holds at most ``MAX_GRPC_CONNECTIONS`` connections,
and never more than ``GRPC_DESCRIPTOR_SHARE`` of the descriptor limit, so that a local user's idle
connections to the TCP port cannot take the descriptors the workers' unix socket needs; a connection
carries at most ``MAX_GRPC_STREAMS_PER_CONNECTION`` calls at once, is closed after
``MAX_GRPC_IDLE_SECONDS`` without one, and must finish its handshake within
``MAX_GRPC_HANDSHAKE_SECONDS``. On TCP the daemon accepts connections itself and relays them to the
gRPC server on a private unix socket (:mod:`.grpc_relay`), so that one peer holds at most
``MAX_GRPC_CONNECTIONS_PER_PEER`` of them. The TCP listeners and the unix sockets are two servers:
TCP clients (any local user) hold at most ``MAX_GRPC_TCP_CALLS`` calls in flight with requests of
``MAX_TCP_REQUEST_BYTES`` at most, so half-sent requests cannot grow the daemon's memory past a
bound, and what they hold (connections, calls, hypothetical requests' places) is never taken from
the workers' unix socket. One TCP peer holds at most ``MAX_GRPC_CALLS_PER_PEER`` of those calls
(:mod:`.peer_calls`), and a call sends at most ``MAX_GRPC_UNREAD_BYTES`` before the daemon asks for
its request, so a call refused at once costs no more than that; a call whose request is not in
within ``MAX_GRPC_REQUEST_SECONDS`` is ended ``DEADLINE_EXCEEDED``, its slot freed, so half-sent
requests hold their slots no longer than that. Every service, health and reflection included, goes
through :class:`~kernelpolicy.server.rpc_boundary.Boundary`: no answer is UNKNOWN or names a Python
class, and every server stream holds a stream slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from kernelpolicy.limits import (
    GRPC_DESCRIPTOR_SHARE,
    MAX_GRPC_CONNECTIONS,
    MAX_GRPC_HANDSHAKE_SECONDS,
    MAX_GRPC_IDLE_SECONDS,
    MAX_GRPC_STREAMS_PER_CONNECTION,
    MAX_GRPC_UNREAD_BYTES,
    MAX_REQUEST_BYTES,
    MAX_TCP_REQUEST_BYTES,
)
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server.connections import descriptor_cap
from kernelpolicy.server.grpc_relay import GrpcRelay, relay_connection_cap
from kernelpolicy.server.hypothetical import Hypotheticals
from kernelpolicy.server.peer_calls import PeerCalls
from kernelpolicy.server.rpc_boundary import Boundary, decoder
from kernelpolicy.server.services import FlagdV1, FlagdV2, KernelPolicyService
from kernelpolicy.server.state import ServingState

SERVICES = (
    pb.DESCRIPTOR.services_by_name["KernelPolicy"].full_name,
    f1.DESCRIPTOR.services_by_name["Service"].full_name,
    f2.DESCRIPTOR.services_by_name["Service"].full_name,
)

TCP_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", MAX_GRPC_UNREAD_BYTES)]
"""The TCP server's HTTP/2 stream window: ``MAX_GRPC_UNREAD_BYTES`` until the daemon reads the
request (then its announced size), never grown by BDP probing. With grpc's default, which BDP
probing grows, a client that opened a new call each time one was refused made the daemon buffer
up to a window of data per refused call, and its memory grew by hundreds of MiB and stayed."""


def grpc_connection_cap() -> int:
    """Connections one gRPC listener may hold: ``MAX_GRPC_CONNECTIONS``, and at most
    ``GRPC_DESCRIPTOR_SHARE`` of this process's descriptor limit (``RLIMIT_NOFILE``)."""
    return descriptor_cap(MAX_GRPC_CONNECTIONS, GRPC_DESCRIPTOR_SHARE)


def grpc_server(
    state: ServingState,
    boundary: Boundary,
    health: Any,
    interceptors: Sequence[Any],
    *,
    connections: int,
    hypotheticals: Hypotheticals,
    tcp_calls: int | None,
) -> Any:
    """An unstarted ``grpc.aio`` server with every service registered, ``connections`` per
    listener; ``health`` is the daemon's health servicer, ``hypotheticals`` where its
    hypothetical answers are worked out. ``tcp_calls``: a server for TCP listeners, which
    refuses a call past that many in flight, past ``MAX_GRPC_CALLS_PER_PEER`` from one peer,
    and a request over ``MAX_TCP_REQUEST_BYTES``, and ends one whose request is not in within
    ``MAX_GRPC_REQUEST_SECONDS``; None: one for unix sockets (requests up to
    ``MAX_REQUEST_BYTES``, no call cap, no request deadline)."""
    request_bytes = MAX_REQUEST_BYTES if tcp_calls is None else MAX_TCP_REQUEST_BYTES
    tcp_options = [] if tcp_calls is None else TCP_WINDOW
    relay = None
    if tcp_calls is not None:  # outermost: its slot is taken before any request is read
        interceptors = [PeerCalls(boundary.emit), *interceptors]
        relay = GrpcRelay(on_close=_replaced(boundary.emit),
                          total=min(connections, relay_connection_cap()))  # fmt: skip
        connections = 2 * relay.table.total  # a bound behind the relay's, never the one met
    server = grpc.aio.server(
        interceptors=interceptors,
        maximum_concurrent_rpcs=tcp_calls,
        options=[
            *tcp_options,
            ("grpc.max_receive_message_length", request_bytes),
            ("grpc.so_reuseport", 0),
            ("grpc.max_allowed_incoming_connections", connections),
            ("grpc.max_concurrent_streams", MAX_GRPC_STREAMS_PER_CONNECTION),
            ("grpc.max_connection_idle_ms", int(MAX_GRPC_IDLE_SECONDS * 1000)),
            ("grpc.server_handshake_timeout_ms", int(MAX_GRPC_HANDSHAKE_SECONDS * 1000)),
        ],
    )
    add_service(server, pb.DESCRIPTOR.services_by_name["KernelPolicy"],
                KernelPolicyService(state, hypotheticals), boundary)  # fmt: skip
    add_service(server, f1.DESCRIPTOR.services_by_name["Service"], FlagdV1(state), boundary)
    add_service(server, f2.DESCRIPTOR.services_by_name["Service"], FlagdV2(state), boundary)
    health_service = health_pb2.DESCRIPTOR.services_by_name["Health"]
    add_service(server, health_service, health, boundary)
    names = (*SERVICES, health_service.full_name, reflection.SERVICE_NAME)
    add_service(server, reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
                reflection.aio.ReflectionServicer(names), boundary)  # fmt: skip
    return server if relay is None else RelayedServer(server, relay)


def _replaced(emit: Any) -> Any:
    def on_close(reason: str, peer: str) -> None:
        emit("info", "kernelpolicy.grpc.closed", reason=reason, peer=peer)

    return on_close


class RelayedServer:
    """The TCP listeners' gRPC server behind a :class:`~.grpc_relay.GrpcRelay`, bound and
    started as a ``grpc.aio`` server is: a TCP address given to ``add_*_port`` is the relay's to
    accept on; the gRPC server listens on the relay's private unix socket (with the same
    credentials, so TLS runs from the client to it)."""

    def __init__(self, server: Any, relay: GrpcRelay) -> None:
        self.server = server
        self.relay = relay
        self._credentials: Any = None
        self._started = False

    def add_insecure_port(self, address: str) -> int:
        return self.relay.bind(address)

    def add_secure_port(self, address: str, credentials: Any) -> int:
        self._credentials = credentials
        return self.relay.bind(address)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            upstream = f"unix:{self.relay.path}"
            if self._credentials is None:
                self.server.add_insecure_port(upstream)
            else:
                self.server.add_secure_port(upstream, self._credentials)
        await self.server.start()
        self.relay.start()

    async def stop(self, grace: float | None) -> None:
        await self.relay.stop()
        await self.server.stop(grace)
        self.relay.close()


def _serialize(message: Any) -> bytes:
    """Messages are serialised as usual; answers cached as bytes go out as they are."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_service(server: Any, service: Any, servicer: Any, boundary: Boundary) -> None:
    """Register ``servicer`` for a service descriptor, as the generated ``add_*_to_server``
    does, except that every handler goes through ``boundary`` (requests checked, failures
    mapped to a status) and may return pre-serialised bytes (the cached hot answers)."""
    from google.protobuf.message_factory import GetMessageClass

    handlers = {}
    for method in service.methods:
        request_class = GetMessageClass(method.input_type)
        name = f"{service.full_name}/{method.name}"
        handler: Any
        if method.client_streaming:  # server reflection: bidirectional
            make = grpc.stream_stream_rpc_method_handler
            handler = boundary.guard_bidi(name, getattr(servicer, method.name))
        elif method.server_streaming:
            make = grpc.unary_stream_rpc_method_handler
            handler = boundary.guard_stream(name, getattr(servicer, method.name))
        else:
            make = grpc.unary_unary_rpc_method_handler
            handler = boundary.guard(name, getattr(servicer, method.name))
        handlers[method.name] = make(
            handler,
            request_deserializer=decoder(request_class),
            response_serializer=_serialize,
        )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(service.full_name, handlers)]
    )
