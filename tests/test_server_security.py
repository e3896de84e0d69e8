"""Local trust: the socket's directory and owner, peer checks against a second user, TLS files."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_TLS_FILE_BYTES
from kernelpolicy.server.client import connect
from kernelpolicy.server.sockets import prepare_socket, runtime_dir
from kernelpolicy.server.tls import TlsFiles
from kernelpolicy.testing.daemon import running_daemon
from kernelpolicy.trust import owner_mode_problem
from tests.helpers import ROOT, fixture, make_certificate

OTHER = 65534  # nobody: the second local user
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory both users can write (mode 1777, like /tmp)."""
    directory = Path(tempfile.mkdtemp(prefix="kp-shared-"))
    directory.chmod(0o1777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def rogue_listener(path: Path) -> Iterator[int]:
    """A process running as uid 65534 listening on the unix socket ``path``."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the other user, listen, wait to be told to stop
        try:
            os.setgid(OTHER)
            os.setuid(OTHER)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(16)
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1", "the rogue listener did not start"
    try:
        yield pid
    finally:
        os.write(stop_w, b"1")
        os.waitpid(pid, 0)
        for fd in (ready_r, stop_r, stop_w):
            os.close(fd)


@needs_root
def test_client_refuses_a_daemon_run_by_another_user(capsys: pytest.CaptureFixture[str]) -> None:
    """connect() and status refuse a unix-socket listener run by uid 65534, saying why."""
    with shared_dir() as directory, rogue_listener(directory / "kp.sock"):
        address = f"unix:{directory / 'kp.sock'}"
        with pytest.raises(DaemonError, match="runs as uid 65534, neither root nor uid 0"):
            connect(address)
        assert main(["status", "--address", address]) == 2
        assert "another user may be impersonating kernelpolicy" in capsys.readouterr().err
        assert main(["status", "--json", "--address", address]) == 2
        report = json.loads(capsys.readouterr().out)
        assert report["serving"] is False
        assert "runs as uid 65534" in report["error"]


def _serve(address: str, default: bool = False) -> DaemonError:
    with pytest.raises(DaemonError) as info:  # noqa: SIM117 - the daemon must not start
        with running_daemon(
            fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False,
            default_socket=address if default else None,
        ):  # fmt: skip
            pass
    return info.value


@needs_root
@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param("foreign-socket", "is a socket owned by uid 65534", id="foreign-socket"),
        pytest.param("foreign-file", "is a regular file (owner uid 65534)", id="foreign-file"),
        pytest.param("own-file", "is a regular file (owner uid 0), not a socket", id="own-file"),
        pytest.param("directory", "is a directory", id="directory"),
    ],
)
def test_serve_refuses_a_path_it_does_not_own(make: str, message: str) -> None:
    """Serve refuses another user's socket or any non-socket there, and deletes nothing."""
    with shared_dir() as directory:
        path = directory / "kp.sock"
        if make == "foreign-socket":
            with rogue_listener(path):
                pass  # it exits; its socket file stays, owned by uid 65534
        elif make == "directory":
            path.mkdir()
        else:
            path.write_text("not a socket")
            if make == "foreign-file":
                os.chown(path, OTHER, OTHER)
        directory.chmod(0o755)  # closed to others now: a directory they may write is refused first
        before = path.lstat()
        error = _serve(f"unix:{path}")
        assert message in str(error)
        assert "\n" not in str(error)
        assert path.lstat().st_ino == before.st_ino  # still there, untouched


def test_serve_refuses_a_socket_in_a_directory_others_may_write(tmp_path: Path) -> None:
    """A group/world-writable directory without the sticky bit: anyone could swap the socket."""
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    error = _serve(f"unix:{directory / 'kp.sock'}")
    assert "may be written by another user" in str(error)


@pytest.mark.parametrize(
    ("mode", "sticky_refused"),
    [
        pytest.param(0o700, False, id="0700"),
        pytest.param(0o755, False, id="0755"),
        pytest.param(0o770, False, id="group-writable"),
        pytest.param(0o1777, True, id="sticky-but-ours"),
    ],
)
def test_socket_directory_follows_the_trust_rule(
    tmp_path: Path, mode: int, sticky_refused: bool
) -> None:
    """A socket's directory is refused where kernelpolicy.trust refuses a directory, and also
    where trust lets a root-owned sticky one pass: others may take the names beside the socket
    there (the halts file, tests/test_halts_unpublished.py)."""
    directory = tmp_path / "sockets"
    directory.mkdir()
    directory.chmod(mode)
    address = f"unix:{directory / 'kp.sock'}"
    if owner_mode_problem(directory.stat()) is None and not sticky_refused:
        assert prepare_socket(address, default=False) == directory / "kp.sock"
    else:
        with pytest.raises(DaemonError, match="may be written by another user"):
            prepare_socket(address, default=False)


def test_a_second_daemon_on_a_live_socket_is_refused(tmp_path: Path) -> None:
    """A socket someone answers on is in use: refused, not stolen."""
    address = f"unix:{tmp_path / 'kp.sock'}"
    with running_daemon(fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False):
        assert "a daemon already answers" in str(_serve(address))


def test_own_stale_socket_is_replaced(tmp_path: Path) -> None:
    """Our own socket with nobody behind it (a killed daemon) is removed and rebound."""
    path = tmp_path / "kp.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    with (
        running_daemon(fixture("cpu"), [ROOT / "policies"], listen=[f"unix:{path}"], watch=False),
        connect(f"unix:{path}") as client,
    ):
        assert client.resolve().decision("topk_per_row").impl == "torch"


