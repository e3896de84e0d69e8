"""Listen addresses, parsed one way: ``HOST:PORT``, ``[V6]:PORT`` (and a bare ``PORT`` where
an option allows it) split at the last colon, the brackets of an IPv6 host removed."""

from __future__ import annotations

from typing import NamedTuple

MAX_PORT = 65535


class HostPort(NamedTuple):
    """An address split: ``host`` None when there is no ``HOST:`` part; ``port`` as written."""

    host: str | None
    port: str

    @property
    def number(self) -> int | None:
        """The port as a number (any size: callers check the range), or None: not digits."""
        return int(self.port) if self.port.isascii() and self.port.isdigit() else None


def split_address(address: str) -> HostPort:
    """``HOST:PORT`` -> (``HOST``, ``PORT``); ``[::1]:0`` -> (``::1``, ``0``); ``PORT`` ->
    (None, ``PORT``)."""
    host, sep, port = address.rpartition(":")
    return HostPort(host.strip("[]") if sep else None, port)


def with_port(address: str, port: int) -> str:
    """``address`` with its port replaced (the host as written, brackets kept)."""
    return f"{address.rpartition(':')[0]}:{port}"
