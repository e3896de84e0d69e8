"""A real ``kernelpolicy serve`` under a low descriptor limit, and a flood of idle TCP clients.

Shared by tests/test_server_flood.py (a few hundred connections) and
benchmarks/bench_flood.py (the issue's 5,000 against a limit of 1,024).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
HALF_HEADER = b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Pad: "
WITH_FILE_LIMIT = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'kernelpolicy', *sys.argv[2:]])\n"
)
"""Sets the descriptor limit, then becomes ``kernelpolicy ARGS``: the same as a preexec_fn,
without running Python in a forked child of a threaded test process."""


@dataclass
class Served:
    """A daemon process: its pid, unix socket address and HTTP URL."""

    process: subprocess.Popen[str]
    unix: str
    url: str
    stopped: bool = False  # whether SIGTERM stopped it (within 30 s) once the flood was over

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    def rss_kib(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            line = next(x for x in status if x.startswith("VmRSS:"))
        return int(line.split()[1])

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


@contextmanager
def serve_with_file_limit(workdir: Path, limit: int) -> Iterator[Served]:
    """``kernelpolicy serve`` with HTTP on loopback and a unix socket, its descriptor limit
    (soft and hard) set to ``limit`` before it starts."""

    port_file = workdir / "port"
    unix = f"unix:{workdir / 'kp.sock'}"
    served: Served | None = None
    errors = (workdir / "stderr").open("w")
    env = {**os.environ, "KERNELPOLICY_LOG_FORMAT": "off"}
    process = subprocess.Popen(
        [sys.executable, "-c", WITH_FILE_LIMIT, str(limit), "serve", "--quiet", "--no-watch",
         "--platform", str(H100), "--listen", unix, "--http", "127.0.0.1:0",
         "--port-file", str(port_file)],
        env=env, stdout=subprocess.DEVNULL, stderr=errors, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
        while not (port_file.exists() and port_file.read_text().count("\n") >= 2):
            assert process.poll() is None, (workdir / "stderr").read_text()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        served = Served(process, unix, port_file.read_text().split()[-1])
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)  # a bound on a hang, not a speed check
            if served is not None:
                served.stopped = process.returncode == 0
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        errors.close()


@dataclass
class Flood:
    """Client sockets of a flood; ``open`` counts those the server has not closed."""

    sockets: list[socket.socket]

    def settle(self, wait: float) -> tuple[int, int]:
        """Send half a request header on each socket once it connects; wait up to ``wait``
        seconds for every one to connect or fail. Returns (connected, still open)."""
        pending = {s.fileno(): s for s in self.sockets}
        connected = 0
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            poller = select.poll()
            for fd in pending:
                poller.register(fd, select.POLLOUT)
            for fd, _ in poller.poll(100):
                sock = pending.pop(fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connected += 1
                    with suppress(OSError):
                        sock.send(HALF_HEADER)
        return connected, self.open()

    def open(self) -> int:
        """Sockets the server has not closed (nothing to read, no error)."""
        count = 0
        for sock in self.sockets:
            try:
                count += sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
            except BlockingIOError:
                count += 1
            except OSError:
                pass
        return count

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def flood(port: int, count: int, sources: Sequence[str]) -> Flood:
    """Open ``count`` TCP connections to 127.0.0.1:``port`` without waiting, from the loopback
    source addresses ``sources`` in turn (together one peer to the daemon: all of 127.0.0.0/8
    is, kernelpolicy/server/peers.py)."""
    sockets = []
    for index in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((sources[index % len(sources)], 0))
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return Flood(sockets)


def healthz(url: str, timeout: float = 10.0) -> int:
    """The status of GET /healthz on a new connection from 127.0.0.1: the flood's own peer
    (all of loopback is one): at the per-peer cap it replaces the flood's least recently active
    connection, as any new client of a flooding peer does."""
    import http.client

    parts = urlsplit(url)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(
        parts.hostname, parts.port, timeout=timeout, source_address=("127.0.0.1", 0)
    )
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    finally:
        connection.close()


def resolve_over_unix(address: str) -> str | None:
    """The daemon's choice for sampler.greedy through ``kernelpolicy.connect``."""
    import kernelpolicy

    with kernelpolicy.connect(address, connect_timeout=10) as client:
        return client.resolve().decision("sampler.greedy").impl


def metric(url: str, name: str) -> float:
    """One sample of /metrics (the first line starting with ``name``)."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    line = next(x for x in text.splitlines() if x.startswith(name))
    return float(line.rsplit(" ", 1)[1])
