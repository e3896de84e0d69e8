"""KERNELPOLICY_SOCKET names the node daemon's unix socket for every side: `serve` binds it
by default, `connect()` and `status` ask it, workers report beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernelpolicy
from kernelpolicy.cli import main
from kernelpolicy.cli.serve_cmd import default_listen
from kernelpolicy.errors import SettingsError
from kernelpolicy.server.daemon import DEFAULT_PORT, default_unix_socket
from kernelpolicy.settings import settings_from
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, None, id="unset-the-user's-own"),
        pytest.param({"KERNELPOLICY_SOCKET": "unix:/run/kp/node.sock"}, "unix:/run/kp/node.sock",
                     id="unix-address"),
        pytest.param({"KERNELPOLICY_SOCKET": "/run/kp/node.sock"}, "unix:/run/kp/node.sock",
                     id="a-path"),
    ],
)  # fmt: skip
def test_serve_listens_on_the_configured_socket(
    environ: dict[str, str], expected: str | None
) -> None:
    """Without --listen: TCP on loopback and the node's socket."""
    listen = default_listen(settings_from(environ))
    assert listen == [f"127.0.0.1:{DEFAULT_PORT}", expected or default_unix_socket()]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("unix:", id="no-path"),
        pytest.param("bogus", id="a-word"),
        pytest.param("unix:run/kp.sock", id="relative"),
    ],
)
def test_a_socket_setting_that_is_no_socket_is_refused(value: str) -> None:
    """An absolute path only: a worker and the daemon started in different directories must
    meet at the same socket."""
    with pytest.raises(SettingsError, match="expected a unix socket, unix:/path or /path"):
        settings_from({"KERNELPOLICY_SOCKET": value})


def test_connect_and_status_ask_the_configured_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon on a socket of its own: connect() with no address and `kernelpolicy status`
    find it through KERNELPOLICY_SOCKET (they asked the default socket before, and found
    nothing)."""
    address = f"unix:{tmp_path / 'node.sock'}"
    with running_daemon(fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False):
        monkeypatch.setenv("KERNELPOLICY_SOCKET", address)
        with kernelpolicy.connect() as client:
            assert client.address == address
            assert client.resolve().decision("sampler.greedy").impl == "torch"
        assert main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.dumps(report).count("node.sock") >= 1
