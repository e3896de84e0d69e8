"""Listen addresses, parsed one way: ``HOST:PORT``, ``[V6]:PORT`` (and a bare ``PORT`` where
an option allows it) split at the last colon, the brackets of an IPv6 host removed."""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_PORT_CHARS

MAX_PORT = 65535


class HostPort(NamedTuple):
    """An address split: ``host`` None when there is no ``HOST:`` part; ``port`` as written."""

    host: str | None
    port: str

    @property
    def number(self) -> int | None:
        """The port as a number (callers check the range), or None: not ASCII digits, or more
        of them than a number int() reads (5,000 digits are over its limit: a ValueError)."""
        digits = self.port.isascii() and self.port.isdigit() and len(self.port) <= MAX_PORT_CHARS
        return int(self.port) if digits else None


def split_address(address: str) -> HostPort:
    """``HOST:PORT`` -> (``HOST``, ``PORT``); ``[::1]:0`` -> (``::1``, ``0``); ``PORT`` ->
    (None, ``PORT``)."""
    host, sep, port = address.rpartition(":")
    return HostPort(host.strip("[]") if sep else None, port)


def with_port(address: str, port: int) -> str:
    """``address`` with its port replaced (the host as written, brackets kept)."""
    return f"{address.rpartition(':')[0]}:{port}"


URL_PROBLEM = "a URL: give HOST:PORT, without a scheme or path"


def address_problem(address: str, *, low: int = 1, bare_port: bool = False) -> str | None:
    """Why ``address`` is no ``HOST:PORT`` (``[V6]:PORT``) with a port from ``low`` to 65535,
    or None: the one check of a TCP address (:func:`check_address`, ``--http``).

    Args:
        address: The address as given.
        low: The lowest port allowed (0 where the system may pick one).
        bare_port: ``PORT`` and ``:PORT`` (no host) are allowed too.
    """
    split = split_address(address)
    if not split.host and not bare_port:
        return "no HOST:PORT"
    problem = host_problem(split.host) if split.host else None
    if problem is None and "/" in split.port:  # http://host: the scheme's slashes end the port
        problem = URL_PROBLEM
    if problem is None and not (split.number is not None and low <= split.number <= MAX_PORT):
        problem = f"port {split.port[:20]!r} is not a number from {low} to {MAX_PORT}"
    return problem


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be a host name or address, or None: a URL's scheme or path, or
    dotted numbers that are no IPv4 address (``999.1.1.1``)."""
    if "/" in host or "://" in host:
        return URL_PROBLEM
    if host.replace(".", "").isdigit() and not _is_ip(host):
        return f"{host!r} is not an IPv4 address"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_address(address: str, what: str = "daemon address", *, listening: bool = False) -> str:
    """``address`` if it is ``unix:/path`` or ``HOST:PORT`` (``[V6]:PORT``) with a port from 1
    to 65535 (from 0 when ``listening``: the system picks one). The one check of ``--listen``,
    ``connect()``, ``status --address`` and ``diff --daemons``.

    Raises:
        DaemonError: It is neither, naming ``what`` and what was expected (a bare path gets
            ``unix:`` suggested), before anything binds or waits on a connection.
    """
    low, example = (0, "[::1]:0") if listening else (1, "[::1]:50151")
    expected = f"expected HOST:PORT (127.0.0.1:50151, {example}) or unix:/path"
    if address.startswith("unix:"):
        if not address.removeprefix("unix:").strip("/"):
            raise DaemonError(f"{what} {address!r}: no socket path; expected unix:/path")
        return address
    if address.startswith("/"):
        raise DaemonError(f"{what} {address[:100]!r}: a path; did you mean unix:{address[:100]}?")
    problem = address_problem(address, low=low)
    if problem is not None:
        raise DaemonError(f"{what} {address[:100]!r}: {problem}; {expected}")
    return address
