"""``kernelpolicy.connect(address)``: the daemon's answers as in-process Resolutions.

``resolve()`` asks the daemon for its inputs (platform snapshot, relevant environment, policy
texts, evidence) and resolves them here with the same pure engine: the Resolution has the same
type, the same decisions and the same fingerprint as the daemon's, and its ``select()`` and
``gate()`` run in this process at in-process speed. The fingerprint is checked against the one
the daemon reports.

Whatever the daemon answers is read as untrusted (on TCP it may be anyone who bound the port
first): its inputs are parsed with bounds (:func:`~kernelpolicy.server.convert.rebuild`), and
each text of it that goes into an error here (a status detail, a fingerprint) is cut and escaped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc
from google.protobuf import struct_pb2

from kernelpolicy.dtypes import dtype_name
from kernelpolicy.encoding import described, one_line
from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import DaemonError
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.convert import rebuild

CONNECT_TIMEOUT = 2.0
"""Seconds a client waits for the daemon to accept a connection before saying it is not there."""
_FAILED = grpc.ChannelConnectivity.TRANSIENT_FAILURE


class Client:
    """A connection to ``kernelpolicy serve``; use it as a context manager or call close()."""

    def __init__(
        self,
        address: str | None = None,
        *,
        timeout: float = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        from kernelpolicy.server.addresses import check_address
        from kernelpolicy.server.sockets import check_peer, node_socket_address

        self.address = check_address(address or node_socket_address(os.environ))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        check_peer(self.address)  # before grpc: refuse a daemon run by another user
        self._tls = credentials is not None
        self.channel = (
            grpc.secure_channel(self.address, credentials)
            if credentials is not None
            else grpc.insecure_channel(self.address)
        )
        self.stub = pb_grpc.KernelPolicyStub(self.channel)
        self._ready = False

    def wait_ready(self) -> None:
        """Wait (at most ``connect_timeout`` seconds) until the daemon accepts a connection.

        Raises:
            DaemonError: The connection was refused (said at once: nothing listens there), or
                nothing answered in time, saying so rather than after the whole request
                timeout.
        """
        if self._ready:
            return
        import threading
        import time

        attempts = threading.Event()  # set at each READY or TRANSIENT_FAILURE
        states: list[grpc.ChannelConnectivity] = []

        def changed(state: grpc.ChannelConnectivity) -> None:
            states.append(state)
            if state in (grpc.ChannelConnectivity.READY, _FAILED):
                attempts.set()

        deadline = time.monotonic() + self.connect_timeout
        self.channel.subscribe(changed, try_to_connect=True)
        try:
            while grpc.ChannelConnectivity.READY not in states:
                if not attempts.wait(max(0.0, deadline - time.monotonic())):
                    raise self._not_answering()
                attempts.clear()
                if grpc.ChannelConnectivity.READY not in states:
                    _raise_if_refused(self.address)  # else a handshake failed: wait on
        finally:
            self.channel.unsubscribe(changed)
        self._ready = True

    def _not_answering(self) -> DaemonError:
        tls = (
            "with TLS, as this client is? Is its certificate signed by the CA given "
            "(--tls-ca), and does it require a client certificate (--tls-cert/--tls-key)?"
            if self._tls
            else "without TLS? Note: this client speaks plain gRPC; a daemon with TLS is asked "
            "on its unix socket, with --tls-ca FILE (status, explain, diff), or with connect() "
            "given credentials"
        )
        if _closed_at_once(self.address):
            return DaemonError(
                f"{self.address}: not answering (no connection within {self.connect_timeout:g} "
                "s): it accepts each connection and closes it at once, as kernelpolicy serve "
                "does past its gRPC connection caps (MAX_GRPC_CONNECTIONS_PER_PEER from one peer, "
                "all of loopback one; MAX_GRPC_CONNECTIONS in all); another client holds them: "
                "try again later, or ask over the daemon's unix socket",
                grpc.StatusCode.UNAVAILABLE,
            )
        return DaemonError(
            f"{self.address}: not answering (no connection within {self.connect_timeout:g} s); "
            f"is kernelpolicy serve running there, {tls}",
            grpc.StatusCode.UNAVAILABLE,
        )

    def _call(self, method: str, request: Any) -> Any:
        self.wait_ready()
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise DaemonError(
                f"{self.address}: {method} failed: {exc.code().name}: {failure_details(exc)}",
                exc.code(),
            ) from None

    def resolve(
        self, *, platform_json: str | None = None, env: Mapping[str, str] | None = None
    ) -> Resolution:
        """The daemon's Resolution (or what it would decide for another platform or env)."""
        request = pb.ResolveRequest(include_inputs=True)
        if platform_json is not None:
            request.platform_json = platform_json
        if env is not None:
            request.env.update(env)
            request.hypothetical_env = True
        return _checked(self._call("Resolve", request), self._host, self.address)

    def _host(self, response: pb.ResolveResponse) -> Host:
        """What a Resolution rebuilt from ``response`` is given: this process's decision log,
        this daemon's report socket for its run-time events (unix only), and the daemon's
        revision and last policy reload error."""
        from kernelpolicy.logs import runtime_log
        from kernelpolicy.server.node import node_reporter
        from kernelpolicy.settings import load_settings

        settings = load_settings()
        unix = self.address.startswith("unix:")
        return Host(
            log=runtime_log(settings.log_format),
            reporter=node_reporter(settings, self.address) if unix else None,
            revision=response.revision,
            policy_error=response.policy_error or None,
            policy_entries=unix or self._tls,  # the daemon is who it says (peer check, TLS)
        )

    def decisions(
        self,
        features: list[str] | None = None,
        context: Mapping[str, Any] | None = None,
        gates: list[str] | None = None,
        *,
        include_inputs: bool = False,
    ) -> pb.ResolveResponse:
        """The raw decisions message, with per-call choices and gates for ``context``, and with
        ``include_inputs`` the inputs the daemon decided from (its snapshot, switches, policy
        texts, evidence), as the daemon sent them (no Resolution rebuilt here)."""
        request = pb.ResolveRequest(
            features=features or [], gates=gates or [], include_inputs=include_inputs
        )
        if context is not None:
            request.context.CopyFrom(_struct(context))
        response: pb.ResolveResponse = self._call("Resolve", request)
        return response

    def explain(self, features: list[str] | None = None) -> pb.ExplainResponse:
        response: pb.ExplainResponse = self._call(
            "Explain", pb.ExplainRequest(features=features or [])
        )
        return response

    def platform_json(self) -> str:
        return str(self._call("GetPlatform", pb.GetPlatformRequest()).json)

    def watch(self) -> Iterator[Resolution]:
        """The current Resolution at once, then each new one after a reload."""
        self.wait_ready()
        stream = self.stub.Watch(pb.WatchRequest(include_inputs=True), wait_for_ready=True)
        try:
            for response in stream:
                yield _checked(response, self._host, self.address)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise DaemonError(
                    f"{self.address}: Watch failed: {failure_details(exc)}", exc.code()
                ) from None
        finally:
            stream.cancel()

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    address: str | None = None,
    *,
    timeout: float = 10.0,
    credentials: grpc.ChannelCredentials | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> Client:
    """A client of the daemon at ``address``.

    Args:
        address: ``unix:/path`` or ``host:port``; default: ``KERNELPOLICY_SOCKET``, else
            this user's unix socket (``$XDG_RUNTIME_DIR/kernelpolicy/kernelpolicy.sock``,
            ``/run/kernelpolicy/...`` for root).
        timeout: Seconds each request may take.
        credentials: TLS channel credentials for a TCP daemon that uses TLS.
        connect_timeout: Seconds to wait for the daemon to accept a connection on first use.

    Raises:
        DaemonError: A unix-socket daemon runs as neither root nor this user (checked with
            the socket's peer credentials before any request), or nothing answers there.
    """
    return Client(
        address, timeout=timeout, credentials=credentials, connect_timeout=connect_timeout
    )


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(
        {k: dtype_name(v) if type(v).__module__ == "torch" else v for k, v in values.items()}
    )
    return struct


