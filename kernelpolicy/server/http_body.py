"""Reading an HTTP request's body within the listener's limits, or refusing it unread.

A body is read as sent, never decompressed: a ``Content-Encoding`` other than ``identity`` is
refused (415) before a byte of it is read, and so is a ``Content-Length`` over
``MAX_HTTP_BODY_BYTES`` (413); what is read must arrive within ``MAX_HTTP_BODY_SECONDS``. A
client that asks ``Expect: 100-continue`` is told to send only a body the daemon will read: for
one it would refuse, the refusal is its final answer (RFC 9110 section 10.1.1), so the body is
never sent.
"""

from __future__ import annotations

import asyncio

from aiohttp import HttpVersion11, web

from kernelpolicy.limits import MAX_HTTP_BODY_BYTES, shown

ACCEPTED_CONTENT_CODINGS = ("identity",)
"""The request ``Content-Encoding`` values read: none but the body as sent (OFREP bodies are a
few hundred bytes of JSON; nothing is gained by compressing them)."""


class HungUp(Exception):
    """The client closed the connection before its request was read."""


class BodyTimeout(Exception):
    """The body did not arrive within MAX_HTTP_BODY_SECONDS."""


class BadBody(Exception):
    """The body cannot be read as sent: an OFREP ``PARSE_ERROR`` with ``status`` (415 for a
    refused ``Content-Encoding``, 413 for a body over the limit that was not asked for, 400 for
    a body that does not match its framing); its connection is closed after the answer."""

    def __init__(self, status: int, details: str) -> None:
        super().__init__(details)
        self.status = status
        self.details = details


def refused_coding(request: web.Request) -> str | None:
    """The request's ``Content-Encoding`` when it names a coding not accepted, else ``None``."""
    values = request.headers.getall("Content-Encoding", [])
    codings = [c.strip().lower() for value in values for c in value.split(",") if c.strip()]
    if all(coding in ACCEPTED_CONTENT_CODINGS for coding in codings):
        return None
    return ", ".join(values)


def _too_large(request: web.Request) -> bool:
    return (request.content_length or 0) > MAX_HTTP_BODY_BYTES


async def read_body(request: web.Request, seconds: float) -> bytes:
    """The request body, read within ``seconds`` (``MAX_HTTP_BODY_SECONDS``).

    Raises:
        BadBody: A ``Content-Encoding`` other than identity, or a ``Content-Length`` over
            ``MAX_HTTP_BODY_BYTES`` whose body was not asked for (both before anything is
            read), or a body that does not match its framing.
        web.HTTPRequestEntityTooLarge: Its ``Content-Length`` is over ``MAX_HTTP_BODY_BYTES``
            (before anything is read), or what came is.
        HungUp: The client went away in the middle of it.
        BodyTimeout: It did not all arrive in time.
    """
    coding = refused_coding(request)
    if coding is not None:
        accepted = ", ".join(ACCEPTED_CONTENT_CODINGS)
        raise BadBody(
            415,
            f"Content-Encoding {shown(coding)!r} is not accepted: send the JSON body as it is "
            f"(Content-Encoding: {accepted}, or none)",
        )
    if _too_large(request):
        if not continued(request):  # the body will never come: say so and close
            raise BadBody(
                413,
                f"request body over MAX_HTTP_BODY_BYTES ({MAX_HTTP_BODY_BYTES}): Content-Length "
                f"{request.content_length}, and the body was not asked for (Expect: 100-continue)",
            )
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_HTTP_BODY_BYTES, actual_size=request.content_length or 0
        )
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout from None
    except ConnectionError:
        raise HungUp from None
    except web.RequestPayloadError as exc:  # aiohttp's parser: bad chunked framing and the like
        raise BadBody(400, f"the request body does not match its headers ({exc})") from None


def continued(request: web.Request) -> bool:
    """Whether the client sends its body: it did not ask ``Expect: 100-continue``, or it did and
    was told to go on (a body refused unread was not asked for, and never comes)."""
    return "Expect" not in request.headers or (
        refused_coding(request) is None and not _too_large(request)
    )


async def expect_continue(request: web.Request) -> None:
    """``Expect: 100-continue``: "100 Continue" only for a body :func:`read_body` will read;
    for one it refuses unread, nothing, so that the handler's refusal is the final answer and
    the client never sends the body. Another expectation is 417, as aiohttp answers it."""
    expect = request.headers.get("Expect", "")
    if request.version != HttpVersion11:
        return
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {shown(expect)}")
    if continued(request):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own bytes are yet to come
