"""serve and status from a newcomer's side: bad addresses, quiet, no gRPC noise, fast failures."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import DaemonError
from kernelpolicy.server.client import connect
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, wait_until

H100 = str(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")


def _env() -> dict[str, str]:
    import os

    keep = ("PYTHON", "HOME", "VIRTUAL_ENV", "LANG")
    return {"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k.startswith(keep)}}


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--no-watch", "--platform", H100, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip


def _wait_for_port_file(proc: subprocess.Popen[str], port_file: Path) -> None:
    """Until serve has written its address to ``port_file``; fails if it exits first or has
    not within 60 s (a bound on a hang, not a speed check)."""

    def written() -> bool:
        if proc.poll() is not None:
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"serve exited {proc.returncode}, no port file: {err}")
        return port_file.exists() and port_file.read_text().strip() != ""

    wait_until(written, f"serve wrote no address to {port_file} within 60 s", seconds=60)


@pytest.mark.parametrize(
    ("address", "message"),
    [
        pytest.param(
            "127.0.0.1:99999", "port '99999' is not a number from 0 to 65535", id="port-range"
        ),
        pytest.param(
            "127.0.0.1:65536", "port '65536' is not a number from 0 to 65535", id="port-one-over"
        ),
        pytest.param("nonsense", "expected HOST:PORT", id="no-port"),
        pytest.param("127.0.0.1:http", "expected HOST:PORT", id="named-port"),
        pytest.param("unix:", "no socket path", id="empty-socket"),
    ],
)
def test_bad_listen_addresses_are_errors(
    capsys: pytest.CaptureFixture[str], address: str, message: str
) -> None:
    """An address grpc would bind somewhere surprising (a random port) is refused, exit 2."""
    assert main(["serve", "--quiet", "--no-watch", "--listen", address]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        pytest.param(
            "KERNELPOLICY_FORCE_SAMPLER_GREEDDY=torch",
            "KERNELPOLICY_FORCE_SAMPLER_GREEDDY names no feature of the policies",
            id="mistyped-force",
        ),
        pytest.param(
            'KERNELPOLICY_OVERRIDES={"no.such": "torch"}', "no.such", id="override-of-nothing"
        ),
    ],
)
def test_serve_refuses_a_force_that_names_nothing(setting: str, message: str) -> None:
    """A force or override naming no feature stops serve before it listens, as it stops
    explain: the operator would otherwise believe a kernel is forced."""
    proc = _serve("--quiet", "--listen", "127.0.0.1:0", "--env", setting)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2
    assert message in err
    assert err.count("\n") == 1


def test_port_65535_is_accepted() -> None:
    """The last valid port is a port, not an error (it may still be taken: then 'in use')."""
    from kernelpolicy.server.addresses import check_address

    assert check_address("127.0.0.1:65535", "--listen", listening=True) == "127.0.0.1:65535"


def test_port_in_use_is_one_line_without_grpc_noise() -> None:
    """gRPC's own C-core lines (E1122 ... add_port.cc) never precede the one-line error."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    address = f"127.0.0.1:{taken.getsockname()[1]}"
    try:
        proc = _serve("--quiet", "--listen", address)
        out, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 2
    assert err == (
        f"kernelpolicy: error: cannot listen on {address}: the address is in use (another "
        "kernelpolicy serve?); pick another with --listen\n"
    )
    assert out == ""


def test_quiet_prints_no_start_or_stop_lines(tmp_path: Path) -> None:
    """serve --quiet: nothing on stdout or stderr from start to a clean stop."""
    port_file = tmp_path / "port"
    proc = _serve("--quiet", "--listen", "127.0.0.1:0", "--port-file", str(port_file))
    try:
        _wait_for_port_file(proc, port_file)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (0, "", "")


def test_listening_beyond_loopback_warns_at_warning_level() -> None:
    """The 'reachable beyond this machine WITHOUT TLS' line is a warning, not info."""
    log = io.StringIO()
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], listen=["0.0.0.0:0"], watch=False,
        log_format="json", log_stream=log,
    ):  # fmt: skip
        pass
    (line,) = [json.loads(x) for x in log.getvalue().splitlines() if "WITHOUT TLS" in x]
    assert line["level"] == "warning"
    assert "reachable beyond this machine" in line["message"]


def test_connect_to_nothing_fails_fast_and_says_so() -> None:
    """connect() to a port that accepts and never speaks gRPC: 'not answering' after the
    connect timeout, not after the whole request timeout (a refused port is said at once:
    tests/test_client_connect_errors.py)."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        address = f"127.0.0.1:{mute.getsockname()[1]}"
        with connect(address, connect_timeout=0.5) as client:
            with pytest.raises(DaemonError, match=rf"{address}: not answering \(no connection"):
                client.resolve()
            assert client.timeout == 10.0  # the request timeout was not what ended it
        plain = "this client speaks plain gRPC; a daemon with TLS"  # and what such a daemon needs
        with (
            connect(address, connect_timeout=0.2) as client,
            pytest.raises(DaemonError, match=plain),
        ):
            client.resolve()


def test_connect_to_a_missing_socket_says_so(tmp_path: Path) -> None:
    """A unix socket that does not exist: 'not answering (no such socket)' at once."""
    with pytest.raises(DaemonError, match="not answering \\(no such socket\\)"):
        connect(f"unix:{tmp_path / 'none.sock'}")


def test_status_json_without_a_daemon(capsys: pytest.CaptureFixture[str]) -> None:
    """status --json with nothing there: a JSON object with the error on stdout, exit 2."""
    assert main(["status", "--json", "--address", "127.0.0.1:1"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["serving"] is False
    assert "127.0.0.1:1: not answering" in report["error"]


def test_status_json_with_a_daemon(capsys: pytest.CaptureFixture[str]) -> None:
    """status --json with a daemon: its report, exit 0."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        assert main(["status", "--json", "--address", running.daemon.bound[0]]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["serving"], report["revision"], report["policy_error"]) == (True, 1, None)


