"""The gRPC interceptor (kernelpolicy/server/grpc_metrics.py), driven directly: each RPC counted
by method and status code, unary ones timed, unknown methods left out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from kernelpolicy.server.grpc_metrics import grpc_interceptor
from kernelpolicy.server.metrics import DaemonMetrics
from kernelpolicy.server.state import ServingState
from tests.helpers import ROOT, fixture

METHOD = "/kernelpolicy.v1.KernelPolicy/Resolve"


class Context:
    """A servicer context whose status a behaviour may set (as abort does)."""

    def __init__(self) -> None:
        self.status: grpc.StatusCode | None = None

    def code(self) -> grpc.StatusCode | None:
        return self.status


class Details:
    def __init__(self, method: str) -> None:
        self.method = method


@pytest.fixture(scope="module")
def state() -> ServingState:
    return ServingState(fixture("cpu"), {}, [ROOT / "policies"], {})


def _count(metrics: DaemonMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def _unary_ok(request: Any, context: Context) -> str:
    return "answer"


async def _unary_fails(request: Any, context: Context) -> str:
    raise RuntimeError("a bug")


async def _unary_aborts(request: Any, context: Context) -> str:
    context.status = grpc.StatusCode.NOT_FOUND
    raise RuntimeError("aborted")


async def _stream_ends(request: Any, context: Context) -> AsyncIterator[str]:
    yield "one"


async def _stream_left(request: Any, context: Context) -> AsyncIterator[str]:
    yield "one"
    yield "never read"


async def _writer(request: Any, context: Context) -> None:
    return None


async def _call(handler: Any, left: bool) -> None:
    """One RPC through the wrapped handler (a stream's client leaves after one item)."""
    context = Context()
    if handler.unary_unary is not None:
        with contextlib.suppress(RuntimeError):  # the behaviour's own failure
            await handler.unary_unary("request", context)
        return
    result = handler.unary_stream("request", context)
    if not hasattr(result, "__aiter__"):
        await result
        return
    async for _ in result:
        if left:
            break
    await result.aclose()


def _handler(behaviour: Callable[..., Any]) -> Any:
    if behaviour in (_stream_ends, _stream_left, _writer):
        return grpc.unary_stream_rpc_method_handler(behaviour)
    return grpc.unary_unary_rpc_method_handler(behaviour)


@pytest.mark.parametrize(
    ("behaviour", "left", "code", "timed"),
    [
        pytest.param(_unary_ok, False, "OK", True, id="unary-ok"),
        pytest.param(_unary_fails, False, "UNKNOWN", True, id="unary-raises"),
        pytest.param(_unary_aborts, False, "NOT_FOUND", True, id="unary-aborted"),
        pytest.param(_stream_ends, False, "OK", False, id="stream-ends"),
        pytest.param(_stream_left, True, "CANCELLED", False, id="stream-left-by-its-client"),
        pytest.param(_writer, False, "OK", False, id="stream-written-through-the-context"),
    ],
)
def test_each_rpc_is_counted_by_method_and_code(
    state: ServingState,
    behaviour: Callable[..., Awaitable[Any]],
    left: bool,
    code: str,
    timed: bool,
) -> None:
    """A unary RPC is counted and timed, a stream counted when it ends (CANCELLED when its
    client left it without a status)."""
    metrics = DaemonMetrics(state)
    interceptor = grpc_interceptor(metrics.grpc_requests, metrics.grpc_latency)

    async def continuation(details: Any) -> Any:
        return _handler(behaviour)

    async def run() -> None:
        handler = await interceptor.intercept_service(continuation, Details(METHOD))
        await _call(handler, left)

    asyncio.run(run())
    assert _count(metrics, "kernelpolicy_grpc_requests_total", method=METHOD, code=code) == 1.0
    observed = _count(metrics, "kernelpolicy_grpc_request_duration_seconds_count", method=METHOD)
    assert observed == (1.0 if timed else 0.0)


def test_unknown_methods_are_not_counted_and_wrappers_are_built_once(
    state: ServingState,
) -> None:
    """A method without a handler (its name is whatever the client sent) is left alone; a
    registered one is wrapped once and counted on every call."""
    metrics = DaemonMetrics(state)
    interceptor = grpc_interceptor(metrics.grpc_requests, metrics.grpc_latency)
    asked: list[str] = []

    async def continuation(details: Any) -> Any:
        asked.append(details.method)
        return None if details.method == "/nope" else _handler(_unary_ok)

    async def run() -> None:
        assert await interceptor.intercept_service(continuation, Details("/nope")) is None
        for _ in range(2):
            await _call(await interceptor.intercept_service(continuation, Details(METHOD)), False)

    asyncio.run(run())
    assert asked == ["/nope", METHOD]
    assert _count(metrics, "kernelpolicy_grpc_requests_total", method=METHOD, code="OK") == 2.0
    assert _count(metrics, "kernelpolicy_grpc_requests_total", method="/nope", code="OK") == 0.0


def test_the_daemon_metrics_give_this_interceptor(state: ServingState) -> None:
    """DaemonMetrics.interceptor() (what the gRPC servers are given) is this module's."""
    interceptor = DaemonMetrics(state).interceptor()
    assert type(interceptor).__module__ == "kernelpolicy.server.grpc_metrics"
