"""The one error boundary of every RPC: requests checked against the limits, failures mapped.

Every handler the daemon registers goes through :func:`guard` (unary) or :func:`guard_stream`
(server streaming), and every request through :func:`decoder` and :func:`check_request`, so:

- an undecodable message, a NaN in a context, a platform_json nested too deep, a feature list or
  context over its limit, each become ``INVALID_ARGUMENT`` with a short message naming the field
  and the limit (``kernelpolicy.limits``); grpc itself answers ``RESOURCE_EXHAUSTED`` for a
  message over ``MAX_REQUEST_BYTES``;
- a :class:`~kernelpolicy.errors.KernelPolicyError` from a handler becomes ``INVALID_ARGUMENT``
  (or the code a :class:`~kernelpolicy.errors.DaemonError` carries);
- anything else is logged with its traceback and answered ``INTERNAL`` with no Python detail,
  so no client ever sees ``UNKNOWN`` or a class name.

Server streams (Watch, EventStream, health Watch, reflection) also hold a slot of
``server.streams.StreamSlots`` for as long as they run: past a cap they are refused
``RESOURCE_EXHAUSTED``.

Rejected requests are logged (``kernelpolicy.request.rejected``, warning level), through the
daemon's throttled log (``server.ratelog``): a client cannot fill the log.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import grpc
from google.protobuf import struct_pb2

from kernelpolicy.errors import DaemonError, KernelPolicyError
from kernelpolicy.limits import (
    MAX_CONTEXT_DEPTH,
    MAX_CONTEXT_ENTRIES,
    MAX_ENV_VALUE_CHARS,
    MAX_FLAG_KEY_CHARS,
    MAX_REQUEST_ENV_ENTRIES,
    MAX_REQUEST_FEATURES,
    SHOWN_ERROR_CHARS,
    shown,
)
from kernelpolicy.server.streams import StreamSlots

Emit = Callable[..., None]
"""``emit(level, event, **fields)``: where the boundary logs (the daemon's logger)."""

Unary = Callable[[Any, grpc.aio.ServicerContext], Coroutine[Any, Any, Any]]
Streaming = Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]


