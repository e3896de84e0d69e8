"""Calls in flight on the TCP listeners, capped per peer: no one client can hold them all.

grpc.aio's own cap (``maximum_concurrent_rpcs``, ``MAX_GRPC_TCP_CALLS``) counts every call
alike, so one client that opened calls and never finished them (half-sent requests, slow
streams) held all 320 and every other client of the TCP port was refused until it let go. Here
each peer holds at most ``MAX_GRPC_CALLS_PER_PEER`` calls at once; one past it is refused
``RESOURCE_EXHAUSTED`` with a message naming the limit, before its request is read, while other
peers are served.

A peer is an address without its port, grouped (:func:`~kernelpolicy.server.peers.peer_key`,
as the stream slots and the HTTP listener count: all of loopback is one peer, an IPv6 /64 is
one), not a connection: a connection costs a client nothing to open, so a cap per connection
would bound nothing, and neither would a cap per address where a client may pick among many
(any local user binds any 127.x source; a host owns its /64). Clients behind one address or
group (a NAT, every local user on loopback) share its cap; that is what the unix socket, a
server of its own, is for. Its clients are not capped here: grpc gives a
server no peer credentials there, and only the daemon's own user (and root) may connect.

grpc reads a unary call's request before any handler runs, and gives an interceptor no peer;
so :class:`PeerCalls`, the outermost interceptor of the TCP server, serves each unary method
through a request-streaming handler, which runs as soon as the call's headers are in: it takes
the peer's slot, then reads the one request itself. The handlers inside (the metrics
interceptor's, the boundary's) see the unary calls they always saw.

A slot so taken is held while the request arrives, so that request (a request stream's first
message) must be in within ``MAX_GRPC_REQUEST_SECONDS``: past it the call is ended
``DEADLINE_EXCEEDED`` naming the limit, and its slot given back. Before, a client that sent a
call's headers and part of its message, then nothing, held the slot for as long as it kept the
connection open. A server stream whose request is in runs on (its stream slot bounds it).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_GRPC_CALLS_PER_PEER, MAX_GRPC_REQUEST_SECONDS
from kernelpolicy.server.peers import peer_key
from kernelpolicy.server.rpc_boundary import Emit
from kernelpolicy.server.streams import PeerCounts


class CallSlots:
    """Calls in flight by peer; :meth:`take` holds one, :meth:`give_back` returns it. No I/O.

    Args:
        per_peer: Calls one peer may have in flight (``MAX_GRPC_CALLS_PER_PEER``).
    """

    def __init__(self, per_peer: int = MAX_GRPC_CALLS_PER_PEER) -> None:
        self.per_peer = per_peer
        self._held = PeerCounts()

    @property
    def count(self) -> int:
        return self._held.count

    def of(self, peer: str) -> int:
        """Calls held by ``peer`` (a gRPC peer string)."""
        return self._held.of(peer_key(peer))

    def take(self, peer: str) -> str:
        """Hold a slot for ``peer`` (a gRPC peer string); returns the key to give back.

        Raises:
            DaemonError: RESOURCE_EXHAUSTED naming ``MAX_GRPC_CALLS_PER_PEER``.
        """
        key = peer_key(peer)
        held = self._held.of(key)
        if held >= self.per_peer:
            raise DaemonError(
                f"{held} calls already in flight from {key}, the most one peer may have "
                f"(MAX_GRPC_CALLS_PER_PEER {self.per_peer}); wait for one to end",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
        self._held.add(key)
        return key

    def give_back(self, key: str) -> None:
        self._held.remove(key)


class PeerCalls(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The interceptor that holds a :class:`CallSlots` slot for every call while it runs.

    Args:
        emit: Where a refusal is logged (the daemon's throttled client log).
        slots: The counts (default: ``MAX_GRPC_CALLS_PER_PEER`` per peer).
    """

    def __init__(self, emit: Emit, slots: CallSlots | None = None) -> None:
        self.slots = CallSlots() if slots is None else slots
        self._emit = emit
        self._late = (
            f"the call's request did not arrive within MAX_GRPC_REQUEST_SECONDS "
            f"({MAX_GRPC_REQUEST_SECONDS:g} s) of its start; send a request whole, at once"
        )
        self._wrapped: dict[str, Any] = {}  # the server's handlers never change

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        method = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = await continuation(details)
            if handler is None:  # an unknown method: UNIMPLEMENTED, and its name not kept
                return None
            wrapped = self._wrapped[method] = self._wrap(method, handler)
        return wrapped

    async def _refuse(
        self, context: grpc.aio.ServicerContext, method: str, code: grpc.StatusCode, detail: str
    ) -> NoReturn:
        self._emit("warning", "kernelpolicy.request.rejected", method=method, code=code.name,
                   detail=detail)  # fmt: skip
        await context.abort(code, detail)
        raise AssertionError("unreachable: abort raises")  # for the type checker

    async def _take(self, context: grpc.aio.ServicerContext, method: str) -> str:
        try:
            return self.slots.take(context.peer())
        except DaemonError as exc:
            await self._refuse(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

    async def _request(self, context: grpc.aio.ServicerContext, method: str) -> Any:
        """The call's one request, read within ``MAX_GRPC_REQUEST_SECONDS``."""
        try:
            async with asyncio.timeout(MAX_GRPC_REQUEST_SECONDS):
                request = await context.read()
        except TimeoutError:
            await self._refuse(context, method, grpc.StatusCode.DEADLINE_EXCEEDED, self._late)
        if request is grpc.aio.EOF:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "the call ended before its request message"
            )
        return request

    async def _stream(
        self, requests: Any, context: grpc.aio.ServicerContext, method: str
    ) -> AsyncIterator[Any]:
        """A request stream whose first message has come within ``MAX_GRPC_REQUEST_SECONDS``
        (or which has ended); the same messages, that one first."""
        stream: AsyncIterator[Any] = aiter(requests)
        try:
            async with asyncio.timeout(MAX_GRPC_REQUEST_SECONDS):
                head = await anext(stream)
        except StopAsyncIteration:
            return stream
        except TimeoutError:
            await self._refuse(context, method, grpc.StatusCode.DEADLINE_EXCEEDED, self._late)
        return _chained(head, stream)

    def _wrap(self, method: str, handler: Any) -> Any:
        """``handler`` as a request-streaming handler that holds a slot, or ``handler`` held."""
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            async def unary_call(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                key = await self._take(context, method)
                try:
                    return await unary(await self._request(context, method), context)
                finally:
                    self.slots.give_back(key)

            return grpc.stream_unary_rpc_method_handler(unary_call, **options)
        if handler.unary_stream is not None:
            behaviour = self._streaming(method, handler.unary_stream, read=True)
            return grpc.stream_stream_rpc_method_handler(behaviour, **options)
        if handler.stream_unary is not None:
            streamed = handler.stream_unary

            async def stream_call(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                key = await self._take(context, method)
                try:
                    return await streamed(await self._stream(requests, context, method),
                                          context)  # fmt: skip
                finally:
                    self.slots.give_back(key)

            return grpc.stream_unary_rpc_method_handler(stream_call, **options)
        behaviour = self._streaming(method, handler.stream_stream, read=False)
        return grpc.stream_stream_rpc_method_handler(behaviour, **options)

    def _streaming(self, method: str, behaviour: Any, *, read: bool) -> Any:
        """A response-streaming ``behaviour`` (an async generator, or a coroutine that writes
        through ``context.write``: grpc_health's Watch) with a slot held while it runs; its
        one request read first where ``read`` (a unary-stream method)."""

        async def first(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            if read:
                return await self._request(context, method)
            return await self._stream(requests, context, method)

        if not inspect.isasyncgenfunction(behaviour):

            async def writer(requests: Any, context: grpc.aio.ServicerContext) -> None:
                key = await self._take(context, method)
                try:
                    await behaviour(await first(requests, context), context)
                finally:
                    self.slots.give_back(key)

            return writer

        async def stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            key = await self._take(context, method)
            try:
                async for item in behaviour(await first(requests, context), context):
                    yield item
            finally:
                self.slots.give_back(key)

        return stream


async def _chained(head: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield head
    async for item in rest:
        yield item
