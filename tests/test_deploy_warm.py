"""deploy/'s warm step: the example inference pod runs `kernelpolicy warm` on its own GPU before
vLLM starts, into the node's kernel cache (a hostPath its init container hands to the workers'
uid), deciding with the same inputs as vLLM's kernelpolicy and the node's daemon."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import build_parser
from kernelpolicy.evidence.store import evidence_dir
from tests.deploy_helpers import container, find
from tests.helpers import said_as_user

WORKERS_UID = 10001  # the daemon's uid, and so the workers' (its socket is 0600)


def env_of(item: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in item.get("env", [])}


def mount_of(workload: dict[str, Any], item: dict[str, Any], path: str) -> dict[str, Any]:
    """The mount at ``path`` of the container ``item``, with its volume as ``volume``."""
    (mount,) = [m for m in item["volumeMounts"] if m["mountPath"] == path]
    volumes = workload["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    return {**mount, "volume": volume}


def test_warm_step_runs_kernelpolicy_warm_on_the_pods_gpu_before_vllm() -> None:
    """The warm step is an init container whose command parses as `kernelpolicy warm`, after
    the one that prepares the cache; it asks for the GPU the vLLM container asks for, which
    the device plugin hands on to it, so it builds for the device vLLM runs on."""
    deployment = find("Deployment", "llama-8b", "inference")
    spec = deployment["spec"]["template"]["spec"]
    names = [c["name"] for c in spec["initContainers"]]
    assert names == ["prepare-kernel-cache", "warm-kernels"]
    warm = container(deployment, "warm-kernels")
    assert warm["command"][0] == "kernelpolicy"
    args = build_parser().parse_args(warm["command"][1:])
    assert args.subcommand == "warm"
    assert args.run.__module__ == "kernelpolicy.cli.warm_cmd"
    assert args.vocab == [128256]  # Llama 3.1's vocabulary, the model the example serves
    limits = warm["resources"]["limits"]
    assert limits == container(deployment, "vllm")["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 1}


@pytest.mark.parametrize("name", [pytest.param("warm-kernels", id="warm"),
                                  pytest.param("vllm", id="worker")])  # fmt: skip
def test_warm_and_worker_decide_with_the_daemons_inputs(name: str) -> None:
    """Warm builds what vLLM's kernelpolicy routes to only if both decide as the node's
    daemon: the same policies, the daemon's socket (its halts file beside it), its evidence
    (read-only, at <cache dir>/evidence where the store is looked for) and one kernel cache
    they share and may write, which is not the daemon's cache directory."""
    daemonset = find("DaemonSet", "kernelpolicy")
    daemon = container(daemonset, "kernelpolicy")
    deployment = find("Deployment", "llama-8b", "inference")
    item = container(deployment, name)
    env = env_of(item)
    assert env["KERNELPOLICY_POLICY_PATHS"] == "+/etc/kernelpolicy/policies.d"
    assert env["KERNELPOLICY_SOCKET"] == daemon["args"][daemon["args"].index("--listen") + 1]
    assert (
        env["KERNELPOLICY_CACHE_DIR"]
        == env_of(container(deployment, "vllm"))["KERNELPOLICY_CACHE_DIR"]
    )
    cache = mount_of(deployment, item, env["KERNELPOLICY_CACHE_DIR"])
    assert not cache.get("readOnly")
    daemon_dir = env_of(daemon)["KERNELPOLICY_CACHE_DIR"]
    daemon_cache = mount_of(daemonset, daemon, daemon_dir)
    assert daemon_cache["readOnly"] is True
    assert cache["volume"]["hostPath"]["path"] != daemon_cache["volume"]["hostPath"]["path"]
    evidence = mount_of(deployment, item, str(evidence_dir(Path(env["KERNELPOLICY_CACHE_DIR"]))))
    assert evidence["readOnly"] is True
    daemon_evidence = evidence_dir(Path(daemon_cache["volume"]["hostPath"]["path"]))
    assert evidence["volume"]["hostPath"]["path"] == str(daemon_evidence)
    socket_dir = mount_of(deployment, item, "/run/kernelpolicy")
    assert socket_dir["readOnly"] is True


@pytest.fixture
def host() -> Iterator[Path]:
    """A stand-in for the node's filesystem: root's, 0755, under /tmp (another uid must be
    able to enter it, as it can enter /var/cache)."""
    directory = Path(tempfile.mkdtemp(prefix="kp-host-", dir="/tmp"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_prepare_step(host_cache: Path) -> None:
    """The prepare-kernel-cache init container's command, as root, with its mount of the
    kernel cache's hostPath pointed at ``host_cache``."""
    deployment = find("Deployment", "llama-8b", "inference")
    prepare = container(deployment, "prepare-kernel-cache")
    (mount,) = prepare["volumeMounts"]
    command = [part.replace(mount["mountPath"], str(host_cache)) for part in prepare["command"]]
    subprocess.run(command, check=True, timeout=60)


def prepare_as_worker(cache: Path) -> str:
    from kernelpolicy.errors import KernelPolicyError
    from kernelpolicy.kernel_cache import cache_problem, prepare_kernel_cache

    try:
        root = prepare_kernel_cache(cache)
        (root / "triton" / "kernel.so").write_bytes(b"built")  # what a build leaves
    except (OSError, KernelPolicyError) as exc:
        return f"refused: {exc}"
    return cache_problem(root) or "trusted"


@pytest.mark.skipif(os.geteuid() != 0, reason="the prepare step and another uid need root")
@pytest.mark.parametrize(
    ("mode", "prepared", "said"),
    [
        pytest.param(
            0o755, False, "refused: cannot prepare kernel cache", id="kubelet-made-unprepared"
        ),
        pytest.param(0o755, True, "trusted", id="kubelet-made-prepared"),
        pytest.param(0o777, False, "refused: refusing kernel cache", id="0777-unprepared"),
        pytest.param(0o777, True, "trusted", id="0777-prepared"),
    ],
)
def test_prepare_step_hands_the_cache_to_the_workers_uid(
    host: Path, mode: int, prepared: bool, said: str
) -> None:
    """The kubelet makes a missing hostPath as root, 0755: the workers' uid could not build
    into it, and one left writable by all would be refused (anyone could swap a compiled
    kernel). After the prepare step (root, CHOWN and FOWNER) uid 10001 makes the kernel cache
    there, builds into it, and the cache passes the trust rule exec checks before using it."""
    cache = host / "var-cache-kernelpolicy-kernels"
    cache.mkdir()
    cache.chmod(mode)
    if prepared:
        run_prepare_step(cache)
        info = cache.stat()
        owner = (info.st_uid, info.st_gid, info.st_mode & 0o7777)
        assert owner == (WORKERS_UID, WORKERS_UID, 0o700)
    answer = said_as_user(WORKERS_UID, lambda: prepare_as_worker(cache))
    assert answer.startswith(said), answer
