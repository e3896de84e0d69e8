"""Listen addresses are split one way (kernelpolicy/server/addresses.py) for --listen, --http,
the loopback check and a gRPC peer."""

from __future__ import annotations

import re

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.addresses import HostPort, check_address, split_address, with_port
from kernelpolicy.server.daemon import is_loopback
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
    "leading zeros": ("host:00080", HostPort("host", "00080"), 80),
    "5,000 digits": ("host:" + "1" * 5000, HostPort("host", "1" * 5000), None),
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


HTTP_EXPECTED = "expected PORT, HOST:PORT or [IPV6]:PORT with a port from 0 to 65535"
URL = "a URL: give HOST:PORT, without a scheme or path"
BAD_HTTP = {
    "a url": ("http://127.0.0.1:9464", URL),
    "a url without a port": ("http://node-7", URL),
    "a path after the port": ("node-7:9464/metrics", URL),
    "no IPv4 address": ("999.1.1.1:9464", "'999.1.1.1' is not an IPv4 address"),
    "too few numbers": ("10.1.1:9464", "'10.1.1' is not an IPv4 address"),
    "port out of range": ("host:99999", "port '99999' is not a number from 0 to 65535"),
    "a port of words": ("host:http", "port 'http' is not a number from 0 to 65535"),
    "no port": ("host:", "port '' is not a number from 0 to 65535"),
}


@pytest.mark.parametrize(("address", "problem"), BAD_HTTP.values(), ids=list(BAD_HTTP))
def test_a_bad_http_address_names_what_is_wrong(address: str, problem: str) -> None:
    """--http is checked as every address is (a URL and dotted numbers that are no IPv4
    address included), and says what was expected and what was wrong."""
    with pytest.raises(DaemonError) as info:
        parse_http_address(address)
    assert str(info.value) == f"--http {address!r}: {HTTP_EXPECTED}; {problem}"


def test_a_port_of_5000_digits_is_a_bad_port_not_a_value_error() -> None:
    """Over int()'s 4,300-digit limit, a port was a ValueError naming no option."""
    with pytest.raises(DaemonError, match=r"--http .*; port '9{20}' is not a number from 0"):
        parse_http_address("host:" + "9" * 5000)


SAME_PROBLEM = {
    "a url": "http://127.0.0.1:5000",
    "a url without a port": "http://node-7",
    "no IPv4 address": "999.1.1.1:5000",
    "port out of range": "127.0.0.1:70000",
}


@pytest.mark.parametrize("address", SAME_PROBLEM.values(), ids=list(SAME_PROBLEM))
def test_http_and_listen_addresses_are_checked_one_way(address: str) -> None:
    """--http and --listen find the same problem in the same address."""
    with pytest.raises(DaemonError) as listen:
        check_address(address, "--listen", listening=True)
    with pytest.raises(DaemonError) as http:
        parse_http_address(address)
    problem = str(listen.value).split(": ", 1)[1].rsplit("; expected", 1)[0]
    assert str(http.value).endswith(f"; {problem}")


LISTEN = {
    "no host": (":50151", "expected HOST:PORT"),
    "a bare port": ("50151", "expected HOST:PORT"),
    "a superscript port": ("h:\u00b2", "expected HOST:PORT"),
    "out of range": ("h:65536", "port '65536' is not a number from 0 to 65535"),
    "a path without unix:": ("/run/kp.sock", "did you mean unix:/run/kp.sock?"),
    "no socket path": ("unix:", "no socket path"),
}


@pytest.mark.parametrize(("address", "message"), LISTEN.values(), ids=list(LISTEN))
def test_bad_listen_addresses(address: str, message: str) -> None:
    with pytest.raises(DaemonError, match=message):
        check_address(address, "--listen", listening=True)


@pytest.mark.parametrize(
    ("address", "loopback"),
    [("127.0.0.1:1", True), ("[::1]:1", True), ("unix:/run/x.sock", True), ("10.0.0.7:1", False)],
    ids=["ipv4", "ipv6", "unix", "remote"],
)
def test_is_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


DIALED = {
    "a unix socket": ("unix:/run/kp/kp.sock", None),
    "ipv4": ("127.0.0.1:50151", None),
    "ipv6": ("[::1]:50151", None),
    "a name": ("node-7.example:50151", None),
    "the last port": ("10.0.0.1:65535", None),
    "a word": ("bogus", "no HOST:PORT"),
    "a url": ("http://127.0.0.1:50151", "a URL: give HOST:PORT"),
    "a path without unix:": ("/run/kp/kp.sock", "did you mean unix:/run/kp/kp.sock?"),
    "unix: and nothing": ("unix:", "no socket path"),
    "port out of range": ("127.0.0.1:99999", "port '99999' is not a number from 1 to 65535"),
    "port 0": ("127.0.0.1:0", "port '0' is not a number from 1 to 65535"),
    "no IPv4 address": ("999.1.1.1:5000", "'999.1.1.1' is not an IPv4 address"),
}


@pytest.mark.parametrize(("address", "problem"), DIALED.values(), ids=list(DIALED))
def test_a_daemon_address_is_checked_before_dialling(address: str, problem: str | None) -> None:
    """connect(), status --address and diff --daemons name a mistyped address at once, instead
    of waiting for a connection that cannot come and then asking about TLS."""
    if problem is None:
        assert check_address(address) == address
    else:
        with pytest.raises(DaemonError, match=re.escape(problem)):
            check_address(address)


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        pytest.param("http://127.0.0.1:5", "a URL: give HOST:PORT", id="a-url"),
        pytest.param("999.1.1.1:5000", "'999.1.1.1' is not an IPv4 address", id="no-ipv4"),
    ],
)
def test_a_listen_address_that_is_no_host_is_refused(address: str, problem: str) -> None:
    """Refused before the beyond-loopback warning and the bind's 'in use or not valid'."""
    with pytest.raises(DaemonError, match=re.escape(problem)):
        check_address(address, "--listen", listening=True)
