"""status and diff --daemons reach a TCP daemon that speaks TLS (--tls-ca), one that requires
client certificates (--tls-cert/--tls-key), and refuse TLS options that cannot apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.server.tls import TlsFiles
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, make_certificate

pytestmark = pytest.mark.xdist_group("tls-clients")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The daemon's pair and a client's pair (self-signed: each is its own CA)."""
    directory = tmp_path_factory.mktemp("pki")
    server_cert, server_key = make_certificate(directory, "-server")
    client_cert, client_key = make_certificate(directory, "-client")
    garbage = directory / "garbage.pem"
    garbage.write_text("not a certificate\n")
    return {
        "server_cert": server_cert, "server_key": server_key,
        "client_cert": client_cert, "client_key": client_key, "garbage": garbage,
    }  # fmt: skip


def _options(pki: dict[str, Path], *names: str) -> list[str]:
    """``--tls-ca server_cert`` etc. for each ``option=key`` of ``names``."""
    words: list[str] = []
    for name in names:
        option, key = name.split("=")
        words += [f"--tls-{option}", str(pki[key])]
    return words


STATUS_CASES = [
    pytest.param(False, ["ca=server_cert"], 0, "SERVING, revision 1", id="tls-with-ca"),
    pytest.param(False, [], 2, "--tls-ca FILE", id="tls-daemon-asked-plainly"),
    pytest.param(False, ["ca=client_cert"], 2, "signed by the CA given (--tls-ca)",
                 id="unknown-ca"),
    pytest.param(True, ["ca=server_cert", "cert=client_cert", "key=client_key"], 0,
                 "SERVING, revision 1", id="mtls-with-client-pair"),
    pytest.param(True, ["ca=server_cert"], 2, "require a client certificate (--tls-cert/--tls-key)",
                 id="mtls-without-client-pair"),
]  # fmt: skip


@pytest.mark.parametrize(("mutual", "names", "code", "shown"), STATUS_CASES)
def test_status_over_tls(
    pki: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    mutual: bool,
    names: list[str],
    code: int,
    shown: str,
) -> None:
    tls = TlsFiles.load(
        pki["server_cert"], pki["server_key"], pki["client_cert"] if mutual else None
    )
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False, tls=tls) as running:
        address = running.daemon.bound[0]
        assert main(["status", "--address", address, *_options(pki, *names)]) == code
    captured = capsys.readouterr()
    assert shown in (captured.out if code == 0 else captured.err)
    assert "Traceback" not in captured.err


def test_status_json_over_tls(pki: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tls = TlsFiles.load(pki["server_cert"], pki["server_key"])
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False, tls=tls) as running:
        address = running.daemon.bound[0]
        args = [
            "status",
            "--address",
            address,
            "--json",
            "--tls-ca",
            str(pki["server_cert"]),
        ]
        assert main(args) == 0
        report = json.loads(capsys.readouterr().out)
    assert report["serving"] is True
    assert report["address"] == address


def test_diff_reads_tls_daemons(pki: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Each TLS daemon's snapshot is read with the client pair; the node is counted."""
    tls = TlsFiles.load(pki["server_cert"], pki["server_key"], pki["client_cert"])
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False, tls=tls) as running:
        address = running.daemon.bound[0]
        args = [
            "diff", "--against", str(ROOT / "policies"), "--daemons", address, "--json",
            *_options(pki, "ca=server_cert", "cert=client_cert", "key=client_key"),
        ]  # fmt: skip
        assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["nodes"] == 1
    assert result["unreachable_daemons"] == []


REFUSED = [
    pytest.param(["status", "--address", "unix:/tmp/none.sock", "--tls-ca", "{server_cert}"],
                 "--tls-ca with unix:/tmp/none.sock: a unix socket speaks no TLS",
                 id="unix-status"),
    pytest.param(["status", "--tls-ca", "{server_cert}"], "a unix socket speaks no TLS",
                 id="default-socket"),
    pytest.param(["status", "--address", "127.0.0.1:9", "--tls-cert", "{client_cert}"],
                 "--tls-cert needs --tls-key: a client certificate goes with its key",
                 id="cert-without-key"),
    pytest.param(["status", "--address", "127.0.0.1:9", "--tls-key", "{client_key}"],
                 "--tls-key needs --tls-cert", id="key-without-cert"),
    pytest.param(["status", "--address", "127.0.0.1:9", "--tls-ca", "{garbage}"],
                 "--tls-ca: {garbage}: not a PEM file (no -----BEGIN ...----- block); expected "
                 "CERTIFICATE blocks", id="ca-not-pem"),
    pytest.param(["status", "--address", "127.0.0.1:9", "--tls-ca", "{server_cert}",
                  "--tls-cert", "{client_cert}", "--tls-key", "{client_cert}"],
                 "--tls-key: {client_cert}: holds CERTIFICATE; expected a PRIVATE KEY block",
                 id="certificate-as-key"),
    pytest.param(["status", "--address", "127.0.0.1:9", "--tls-ca", "/nonexistent/ca.pem"],
                 "--tls-ca: /nonexistent/ca.pem", id="missing-ca"),
    pytest.param(["diff", "--against", "policies", "--tls-ca", "{server_cert}"],
                 "--tls-ca, --tls-cert and --tls-key say how to reach --daemons; give --daemons "
                 "too", id="diff-without-daemons"),
    pytest.param(["diff", "--against", "policies", "--daemons", "unix:/tmp/none.sock",
                  "--tls-ca", "{server_cert}"], "a unix socket speaks no TLS", id="diff-unix"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), REFUSED)
def test_tls_options_refused(
    pki: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    """One line naming the option and what it needs; exit 2; nothing dialled in vain."""
    monkeypatch.chdir(ROOT)
    names = {key: str(path) for key, path in pki.items()}
    assert main([word.format(**names) for word in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelpolicy: error: ")
    assert message.format(**names) in err
    assert err.count("\n") == 1


def test_explain_asks_a_tls_daemon(
    pki: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """explain --address with --tls-ca: the daemon's decisions, as its own explain shows them."""
    tls = TlsFiles.load(pki["server_cert"], pki["server_key"])
    env = {"KERNELPOLICY_FORCE_MHC": "torch"}
    with running_daemon(fixture("h100-sxm"), [ROOT / "policies"], env, watch=False,
                        tls=tls) as running:  # fmt: skip
        address = running.daemon.bound[0]
        args = ["explain", "--address", address, "--tls-ca", str(pki["server_cert"])]
        assert main([*args, "mhc"]) == 0
    out = capsys.readouterr().out
    assert "force: KERNELPOLICY_FORCE_MHC=torch in the daemon's environment" in out