_TCP_CALLS_FULL = "Concurrent RPC limit exceeded!"  # grpc.aio's words past MAX_GRPC_TCP_CALLS


def failure_details(exc: grpc.RpcError) -> str:
    """The status details of a failed call, cut and escaped (the daemon wrote them), with what
    to do where gRPC's own words do not say it."""
    details = one_line(str(exc.details() or ""))
    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and details == _TCP_CALLS_FULL:
        details += (
            " (the daemon's TCP listeners hold the most calls they take at once, "
            "MAX_GRPC_TCP_CALLS; try again later, or ask over its unix socket, which TCP "
            "clients cannot fill)"
        )
    return details


def _closed_at_once(address: str) -> bool:
    """Whether the TCP listener at ``address`` accepts a connection and closes (or resets) it
    before sending anything: a gRPC server sends its HTTP/2 settings at once (TLS waits for the
    client: no answer, not a close), so a daemon that does this is refusing connections."""
    if address.startswith("unix:"):
        return False
    import socket

    from kernelpolicy.server.addresses import split_address

    split = split_address(address)
    try:
        with socket.create_connection(
            (split.host or "localhost", int(split.port)), timeout=1.0
        ) as sock:
            return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except OSError:  # refused, unreachable, or nothing said within the second
        return False


def _raise_if_refused(address: str) -> None:
    """After gRPC failed to connect to a TCP ``address``: a plain connection there, refused,
    means nothing listens (gRPC would retry until the connect timeout without saying so).

    Raises:
        DaemonError: The connection was refused.
    """
    if address.startswith("unix:"):  # a missing or dead socket was said before gRPC (check_peer)
        return
    import socket

    from kernelpolicy.server.addresses import split_address

    split = split_address(address)
    try:
        socket.create_connection((split.host or "localhost", int(split.port)), timeout=1.0).close()
    except ConnectionRefusedError:
        raise DaemonError(
            f"{address}: not answering: connection refused, nothing listens on {address}; is "
            "kernelpolicy serve running, and on this address?",
            grpc.StatusCode.UNAVAILABLE,
        ) from None
    except OSError:  # unreachable, or slow: gRPC keeps trying until the connect timeout
        return


def _checked(
    response: pb.ResolveResponse, host: Callable[[pb.ResolveResponse], Host], address: str
) -> Resolution:
    """The Resolution rebuilt from ``response``, checked against the fingerprint it reports.

    Raises:
        DaemonError: The inputs cannot be used, or they rebuild another Resolution.
    """
    resolution = rebuild(response.inputs, host(response), daemon=address)
    if resolution.fingerprint != response.fingerprint:
        raise DaemonError(
            f"{address}: rebuilt resolution has fingerprint {resolution.fingerprint}, the daemon "
            f"reported {described(response.fingerprint)}: client and daemon run different "
            "kernelpolicy versions?"
        )
    return resolution
