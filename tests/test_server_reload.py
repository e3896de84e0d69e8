"""Hot reload: edited files, ConfigMap symlink swaps, bad files kept out, streams notified."""

from __future__ import annotations

import io
import json
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.client import connect
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, wait_until

TOPK = "sampler.top_k_top_p"
DISABLE = (
    'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
    'impl = "flashinfer"\nreason = "incident 4711"\n'
)


def pack(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", directory)
    return directory


def impl_of(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        response = pb_grpc.KernelPolicyStub(channel).Resolve(pb.ResolveRequest(features=[TOPK]))
        return str(response.decisions[0].impl)


def test_edited_file_is_reloaded_and_watchers_are_told(tmp_path: Path) -> None:
    """Adding an operator's disable file switches the kernel off, without a restart."""
    policies = pack(tmp_path)
    with (
        running_daemon(fixture("h100-sxm"), [policies]) as running,
        connect(running.daemon.bound[0]) as client,
    ):
        seen = []
        stream = client.watch()
        seen.append(next(stream))
        assert seen[0].decision(TOPK).impl == "flashinfer"
        (policies / "90-ops.toml").write_text(DISABLE)
        seen.append(next(stream))
        stream.close()
        assert seen[1].decision(TOPK).impl == "triton"
        assert seen[1].revision == 2
        assert "incident 4711" in seen[1].decision(TOPK).reasons[1]


def test_bad_file_keeps_the_last_good_set(tmp_path: Path) -> None:
    """A broken file is reported (Explain, status) and the last good policies keep serving."""
    policies = pack(tmp_path)
    with running_daemon(fixture("h100-sxm"), [policies], watch=False) as running:
        (policies / "90-ops.toml").write_text(
            DISABLE.replace('impl = "flashinfer"', 'impl = "flashinfr"')
        )
        running.call(running.daemon.reload("test"))
        with grpc.insecure_channel(running.daemon.bound[0]) as channel:
            explain = pb_grpc.KernelPolicyStub(channel).Explain(pb.ExplainRequest())
        assert (
            "disables sampler.top_k_top_p/flashinfr, which is not defined" in explain.policy_error
        )
        assert explain.revision == 1
        assert impl_of(running.daemon.bound[0]) == "flashinfer"
        (policies / "90-ops.toml").write_text(DISABLE)  # fixed
        running.call(running.daemon.reload("test"))
        assert impl_of(running.daemon.bound[0]) == "triton"
        with grpc.insecure_channel(running.daemon.bound[0]) as channel:
            assert pb_grpc.KernelPolicyStub(channel).Explain(pb.ExplainRequest()).policy_error == ""


def test_configmap_symlink_swap(tmp_path: Path) -> None:
    """Kubernetes ConfigMaps swap a ..data symlink to a new directory; that reloads too."""
    mount = tmp_path / "mount"
    mount.mkdir()
    first = mount / "..2026_11_22_01"
    shutil.copytree(ROOT / "policies", first)
    (mount / "..data").symlink_to(first.name)
    for name in sorted(p.name for p in first.iterdir()):
        (mount / name).symlink_to(f"..data/{name}")
    with running_daemon(fixture("h100-sxm"), [mount]) as running:
        assert impl_of(running.daemon.bound[0]) == "flashinfer"
        second = mount / "..2026_11_22_02"
        shutil.copytree(first, second)
        (second / "90-ops.toml").write_text(DISABLE)
        (mount / "90-ops.toml").symlink_to("..data/90-ops.toml")
        tmp_link = mount / "..data_tmp"
        tmp_link.symlink_to(second.name)
        tmp_link.replace(mount / "..data")  # the atomic swap kubelet does
        wait_until(lambda: impl_of(running.daemon.bound[0]) == "triton")


def test_event_stream_announces_changed_flags(tmp_path: Path) -> None:
    """flagd EventStream: provider_ready at once, then configuration_change with the keys."""
    policies = pack(tmp_path)
    with (
        running_daemon(fixture("h100-sxm"), [policies]) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as channel,
    ):
        stream = f2_grpc.ServiceStub(channel).EventStream(f2.EventStreamRequest())
        assert next(stream).type == "provider_ready"
        (policies / "90-ops.toml").write_text(DISABLE)
        event = next(stream)
        stream.cancel()
        assert event.type == "configuration_change"
        assert list(event.data["flags"].keys()) == [TOPK]


def test_disconnected_streams_leak_nothing(tmp_path: Path) -> None:
    """Clients that drop Watch and EventStream streams leave no subscription behind."""
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        for _ in range(5):
            with grpc.insecure_channel(running.daemon.bound[0]) as channel:
                watch = pb_grpc.KernelPolicyStub(channel).Watch(pb.WatchRequest())
                events = f2_grpc.ServiceStub(channel).EventStream(f2.EventStreamRequest())
                next(watch)
                next(events)
                assert running.daemon.state.subscriber_count == 2
            # the channel is closed without cancelling: the server must notice
        wait_until(lambda: running.daemon.state.subscriber_count == 0)
        assert threading.active_count() < 50


def test_sighup_and_sigterm(tmp_path: Path) -> None:
    """As a process: SIGHUP reloads (file watching off), SIGTERM shuts down cleanly."""
    import subprocess
    import sys

    policies = pack(tmp_path)
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--listen", "127.0.0.1:0", "--no-watch",
         "--port-file", str(port_file), "--policies", str(policies),
         "--platform", str(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "KERNELPOLICY_LOG_FORMAT": "json", **_python_env()},
    )  # fmt: skip
    try:
        wait_until(lambda: port_file.exists() and port_file.read_text().strip() != "")
        address = port_file.read_text().split()[0]
        assert impl_of(address) == "flashinfer"
        (policies / "90-ops.toml").write_text(DISABLE)
        time.sleep(0.3)
        assert impl_of(address) == "flashinfer"  # not watching: nothing yet
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: impl_of(address) == "triton")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        log = proc.stderr.read() if proc.stderr else ""
        assert '"event": "kernelpolicy.reload"' in log
        assert '"why": "SIGHUP"' in log
        assert '"event": "kernelpolicy.serve.stop"' in log
    finally:
        proc.kill()


