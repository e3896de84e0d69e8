"""Listen addresses are split one way (kernelpolicy/server/addresses.py) for --listen, --http,
the loopback check and a gRPC peer."""

from __future__ import annotations

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.addresses import HostPort, split_address, with_port
from kernelpolicy.server.daemon import check_listen_address, is_loopback
from kernelpolicy.server.http import parse_http_address

SPLITS = {
    "ipv4": ("127.0.0.1:50151", HostPort("127.0.0.1", "50151"), 50151),
    "ipv6 in brackets": ("[::1]:0", HostPort("::1", "0"), 0),
    "a name": ("node-7.example:80", HostPort("node-7.example", "80"), 80),
    "a bare port": ("8080", HostPort(None, "8080"), 8080),
    "no host": (":8080", HostPort("", "8080"), 8080),
    "no port": ("host:", HostPort("host", ""), None),
    "a port of words": ("host:http", HostPort("host", "http"), None),
    "a superscript digit": ("host:\u00b2", HostPort("host", "\u00b2"), None),
}


@pytest.mark.parametrize(("address", "split", "number"), SPLITS.values(), ids=list(SPLITS))
def test_split_address(address: str, split: HostPort, number: int | None) -> None:
    assert split_address(address) == split
    assert split_address(address).number == number


@pytest.mark.parametrize(
    ("address", "port", "expected"),
    [("127.0.0.1:0", 50151, "127.0.0.1:50151"), ("[::1]:0", 7, "[::1]:7")],
    ids=["ipv4", "ipv6"],
)
def test_with_port(address: str, port: int, expected: str) -> None:
    assert with_port(address, port) == expected


HTTP = {
    "a bare port is loopback": ("9090", ("127.0.0.1", 9090)),
    "an empty host is loopback": (":9090", ("127.0.0.1", 9090)),
    "ipv6": ("[::1]:9090", ("::1", 9090)),
    "every interface": ("0.0.0.0:9090", ("0.0.0.0", 9090)),
}


@pytest.mark.parametrize(("address", "expected"), HTTP.values(), ids=list(HTTP))
def test_http_addresses(address: str, expected: tuple[str, int]) -> None:
    assert parse_http_address(address) == expected


@pytest.mark.parametrize(
    "address", ["host:99999", "host:x", "host:\u00b2", ""], ids=["range", "words", "sup", "empty"]
)
def test_bad_http_addresses_name_the_forms(address: str) -> None:
    with pytest.raises(DaemonError, match="expected PORT, HOST:PORT or \\[IPV6\\]:PORT"):
        parse_http_address(address)


LISTEN = {
    "no host": (":50151", "expected HOST:PORT"),
    "a bare port": ("50151", "expected HOST:PORT"),
    "a superscript port": ("h:\u00b2", "expected HOST:PORT"),
    "out of range": ("h:65536", "port 65536 is out of range"),
    "no socket path": ("unix:", "no socket path"),
}


@pytest.mark.parametrize(("address", "message"), LISTEN.values(), ids=list(LISTEN))
def test_bad_listen_addresses(address: str, message: str) -> None:
    with pytest.raises(DaemonError, match=message):
        check_listen_address(address)


@pytest.mark.parametrize(
    ("address", "loopback"),
    [("127.0.0.1:1", True), ("[::1]:1", True), ("unix:/run/x.sock", True), ("10.0.0.7:1", False)],
    ids=["ipv4", "ipv6", "unix", "remote"],
)
def test_is_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback
