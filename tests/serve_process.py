"""A real ``kernelpolicy serve`` process on a unix socket in a short temporary directory, with
``--http`` on loopback and a fixed platform snapshot: what the fleet tests start."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT, wait_until


@dataclass(frozen=True)
class Served:
    """The process, its gRPC address (``unix:...``) and its HTTP URL."""

    process: subprocess.Popen[bytes]
    address: str
    url: str


def serve_env() -> dict[str, str]:
    """What a test's ``kernelpolicy`` process gets of this one's environment: the interpreter's
    and the locale's, with JSON logs and no pack cache."""
    keep = ("PYTHON", "HOME", "VIRTUAL_ENV", "LANG", "PATH")
    return {k: v for k, v in os.environ.items() if k.startswith(keep)} | {
        "KERNELPOLICY_LOG_FORMAT": "json", "KERNELPOLICY_PACK_CACHE": "0",
    }  # fmt: skip


@contextmanager
def serve(
    home: Path, platform: Path, policies: list[Path], extra_args: Sequence[str] = ()
) -> Iterator[Served]:
    """``kernelpolicy serve --platform PLATFORM [EXTRA_ARGS]`` with its socket, port file and
    log in ``home`` (keep it short: a unix socket's path holds at most 107 bytes)."""
    home.mkdir(parents=True, exist_ok=True)
    port = home / "port"
    flags = [arg for path in policies for arg in ("--policies", str(path))]
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--listen", f"unix:{home}/kp.sock",
         "--http", "127.0.0.1:0", "--port-file", str(port), "--platform", str(platform),
         "--no-watch", *flags, *extra_args],
        stdout=subprocess.DEVNULL, stderr=(home / "log").open("w"), env=serve_env(), cwd=ROOT,
    )  # fmt: skip

    def started() -> bool:
        assert process.poll() is None, (home / "log").read_text()
        return port.exists() and len(port.read_text().split()) == 2

    try:
        wait_until(started, "serve did not start", seconds=60)
        address, url = port.read_text().split()
        yield Served(process, address, url)
    finally:
        process.terminate()
        process.wait(timeout=30)