def _python_env() -> dict[str, str]:
    import os

    return {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PYTHON", "HOME", "VIRTUAL_ENV", "LANG"))
    }


DIVIDES_BY_ZERO = """schema = "kernelpolicy.policy/v1"

[features."demo.div"]
description = "a when that divides by zero in the load-time trial evaluation"
fallback = "torch"
context = { tokens = "int" }

[[features."demo.div".candidates]]
impl = "torch"

[[features."demo.div".candidates]]
impl = "fast"
entry = "os:getcwd"
when = '4096 / tokens > 8'
"""


class Panic(BaseException):
    """What pyo3's PanicException is: not an Exception."""


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param("division", id="real-file-dividing-by-zero"),
        pytest.param("panic", id="loader-panics-with-a-base-exception"),
        pytest.param("recursion", id="loader-raises-recursion-error"),
    ],
)
def test_a_reload_failing_on_anything_keeps_the_watcher(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    breakage: str,
) -> None:
    """Any failure in a reload: reload.failed at warning, Explain and status report it, the
    last good set serves, and the next valid edit is still picked up by the watcher."""
    from kernelpolicy.cli import main
    from kernelpolicy.server import state

    if breakage != "division":
        real = state.load_policy_sources

        def exploding(sources: Any) -> Any:
            if any("# explode" in text for _, text in sources):
                raise Panic("planted panic") if breakage == "panic" else RecursionError("deep")
            return real(sources)

        monkeypatch.setattr(state, "load_policy_sources", exploding)
    policies = pack(tmp_path)
    log = io.StringIO()
    with running_daemon(
        fixture("h100-sxm"), [policies], log_format="json", log_stream=log
    ) as running:
        address = running.daemon.bound[0]
        bad = DIVIDES_BY_ZERO if breakage == "division" else DISABLE + "# explode\n"

        def failed_after_writing() -> bool:
            (policies / "50-bad.toml").write_text(bad)  # again: the watcher may start later
            time.sleep(0.2)
            return '"event": "kernelpolicy.reload.failed"' in log.getvalue()

        wait_until(failed_after_writing)
        failed = next(
            json.loads(line) for line in log.getvalue().splitlines() if "reload.failed" in line
        )
        assert failed["level"] == "warning"
        assert main(["status", "--address", address]) == 1
        assert "last reload FAILED" in capsys.readouterr().out
        assert impl_of(address) == "flashinfer"  # the last good set
        (policies / "50-bad.toml").unlink()
        (policies / "90-ops.toml").write_text(DISABLE)  # a valid edit: picked up
        wait_until(lambda: impl_of(address) == "triton")
        assert main(["status", "--address", address]) == 0


