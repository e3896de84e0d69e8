"""A refused connection is said at once, as refused (review: status --address 127.0.0.1:1
waited the 2 s connect timeout, then asked whether the daemon ran without TLS, its message
ending in nested parentheses)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.client import connect
from tests.helpers import ROOT


@pytest.fixture
def closed() -> str:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    return f"127.0.0.1:{port}"


def _refused(address: str) -> str:
    return (
        f"{address}: not answering: connection refused, nothing listens on {address}; is "
        "kernelpolicy serve running, and on this address?"
    )


def test_connect_says_refused_before_its_timeout(closed: str) -> None:
    """A refused port ends the wait for the connect timeout, saying so (after the timeout
    the message would be 'no connection within 30 s')."""
    with connect(closed, connect_timeout=30) as client, pytest.raises(DaemonError) as caught:
        client.resolve()
    assert str(caught.value) == _refused(closed)


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        pytest.param([], "stderr", id="text"),
        pytest.param(["--json"], "json", id="json"),
    ],
)
def test_status_says_refused_in_one_line(closed: str, options: list[str], shown: str) -> None:
    """kernelpolicy status --address HOST:PORT where nothing listens: exit 2, the refusal in
    one line that ends in words, not in parentheses of parentheses."""
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "status", "--address", closed, *options],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    said = (
        json.loads(out.stdout)["error"]
        if shown == "json"
        else out.stderr.removeprefix("kernelpolicy: error: ").removesuffix("\n")
    )
    assert said == f"no daemon answered ({_refused(closed)})"
    assert "\n" not in said
    assert not said.endswith("))")