class Undecodable:
    """Stands in for a request whose bytes are not a valid message of the method's type."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def decoder(message_class: Any) -> Callable[[bytes], Any]:
    """A request deserializer that never raises: bad bytes become :class:`Undecodable`.

    grpc answers a deserializer's exception with a bare status and logs nothing useful; the
    handler's guard answers INVALID_ARGUMENT instead.
    """
    parse = message_class.FromString
    name = message_class.DESCRIPTOR.full_name

    def decode(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception:  # DecodeError, or upb's recursion limit
            return Undecodable(name)

    return decode


def rejected(message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> DaemonError:
    """The error a check raises: ``message`` answered with ``code``."""
    return DaemonError(message, code)


def _unique(values: Any, field: str) -> list[str]:
    unique = list(dict.fromkeys(values))
    if len(unique) > MAX_REQUEST_FEATURES:
        raise rejected(
            f"{field}: {len(unique)} distinct names, over MAX_REQUEST_FEATURES "
            f"({MAX_REQUEST_FEATURES})"
        )
    return unique


def check_struct(struct: struct_pb2.Struct, field: str = "context") -> None:
    """Entries, depth and numbers of a request's context, walked without recursion.

    Raises:
        DaemonError: INVALID_ARGUMENT naming MAX_CONTEXT_ENTRIES, MAX_CONTEXT_DEPTH or the
            non-finite number.
    """
    entries = 0
    stack: list[tuple[Any, int, str]] = [(struct, 1, field)]
    while stack:
        item, depth, where = stack.pop()
        if depth > MAX_CONTEXT_DEPTH:
            raise rejected(f"{field}: nested deeper than MAX_CONTEXT_DEPTH ({MAX_CONTEXT_DEPTH})")
        if isinstance(item, struct_pb2.Struct):
            children = [(v, f"{where}.{shown(k, 40)}") for k, v in item.fields.items()]
        elif isinstance(item, struct_pb2.ListValue):
            children = [(v, f"{where}[{i}]") for i, v in enumerate(item.values)]
        else:
            kind = item.WhichOneof("kind")
            if kind == "number_value" and not math.isfinite(item.number_value):
                raise rejected(f"{where}: {item.number_value} is not a finite number")
            if kind == "struct_value":
                stack.append((item.struct_value, depth + 1, where))
            elif kind == "list_value":
                stack.append((item.list_value, depth + 1, where))
            continue
        entries += len(children)
        if entries > MAX_CONTEXT_ENTRIES:
            raise rejected(
                f"{field}: more than MAX_CONTEXT_ENTRIES ({MAX_CONTEXT_ENTRIES}) entries"
            )
        stack.extend((value, depth, path) for value, path in children)


def _check_env(env: Any) -> None:
    if len(env) > MAX_REQUEST_ENV_ENTRIES:
        raise rejected(
            f"env: {len(env)} variables, over MAX_REQUEST_ENV_ENTRIES ({MAX_REQUEST_ENV_ENTRIES})"
        )
    for name, value in env.items():
        if len(value) > MAX_ENV_VALUE_CHARS or len(name) > MAX_ENV_VALUE_CHARS:
            raise rejected(
                f"env: {shown(name, 40)}: {len(value)} characters, over MAX_ENV_VALUE_CHARS "
                f"({MAX_ENV_VALUE_CHARS})"
            )


def check_request(request: Any) -> None:
    """Check (and normalise) the fields every request type shares, before any handler runs.

    Feature and gate lists are deduplicated in place (first occurrence kept) and then capped.

    Raises:
        DaemonError: INVALID_ARGUMENT naming the field and the limit.
    """
    fields = request.DESCRIPTOR.fields_by_name
    for name in ("features", "gates"):
        if name in fields:
            values = getattr(request, name)
            if len(values) > 1:
                unique = _unique(values, name)
                if len(unique) != len(values):
                    del values[:]
                    values.extend(unique)
    if "context" in fields and request.HasField("context"):
        check_struct(request.context)
    if "env" in fields and request.env:
        _check_env(request.env)
    if "flag_key" in fields and len(request.flag_key) > MAX_FLAG_KEY_CHARS:
        raise rejected(
            f"flag_key: {len(request.flag_key)} characters, over MAX_FLAG_KEY_CHARS "
            f"({MAX_FLAG_KEY_CHARS})"
        )


def _safe(message: str) -> str:
    """A message cut short enough to send and log, with no line breaks beyond the first few."""
    return shown(message, SHOWN_ERROR_CHARS)


_CLIENT_MISTAKES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED})


class Boundary:
    """Maps every failure of a handler to a status; one instance per daemon (it logs).

    Args:
        emit: Where to log.
        streams: The server streams' caps (default: ``MAX_WATCH_STREAMS`` and
            ``MAX_WATCH_STREAMS_PER_PEER``).
    """

    def __init__(self, emit: Emit, streams: StreamSlots | None = None) -> None:
        self.emit = emit
        self.streams = StreamSlots() if streams is None else streams

    async def _reject(
        self, context: grpc.aio.ServicerContext, method: str, code: grpc.StatusCode, detail: str
    ) -> None:
        detail = _safe(detail)
        if code in _CLIENT_MISTAKES:  # NOT_FOUND and the like are ordinary answers
            self.emit("warning", "kernelpolicy.request.rejected", method=method, code=code.name,
                      detail=detail)  # fmt: skip
        await context.abort(code, detail)

    async def _fail(
        self, context: grpc.aio.ServicerContext, method: str, exc: BaseException
    ) -> None:
        if isinstance(exc, DaemonError) and isinstance(exc.code, grpc.StatusCode):
            await self._reject(context, method, exc.code, str(exc))
        if isinstance(exc, KernelPolicyError):
            await self._reject(context, method, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        self.emit(
            "error", "kernelpolicy.request.failed", method=method,
            error=_safe(f"{type(exc).__name__}: {exc}"),
            traceback="".join(traceback.format_exception(exc))[-4000:],
        )  # fmt: skip
        await context.abort(grpc.StatusCode.INTERNAL, "internal error; the daemon logged it")

    async def _admit(self, context: grpc.aio.ServicerContext, method: str, request: Any) -> None:
        if isinstance(request, Undecodable):
            await self._reject(
                context, method, grpc.StatusCode.INVALID_ARGUMENT,
                f"the request is not a valid {request.type_name} message",
            )  # fmt: skip
        check_request(request)

    def guard(self, method: str, handler: Unary) -> Unary:
        """``handler`` with its request checked and every failure mapped to a status."""

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                await self._admit(context, method, request)
                return await handler(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # the one boundary: everything is mapped
                await self._fail(context, method, exc)

        return guarded

    @contextlib.asynccontextmanager
    async def _streaming(
        self, context: grpc.aio.ServicerContext, method: str, request: Any = None
    ) -> AsyncIterator[None]:
        """Around a server stream: ``request`` admitted first (a bidirectional stream's are
        admitted as they come: None), a stream slot held while it runs, every failure mapped."""
        try:
            if request is not None:
                await self._admit(context, method, request)
            with self.streams.slot(context.peer()):
                yield
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # the one boundary: everything is mapped
            await self._fail(context, method, exc)

    def guard_stream(self, method: str, handler: Streaming) -> Any:
        """The same for a server-streaming handler (Watch, EventStream), an async generator or
        a coroutine that writes through ``context.write`` (grpc_health's Watch)."""
        if not inspect.isasyncgenfunction(handler):
            writer: Any = handler

            async def guarded_writer(request: Any, context: grpc.aio.ServicerContext) -> None:
                async with self._streaming(context, method, request):
                    await writer(request, context)

            return guarded_writer

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with self._streaming(context, method, request):
                async for item in handler(request, context):
                    yield item

        return guarded

    def guard_bidi(self, method: str, handler: Callable[..., AsyncIterator[Any]]) -> Any:
        """The same for a bidirectional stream (server reflection): each request checked as it
        comes, an undecodable one ending the call ``INVALID_ARGUMENT``."""

        async def guarded(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async def admitted() -> AsyncIterator[Any]:
                async for request in requests:
                    await self._admit(context, method, request)
                    yield request

            async with self._streaming(context, method):
                async for item in handler(admitted(), context):
                    yield item

        return guarded
