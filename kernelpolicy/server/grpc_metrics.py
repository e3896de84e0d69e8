"""The daemon's gRPC metrics: a ``grpc.aio`` server interceptor that counts each RPC by method
and status code and times the unary ones, into the counter and histogram of
:class:`~kernelpolicy.server.metrics.DaemonMetrics` (its ``interceptor()`` gives it to the gRPC
servers).

Label values are bounded: only registered methods have a handler to wrap (an unknown one, whose
name is whatever the client sent, is not counted).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram


def grpc_interceptor(requests: Counter, latency: Histogram) -> Any:
    """A ``grpc.aio`` server interceptor counting and timing every RPC.

    Args:
        requests: Counted by method and status code (``kernelpolicy_grpc_requests``).
        latency: Observes each unary RPC's time, by method
            (``kernelpolicy_grpc_request_duration_seconds``).
    """
    import grpc

    class Interceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
        """Wraps each registered unary handler in a timer; streams are counted when they end.
        Unknown methods have no handler and are not counted (their names are unbounded).
        The server's handlers never change, so each method's wrapper is built once."""

        def __init__(self) -> None:
            self._wrapped: dict[str, Any] = {}

        async def intercept_service(
            self, continuation: Callable[[Any], Awaitable[Any]], details: Any
        ) -> Any:
            method = details.method
            wrapped = self._wrapped.get(method)
            if wrapped is None:
                wrapped = self._wrap(method, await continuation(details))
                if wrapped is not None:
                    self._wrapped[method] = wrapped
            return wrapped

        def _wrap(self, method: str, handler: Any) -> Any:
            if handler is None:
                return None
            if handler.unary_unary is not None:
                timed = _timed_unary(requests, latency, method, handler.unary_unary)
                return grpc.unary_unary_rpc_method_handler(
                    timed,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
            if handler.unary_stream is not None:
                counted = _counted_stream(requests, method, handler.unary_stream)
                return grpc.unary_stream_rpc_method_handler(
                    counted,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
            return handler

    return Interceptor()


def _code_name(context: Any, failed: bool, unset: str = "UNKNOWN") -> str:
    code = context.code()
    if code is None:
        return unset if failed else "OK"
    return str(getattr(code, "name", code))


def _timed_unary(
    requests: Counter,
    latency: Histogram,
    method: str,
    behaviour: Callable[[Any, Any], Awaitable[Any]],
) -> Callable[[Any, Any], Awaitable[Any]]:
    timer = latency.labels(method)

    async def timed(request: Any, context: Any) -> Any:
        start = time.perf_counter()
        failed = True
        try:
            response = await behaviour(request, context)
            failed = False
            return response
        finally:
            timer.observe(time.perf_counter() - start)
            requests.labels(method, _code_name(context, failed)).inc()

    return timed


def _counted_stream(
    requests: Counter, method: str, behaviour: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], Any]:
    if not inspect.isasyncgenfunction(behaviour):  # writes through context.write (health)

        async def counted_writer(request: Any, context: Any) -> None:
            failed = True
            try:
                await behaviour(request, context)
                failed = False
            finally:
                requests.labels(method, _code_name(context, failed, "CANCELLED")).inc()

        return counted_writer

    async def counted(request: Any, context: Any) -> Any:
        failed = True
        try:
            async for item in behaviour(request, context):
                yield item
            failed = False
        finally:
            # A stream that ends without a status was left by its client (Watch, EventStream).
            requests.labels(method, _code_name(context, failed, "CANCELLED")).inc()

    return counted