def test_status_help_states_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """The help says what each exit code means, as the command does it."""
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "0 serving, the last reload succeeded and no decision counted is an error" in help_text
    assert (
        "1 not serving, the last reload failed (the last good policies keep serving), or a "
        "decision is an error for every model or for --model-kind (default mha), as explain "
        "--address counts them"
    ) in help_text
    assert "2 no daemon answered" in help_text


def test_serve_probes_the_libraries_its_policies_name(tmp_path: Path) -> None:
    """serve probes what its policies read, as explain does: a candidate that needs an
    installed library outside the default kernel stack (pydantic here) is chosen by both."""
    policy = tmp_path / "p.toml"
    policy.write_text(
        'schema = "kernelpolicy.policy/v1"\n[features."x.y"]\ndescription = "d"\n'
        'fallback = "plain"\n[[features."x.y".candidates]]\nimpl = "fancy"\n'
        'entry = "json:loads"\nlibraries = { pydantic = "*" }\n'
        '[[features."x.y".candidates]]\nimpl = "plain"\nentry = "json:dumps"\n'
    )
    explain = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "explain", "--policies", str(policy)],
        capture_output=True, text=True, env=_env(), check=False, timeout=60,
    )  # fmt: skip
    assert "x.y      fancy" in explain.stdout
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--no-watch", "--policies", str(policy),
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    stuck = threading.Timer(60, proc.kill)  # fewer than 4 lines and still running: fail, not hang
    stuck.start()
    try:
        assert proc.stdout is not None
        table = "".join(proc.stdout.readline() for _ in range(4))
    finally:
        stuck.cancel()
        proc.terminate()
        proc.communicate(timeout=30)
    assert "x.y      fancy" in table


def _taken() -> socket.socket:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    return taken


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(["--http", "notaport"], "--http 'notaport': expected PORT", id="http-no-port"),
        pytest.param(["--http", "127.0.0.1:99999"], "with a port from 0 to 65535",
                     id="http-port-range"),
        pytest.param(["--http", "http://127.0.0.1:9464"],
                     "--http 'http://127.0.0.1:9464': expected PORT, HOST:PORT or [IPV6]:PORT "
                     "with a port from 0 to 65535; a URL: give HOST:PORT", id="http-url"),
        pytest.param(["--http", "999.1.1.1:9464"],
                     "with a port from 0 to 65535; '999.1.1.1' is not an IPv4 address",
                     id="http-no-ipv4"),
        pytest.param(["--labels-dir", "/nonexistent/features.d"], "not a directory",
                     id="labels-dir-missing"),
        pytest.param(["--port-file", "/nonexistent/kp.port"], "no directory /nonexistent",
                     id="port-file-directory-missing"),
        pytest.param(["--listen", "TAKEN"], "the address is in use", id="grpc-address-in-use"),
        pytest.param(["--http", "TAKEN"], "in use", id="http-address-in-use"),
    ],
)  # fmt: skip
def test_exit_2_prints_nothing_on_stdout(options: list[str], message: str) -> None:
    """Without --quiet, an option that cannot work is exit 2 with one line on stderr and
    nothing on stdout: the explain table is printed only once every address is bound."""
    taken = _taken()
    address = f"127.0.0.1:{taken.getsockname()[1]}"
    argv = [address if o == "TAKEN" else o for o in options]
    if "--listen" not in argv:
        argv += ["--listen", "127.0.0.1:0"]
    try:
        proc = _serve(*argv)
        out, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert (proc.returncode, out) == (2, ""), err
    assert message in err
    assert err.count("\n") == 1, err


def test_a_second_serve_on_the_same_address_prints_nothing_on_stdout(tmp_path: Path) -> None:
    """A second serve on the address a running one holds: exit 2, one line, empty stdout."""
    port_file = tmp_path / "port"
    first = _serve("--quiet", "--listen", "127.0.0.1:0", "--port-file", str(port_file))
    try:
        _wait_for_port_file(first, port_file)
        address = port_file.read_text().split()[0]
        second = _serve("--listen", address)
        out, err = second.communicate(timeout=60)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
    assert (second.returncode, out) == (2, "")
    assert err == (
        f"kernelpolicy: error: cannot listen on {address}: the address is in use (another "
        "kernelpolicy serve?); pick another with --listen\n"
    )


def test_a_relative_socket_is_named_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--listen unix:kp.sock binds there and names it absolute (what --port-file and status
    show), so a client in another directory can use it."""
    monkeypatch.chdir(tmp_path)
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], listen=["unix:kp.sock"], watch=False
    ) as running:
        assert running.daemon.bound == [f"unix:{tmp_path / 'kp.sock'}"]
        monkeypatch.chdir("/")
        with connect(running.daemon.bound[0]) as client:
            assert client.resolve().decision("sampler.greedy").impl == "torch"