def _sighup_caught(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_sighup_while_starting_does_not_kill_the_daemon(tmp_path: Path) -> None:
    """SIGHUP is handled from the first moment of serve (before the slow imports, probe and
    policy load), so SIGHUPs during start-up are reloads, not the end of the daemon."""
    import subprocess
    import sys

    port_file = tmp_path / "port"
    log = tmp_path / "stderr.log"  # a file, not a pipe no one reads while the daemon runs
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelpolicy", "serve", "--listen", "127.0.0.1:0",
             "--no-watch", "--port-file", str(port_file), "--policies", str(ROOT / "policies"),
             "--platform", str(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True,
            env={"PATH": "/usr/bin:/bin", "KERNELPOLICY_LOG_FORMAT": "json", **_python_env()},
        )  # fmt: skip
    deadline = time.monotonic() + 60  # a daemon that never gets there fails, not hangs
    try:
        while not _sighup_caught(proc.pid):  # no sleep: the handler's first moment is the point
            assert proc.poll() is None, "the daemon ended before handling SIGHUP"
            assert time.monotonic() < deadline, "SIGHUP not handled within 60 s"
        assert not port_file.exists(), "SIGHUP was handled only once the daemon served"
        hups = 0
        while not (port_file.exists() and port_file.read_text().strip()):
            proc.send_signal(signal.SIGHUP)
            hups += 1
            assert proc.poll() is None, f"killed by SIGHUP number {hups} while starting"
            assert time.monotonic() < deadline, f"not serving within 60 s ({hups} SIGHUPs)"
            time.sleep(0.02)
        assert impl_of(port_file.read_text().split()[0]) == "flashinfer"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert '"why": "SIGHUP"' in log.read_text()
    finally:
        proc.kill()
        proc.wait()


def test_answers_flow_while_a_reload_is_being_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next set is built off the event loop: with the loader held in the middle of a
    reload, requests are still answered (from the current revision), then the swap happens."""
    import concurrent.futures

    from kernelpolicy.server import state

    entered, release = threading.Event(), threading.Event()
    real = state.load_policy_sources

    def held(sources: Any) -> Any:
        entered.set()
        assert release.wait(30), "the test never released the loader"
        return real(sources)

    policies = pack(tmp_path)
    with running_daemon(fixture("h100-sxm"), [policies], watch=False) as running:
        monkeypatch.setattr(state, "load_policy_sources", held)
        (policies / "90-ops.toml").write_text(DISABLE)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            reloading = pool.submit(running.call, running.daemon.reload("test"))
            assert entered.wait(30)
            answers = [impl_of(running.daemon.bound[0]) for _ in range(20)]  # mid-reload
            release.set()
            reloading.result(30)
        assert answers == ["flashinfer"] * 20
        assert impl_of(running.daemon.bound[0]) == "triton"