def test_default_socket_directory_is_private() -> None:
    """The default socket's directory is created 0700 and the socket 0600."""
    with shared_dir() as runtime:
        path = runtime / "kernelpolicy" / "kernelpolicy.sock"
        address = f"unix:{path}"
        with running_daemon(
            fixture("cpu"), [ROOT / "policies"], listen=[address], watch=False,
            default_socket=address,
        ):  # fmt: skip
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_socket_path_too_long_is_one_clear_error() -> None:
    """A path over what sun_path holds is named as such, not as an address in use."""
    error = _serve(f"unix:/tmp/{'x' * 120}.sock")
    assert "over the 107 a unix socket path may have" in str(error)


@needs_root
def test_default_socket_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """Someone else's directory at the default place: refused, with the owner named."""
    directory = tmp_path / "kernelpolicy"
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER, OTHER)
    error = _serve(f"unix:{directory / 'kernelpolicy.sock'}", default=True)
    assert "owned by uid 65534" in str(error)


@pytest.mark.parametrize(
    ("uid", "xdg", "expected"),
    [
        pytest.param(0, "/run/user/0", "/run/kernelpolicy", id="root"),
        pytest.param(None, "/run/user/1000", "/run/user/1000/kernelpolicy", id="xdg"),
        pytest.param(None, None, "/tmp/kernelpolicy-{uid}", id="no-xdg"),
    ],
)
def test_runtime_dir(
    monkeypatch: pytest.MonkeyPatch, uid: int | None, xdg: str | None, expected: str
) -> None:
    """Where the default socket lives, never a predictable file in a world-writable dir."""
    me = 1000 if uid is None else uid
    monkeypatch.setattr(os, "geteuid", lambda: me)
    if xdg is None:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    else:
        monkeypatch.setenv("XDG_RUNTIME_DIR", xdg)
    assert str(runtime_dir()) == expected.format(uid=me)


# TLS settings: validated before anything is bound.


TLS_CASES = [
    pytest.param({"CLIENT_CA": "cert"}, "KERNELPOLICY_TLS_CLIENT_CA_FILE needs "
                 "KERNELPOLICY_TLS_CERT_FILE and KERNELPOLICY_TLS_KEY_FILE", id="ca-without-cert"),
    pytest.param({"CERT": "cert"}, "KERNELPOLICY_TLS_KEY_FILE is not set", id="cert-only"),
    pytest.param({"CERT": "cert", "KEY": "missing"}, "KERNELPOLICY_TLS_KEY_FILE: {missing}: no "
                 "such file", id="missing-key"),
    pytest.param({"CERT": "missing", "KEY": "key"}, "KERNELPOLICY_TLS_CERT_FILE: {missing}: no "
                 "such file", id="missing-cert"),
    pytest.param({"CERT": "garbage", "KEY": "key"}, "{garbage}: not a PEM file", id="garbage"),
    pytest.param({"CERT": "badbody", "KEY": "key"}, "CERTIFICATE block is not valid base64 DER",
                 id="bad-base64"),
    pytest.param({"CERT": "cert", "KEY": "cert"}, "KERNELPOLICY_TLS_KEY_FILE: {cert}: holds "
                 "CERTIFICATE; expected a PRIVATE KEY block", id="cert-as-key"),
    pytest.param({"CERT": "cert", "KEY": "other_key"}, "grpc refused the certificate and key",
                 id="mismatched-key"),
    pytest.param({"CERT": "dir", "KEY": "key"}, "not a regular file", id="directory"),
    pytest.param({"CERT": "big", "KEY": "key"}, "over MAX_TLS_FILE_BYTES", id="over-size-limit"),
    pytest.param({"CERT": "cert", "KEY": "key", "CLIENT_CA": "unreadable"},
                 "KERNELPOLICY_TLS_CLIENT_CA_FILE: {unreadable}", id="unreadable-ca"),
]  # fmt: skip


@pytest.mark.parametrize(("settings", "message"), TLS_CASES)
def test_tls_settings_are_validated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, str],
    message: str,
) -> None:
    """Each bad TLS setting: exit 2, one line naming the setting and file, never 'in use'."""
    cert, key = make_certificate(tmp_path)
    _, other_key = make_certificate(tmp_path, "2")
    files = {
        "cert": cert, "key": key, "other_key": other_key, "missing": tmp_path / "nope.pem",
        "garbage": tmp_path / "garbage.pem", "badbody": tmp_path / "badbody.pem",
        "dir": tmp_path, "big": tmp_path / "big.pem", "unreadable": tmp_path / "fifo",
    }  # fmt: skip
    files["garbage"].write_bytes(b"\x00\x01 not a certificate")
    files["badbody"].write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    files["big"].write_bytes(cert.read_bytes() + b"\n" * MAX_TLS_FILE_BYTES)
    os.mkfifo(files["unreadable"])
    for name, which in settings.items():
        monkeypatch.setenv(f"KERNELPOLICY_TLS_{name}_FILE", str(files[which]))
    code = main(["serve", "--quiet", "--no-watch", "--listen", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 2
    assert message.format(**{k: str(v) for k, v in files.items()}) in err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert "in use" not in err


def test_tls_file_at_the_size_limit_is_accepted(tmp_path: Path) -> None:
    """A PEM file of exactly MAX_TLS_FILE_BYTES loads (padding after the block is allowed)."""
    cert, key = make_certificate(tmp_path)
    cert.write_bytes(cert.read_bytes().ljust(MAX_TLS_FILE_BYTES, b"\n"))
    assert cert.stat().st_size == MAX_TLS_FILE_BYTES
    files = TlsFiles.load(cert, key)
    files.check_pair()
    assert files.client_ca is None
