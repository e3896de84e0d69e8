"""Why serve cannot listen, told apart (review: every bind failure was "the address is in use
(another kernelpolicy serve?) or not valid here", a socket directory this user may not write
included)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy.server.bind_failure import IN_USE, why_not_bound
from kernelpolicy.server.sockets import prepare_socket
from tests.helpers import ROOT, said_as_user

CPU = str(ROOT / "kernelpolicy/fixtures/platforms/cpu.json")
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")


@pytest.fixture
def root_dir() -> Iterator[Path]:
    """A root-owned 0755 directory under /tmp (pytest's own are 0700: nobody cannot enter)."""
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def taken() -> Iterator[str]:
    """A loopback address a plain listening socket holds."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield f"127.0.0.1:{holder.getsockname()[1]}"


def _serve(address: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "HOME", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "serve", "--quiet", "--no-watch", "--platform",
         CPU, "--listen", address],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("address", "said"),
    [
        pytest.param(lambda taken: taken, IN_USE, id="in-use"),
        pytest.param(lambda _: "192.0.2.1:0",
                     "192.0.2.1 is no address of this machine; listen on one of its own "
                     "(127.0.0.1, or 0.0.0.0 for all of them)", id="not-this-machines-address"),
        pytest.param(lambda _: "kp-no-such-host.invalid:0",
                     "the host kp-no-such-host.invalid is not known here", id="unknown-host"),
    ],
)  # fmt: skip
def test_serve_says_why_it_cannot_listen(
    taken: str, address: Callable[[str], str], said: str
) -> None:
    """A real serve: exit 2, nothing on stdout, the last line names the address and the cause
    (an address beyond this machine is warned of first, as always)."""
    where = address(taken)
    out = _serve(where)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    last = out.stderr.splitlines()[-1]
    assert last.startswith(f"kernelpolicy: error: cannot listen on {where}: {said}"), last
    assert "or not valid here" not in out.stderr
    assert "Traceback" not in out.stderr


def _asked(address: str) -> str:
    """What the daemon run by this user checks and then says after gRPC's bind failed."""
    prepare_socket(address, default=False) if address.startswith("unix:") else None
    return why_not_bound(address)


@needs_root
@pytest.mark.parametrize(
    ("address", "said"),
    [
        pytest.param(
            lambda d: f"unix:{d}/fresh.sock",
            "permission denied: uid 65534, who runs this daemon, may not create the socket in "
            "{d} (owner uid 0, mode 0755); run serve as a user who may write there, or listen "
            "in a directory this user owns (the default is $XDG_RUNTIME_DIR/kernelpolicy/, "
            "/run/kernelpolicy/ for root)",
            id="socket-directory-not-writable",
        ),
        pytest.param(
            lambda _: "127.0.0.1:80",
            "permission denied: port 80 is below {first} (/proc/sys/net/ipv4/"
            "ip_unprivileged_port_start), which only root or a process with "
            "CAP_NET_BIND_SERVICE may bind; pick a port from {first} up with --listen",
            id="privileged-port",
        ),
    ],
)
def test_another_user_is_told_permission_denied(
    root_dir: Path, address: Callable[[Path], str], said: str
) -> None:
    """Run as nobody (the socket's directory passes the daemon's own checks: root's, 0755),
    the cause is permission, naming the directory or port and the way out; nothing is left."""
    first = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if first <= 80 and "80" in address(root_dir):
        pytest.skip("every port is unprivileged here")
    where = address(root_dir)
    "localhost".encode("idna")  # getaddrinfo's codec, imported here: nobody cannot read /root
    assert said_as_user(NOBODY, lambda: _asked(where)) == said.format(d=root_dir, first=first)
    assert os.listdir(root_dir) == []


def test_a_free_address_is_left_as_found(root_dir: Path) -> None:
    """Where a plain socket binds (gRPC alone knew why it could not), the old words stay and
    the probe's socket file is removed."""
    said = why_not_bound(f"unix:{root_dir}/kp.sock")
    assert "or not valid here" in said
    assert os.listdir(root_dir) == []
