"""Acceptance: the stock openfeature-sdk + openfeature-provider-ofrep against `serve --http`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelpolicy.platform.fixtures import fixture_dir
from tests.helpers import ROOT

pytest.importorskip("openfeature.contrib.provider.ofrep", reason="needs openfeature-provider-ofrep")


def _port_file_lines(path: Path, proc: subprocess.Popen[str], want: int) -> list[str]:
    deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            lines = path.read_text().split()
            if len(lines) >= want:
                return lines
        time.sleep(0.05)
    raise AssertionError(f"the daemon wrote no port file (exit {proc.poll()})")


def test_stock_ofrep_provider_resolves_a_real_daemon(tmp_path: Path) -> None:
    """kernelpolicy serve --http on loopback; the provider in its own process reads decisions."""
    port_file = tmp_path / "port"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--quiet", "--no-watch",
         "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--port-file", str(port_file),
         "--platform", str(fixture_dir() / "platforms/h100-sxm.json")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        grpc_address, http_url = _port_file_lines(port_file, daemon, 2)
        assert grpc_address.startswith("127.0.0.1:")
        assert http_url.startswith("http://127.0.0.1:")
        client = subprocess.run(
            [sys.executable, str(Path(__file__).parent / "ofrep_client.py"), http_url],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert client.returncode == 0, client.stderr
    result = json.loads(client.stdout.splitlines()[-1])
    assert (result["value"], result["variant"], result["error"]) == (
        "flashinfer",
        "flashinfer",
        None,
    )
    assert result["reason"].endswith("TARGETING_MATCH")
    assert result["metadata"]["revision"] == 1
    assert result["per_call"] == "triton"  # seeded requests skip flashinfer
    assert (result["gate"], result["gate_error"]) == (False, None)
    assert result["missing"][0] == "fallback"
    assert result["missing"][1].endswith("FLAG_NOT_FOUND")
    assert result["disabled"][0] == "code-default"  # not applicable: the code default applies
    assert result["disabled"][1].endswith("DISABLED")
