"""Operating the daemon: TLS, status, keep-alive events, NOT_SERVING on shutdown."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kernelpolicy.cli import main
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server.daemon import TlsFiles, is_loopback
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, make_certificate


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50151", True), ("localhost:1", True), ("[::1]:50151", True),
        ("unix:/tmp/x.sock", True), ("0.0.0.0:50151", False), ("10.1.2.3:50151", False),
        ("[::]:50151", False),
    ],
)  # fmt: skip
def test_loopback_detection(address: str, loopback: bool) -> None:
    """Only loopback and unix sockets count as staying on this machine."""
    assert is_loopback(address) is loopback


def test_tls(tmp_path: Path) -> None:
    """With a certificate, TCP listeners speak TLS: a TLS client is served, plaintext is not."""
    from kernelpolicy.server.client import connect

    cert, key = make_certificate(tmp_path)
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], watch=False, tls=TlsFiles.load(cert, key)
    ) as running:
        credentials = grpc.ssl_channel_credentials(cert.read_bytes())
        with connect(running.daemon.bound[0], credentials=credentials) as client:
            assert client.resolve().decision("topk_per_row").impl == "torch"
        with (
            connect(running.daemon.bound[0], timeout=2) as plain,
            pytest.raises(grpc.RpcError) as info,
        ):
            plain.stub.ListFeatures(pb.ListFeaturesRequest(), timeout=2)
        assert info.value.code() in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def test_status_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """status: exit 0 when serving; exit 1 and the error after a failed reload."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    with running_daemon(fixture("cpu"), [policies], watch=False) as running:
        assert main(["status", "--address", running.daemon.bound[0]]) == 0
        assert "SERVING, revision 1" in capsys.readouterr().out
        (policies / "99-bad.toml").write_text("schema = 1\n")
        running.call(running.daemon.reload("test"))
        assert main(["status", "--address", running.daemon.bound[0]]) == 1
        out = capsys.readouterr().out
        assert "last reload FAILED (serving the last good policies)" in out
        assert "99-bad.toml" in out


@pytest.mark.parametrize(
    ("argv", "hinted"),
    [
        pytest.param(["--address", "127.0.0.1:1"], False, id="tcp-refused"),
        pytest.param(["--address", "unix:/nonexistent/kp.sock"], True, id="no-socket"),
        pytest.param(["--address", "unix:/nonexistent/kp.sock", "--clear-halt", "mhc"], True,
                     id="no-report-socket"),
    ],
)  # fmt: skip
def test_status_without_a_daemon(
    argv: list[str], hinted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """No daemon at the address: one clear error, exit 2; where no socket exists, it says how
    to start one."""
    assert main(["status", *argv]) == 2
    err = capsys.readouterr().err
    assert "no daemon answered" in err
    assert ("start one with 'kernelpolicy serve'" in err) is hinted
    assert "name one with --address" not in err  # it was named


def test_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """EventStream sends keep_alive when nothing changes."""
    from kernelpolicy.server import services

    monkeypatch.setattr(services, "KEEP_ALIVE_SECONDS", 0.2)
    with (
        running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as channel,
    ):
        stream = f2_grpc.ServiceStub(channel).EventStream(f2.EventStreamRequest())
        assert [next(stream).type for _ in range(3)] == [
            "provider_ready",
            "keep_alive",
            "keep_alive",
        ]
        stream.cancel()


def test_not_serving_while_shutting_down() -> None:
    """Health watchers see NOT_SERVING when the daemon stops."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        channel = grpc.insecure_channel(running.daemon.bound[0])
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        running.daemon.stop()
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        channel.close()
