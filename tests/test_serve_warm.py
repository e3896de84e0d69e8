"""``serve --warm``: the daemon builds what its decisions can route to at start, and /readyz
waits for it (issue 27 item 2: "the daemon at start, before it reports ready, configurable").
A real daemon on loopback; the builds are fakes that wait on an Event (this machine has no GPU
to compile for), run by the real :class:`~kernelpolicy.warming.Warming`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from kernelpolicy.settings import bundled_policy_dir
from kernelpolicy.testing.daemon import running_daemon
from kernelpolicy.warming import Warming, tasks_for
from tests.helpers import ROOT, fixture, wait_until
from tests.http_helpers import call


def test_readyz_waits_for_the_warm_builds() -> None:
    release = threading.Event()
    started: list[dict[str, Any]] = []

    def build(task: dict[str, Any]) -> dict[str, Any]:
        started.append(task)
        assert release.wait(60)
        return {**task, "seconds": 0.0, "failed": "planted" if task["dtype"] == "float16" else None}

    def warm(resolution: Any) -> Warming:
        return Warming(tasks_for(resolution, [32000]), build, jobs=2)

    log = io.StringIO()
    with running_daemon(
        fixture("h100-sxm"), [bundled_policy_dir()], http="127.0.0.1:0", watch=False, warm=warm,
        log_format="json", log_stream=log,
    ) as running:  # fmt: skip
        url = running.daemon.fleet.url
        assert url is not None
        wait_until(lambda: len(started) == 2)
        waiting = call(url, "GET", "/readyz")
        assert waiting.status == 503
        total = len(running.daemon.fleet.warming.tasks)  # type: ignore[union-attr]
        assert total >= 2
        assert waiting.json()["why"] == (
            f"warming kernels (serve --warm): 0 of {total} variant groups done"
        )
        assert call(url, "GET", "/healthz").status == 200  # alive, answering meanwhile
        release.set()
        wait_until(lambda: call(url, "GET", "/readyz").status == 200)
    events = [json.loads(line) for line in log.getvalue().splitlines()]
    names = [e["event"] for e in events]
    assert names.count("kernelpolicy.warm.start") == 1
    assert names.count("kernelpolicy.warm.built") == total
    done = next(e for e in events if e["event"] == "kernelpolicy.warm.done")
    assert done["variant_groups"] == total
    # the planted failure of each float16 variant group on this node, as "impl dtype [vocab]"
    assert sorted(done["failed"]) == ["flashinfer float16", "triton float16 32000"]


def test_serve_warm_without_a_gpu_is_ready_at_once(tmp_path: Path) -> None:
    """The real option on this machine: nothing to build, said, and ready."""
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--listen", "127.0.0.1:0", "--http",
         "127.0.0.1:0", "--port-file", str(port_file), "--warm", "--quiet",
         "--platform", str(ROOT / "kernelpolicy/fixtures/platforms/cpu.json")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: port_file.exists() and len(port_file.read_text().split()) == 2)
        url = port_file.read_text().split()[1]
        assert call(url, "GET", "/readyz").status == 200
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "no device cuda:0 here: nothing to build" in err


def test_warm_options_go_with_warm() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "serve", "--warm-vocab", "128256"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--warm-vocab and --warm-device go with --warm; give --warm too" in done.stderr
