"""Plain HTTP/1.1 against a daemon's HTTP listener, with full control of what is sent."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    url: str,
    method: str,
    path: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
    *,
    context: ssl.SSLContext | None = None,
) -> Reply:
    """One request on a new connection; the reply whatever its status."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10, context=context)
        if parts.scheme == "https"
        else http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    )
    try:
        data = body.encode() if isinstance(body, str) else body
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                     response.read())  # fmt: skip
    finally:
        connection.close()


def post(url: str, path: str, document: Any = None, **headers: str) -> Reply:
    body = b"" if document is None else json.dumps(document).encode()
    return call(url, "POST", path, body, {"Content-Type": "application/json", **headers})


def raw(url: str, request: bytes) -> bytes:
    """Send bytes as they are; return the whole reply (the server closes after it)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and b"Connection: close" not in request:
                break
    return b"".join(chunks)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def metric_line(url: str, name: str) -> str:
    """The sample line of the unlabelled metric ``name`` in ``url``'s /metrics."""
    text = call(url, "GET", "/metrics").body.decode()
    return next(line for line in text.splitlines() if line.startswith(f"{name} "))
