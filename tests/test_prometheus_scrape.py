"""A real Prometheus server scrapes a real daemon on loopback, and answers a query about it.

Skipped, with the reason, where the ``prometheus`` binary is absent (Debian's ``prometheus``
package installs it; ``scripts/test-deps`` does so where it can). Everything binds 127.0.0.1;
the wait for the first scrape is bounded, and Prometheus is stopped whatever happens.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus server is not installed (Debian: apt-get install prometheus; "
    "scripts/test-deps installs it when run as root)",
)
DEADLINE_SECONDS = 90  # a bound on a hang (Prometheus starts, then scrapes every second)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            document = json.load(reply)
    except OSError:
        return []  # not up yet
    assert document["status"] == "success", document
    return list(document["data"]["result"])


def test_prometheus_scrapes_the_decision_metric(tmp_path: Path) -> None:
    """Prometheus scrapes /metrics every second; its API then returns kernelpolicy_decision_info
    for the sampler with the node's implementation, and the target is up."""
    assert PROMETHEUS is not None
    with running_daemon(fixture("h100-sxm"), [ROOT / "policies"], watch=False,
                        http="127.0.0.1:0") as running:  # fmt: skip
        target = running.daemon.fleet.url.removeprefix("http://")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: kernelpolicy\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = free_port()
        server = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            promql = 'kernelpolicy_decision_info{feature="sampler.top_k_top_p"}'
            found: list[dict[str, Any]] = []
            deadline = time.monotonic() + DEADLINE_SECONDS
            while not found and time.monotonic() < deadline and server.poll() is None:
                found = query(port, promql)
                if not found:
                    time.sleep(0.5)
            up = query(port, 'up{job="kernelpolicy"}')
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
            stderr = server.stderr.read() if server.stderr else ""
    assert found, f"no sample within {DEADLINE_SECONDS}s; prometheus said:\n{stderr[-2000:]}"
    (sample,) = found
    assert sample["metric"]["impl"] == "flashinfer"
    assert sample["metric"]["reason"] == "preferred"
    assert sample["metric"]["instance"] == target
    assert sample["value"][1] == "1"
    assert [s["value"][1] for s in up] == ["1"]
