"""Building the kernels a node's decisions can route to, in parallel processes, into the node's
kernel cache (:mod:`kernelpolicy.kernel_cache`): the work of ``kernelpolicy warm`` and of
``serve --warm`` (the daemon at start, before ``/readyz`` says ready).

Each build runs in a process of its own (``python -P -m kernelpolicy.kernels.warm_child``, started
where nobody else's code can be imported: :mod:`kernelpolicy.kernels.build_process`), so that
a compiler holding its interpreter never holds the caller's; at most ``jobs`` at once. Without a
CUDA device there is nothing to build. Importing it costs every command nothing much (the CLI
names its defaults in ``--help``): subprocess and the thread pool are imported when used.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "BUILDERS",
    "DEFAULT_VOCABS",
    "TASK_SECONDS",
    "Warming",
    "build_in_process",
    "has_device",
    "label",
    "node_warming",
    "tasks_for",
]

DEFAULT_VOCABS = (32000, 128256, 151936)  # Llama 2, Llama 3, Qwen: the vocabulary classes
DEFAULT_DEVICE = "cuda:0"  # the first GPU the process sees
DEFAULT_JOBS = min(8, os.cpu_count() or 1)  # build processes at once: the CPUs, at most 8
# feature -> its implementations whose first call compiles (the ones warm can build)
BUILDERS: dict[str, tuple[str, ...]] = {"sampler.top_k_top_p": ("triton", "flashinfer")}
TASK_SECONDS = 900  # one build process (a Triton variant group compiles in minutes on an H100)

Task = dict[str, Any]  # feature, impl, dtype, vocab (None where the build has none)
Result = dict[str, Any]  # the task, seconds, failed (None, or why)


def tasks_for(resolution: Any, vocabs: list[int]) -> list[Task]:
    """One build task per (implementation, dtype[, vocabulary]) the decisions can route to
    (a vocabulary given twice builds once)."""
    tasks = []
    for name, decision in resolution.decisions.items():
        spec = resolution.policies.features[name].spec
        dtypes = list(spec.dtypes) or ["float32"]
        builders = BUILDERS.get(name, ())
        for impl in dict.fromkeys(i for i in decision.order if i in builders):
            for dtype in dtypes:
                for vocab in dict.fromkeys(vocabs) if impl == "triton" else [None]:
                    tasks.append({"feature": name, "impl": impl, "dtype": dtype, "vocab": vocab})
    return tasks


def has_device(device: str) -> bool:
    """Whether ``device`` is a CUDA device torch can use here (torch is optional)."""
    try:
        import torch
    except ImportError:
        return False
    return device.startswith("cuda") and torch.cuda.is_available()


def build_in_process(task: Task, device: str, env: Mapping[str, str]) -> Result:
    """Build ``task``'s variants in a child process (at most ``TASK_SECONDS``); a process that
    fails, outlasts them or cannot start fails the task with why (its output read whatever
    bytes it wrote)."""
    import subprocess

    from kernelpolicy.kernels.build_process import build_environment, python_command, run_build

    start = time.monotonic()
    payload = json.dumps({**task, "device": device})
    argv = [*python_command(sys.executable, "kernelpolicy.kernels.warm_child"), payload]
    try:
        done = run_build(argv, build_environment(env), TASK_SECONDS)
        failed = (done.stdout.strip() or done.stderr.strip()[-300:]) if done.code else ""
    except subprocess.TimeoutExpired:
        failed = f"over {TASK_SECONDS} s"
    except OSError as exc:  # fork or exec refused (EAGAIN, ENOMEM, a missing interpreter)
        failed = f"its build process could not start: {type(exc).__name__}: {exc}"
    return {**task, "seconds": round(time.monotonic() - start, 1), "failed": failed or None}


def node_warming(
    resolution: Any, root: os.PathLike[str] | str, *, vocabs: list[int], device: str, jobs: int
) -> Warming | str:
    """The warm run of a node (``kernelpolicy warm``, ``serve --warm``): every task its
    decisions route to (:func:`tasks_for`, ``vocabs`` or :data:`DEFAULT_VOCABS`), each built on
    ``device`` in a process of its own into the kernel cache at ``root``; or why there is
    nothing to build (no such device here)."""
    if not has_device(device):
        return f"no device {device} here: nothing to build"
    env = warm_environment(root)
    tasks = tasks_for(resolution, vocabs or list(DEFAULT_VOCABS))
    return Warming(tasks, lambda task: build_in_process(task, device, env), jobs=jobs)


def label(task: Task) -> str:
    """``triton bfloat16 vocab 128256``."""
    return f"{task['impl']} {task['dtype']}" + (f" vocab {task['vocab']}" if task["vocab"] else "")


class Warming:
    """One warm run: its tasks, built ``jobs`` at a time by ``build``; what is done so far.

    Thread-safe: :meth:`run` in one thread, :meth:`progress` from any (the daemon's ``/readyz``).
    A build that raises fails its task with the reason (the others go on, and the run's report
    and ``/readyz`` count it), as a build process that failed does.

    Args:
        tasks: What to build (:func:`tasks_for`).
        build: Builds one task and says how it went (:func:`build_in_process`, bound).
        jobs: Builds at once.
        told: Called with each result as it ends (a progress line); may be set before
            :meth:`run`.
    """

    def __init__(
        self,
        tasks: list[Task],
        build: Callable[[Task], Result],
        *,
        jobs: int,
        told: Callable[[Result], None] = lambda result: None,
    ) -> None:
        self.tasks = tasks
        self._build = build
        self._jobs = jobs
        self.told = told
        self._lock = threading.Lock()
        self.results: list[Result] = []  # in the order they ended
        self.finished = threading.Event()

    def run(self) -> list[Result]:
        """Build every task; the results in the tasks' order."""
        from concurrent.futures import ThreadPoolExecutor

        try:
            with ThreadPoolExecutor(max(1, self._jobs)) as pool:
                return list(pool.map(self._one, self.tasks))
        finally:
            self.finished.set()

    def _one(self, task: Task) -> Result:
        start = time.monotonic()
        try:
            result = self._build(task)
        except Exception as exc:  # a build that crashed fails its task, never the run
            seconds = round(time.monotonic() - start, 1)
            result = {**task, "seconds": seconds, "failed": f"{type(exc).__name__}: {exc}"}
        with self._lock:
            self.results.append(result)
        self.told(result)
        return result

    def progress(self) -> tuple[int, int]:
        """(tasks ended, tasks)."""
        with self._lock:
            return len(self.results), len(self.tasks)

    def failed(self) -> list[Result]:
        with self._lock:
            return [r for r in self.results if r["failed"]]


def warm_environment(root: os.PathLike[str] | str) -> dict[str, str]:
    """The environment a warm run's build processes start from: this one, with Triton's and
    FlashInfer's caches in the kernel cache at ``root`` whatever it says (a build fills that
    cache; ``exec``'s ``kernel_cache.cache_environment`` keeps a variable the user set).
    :func:`build_in_process` hands it to ``build_process.build_environment``, which makes a
    build process's own environment of it."""
    from pathlib import Path

    from kernelpolicy.kernel_cache import VARIABLES

    return {**os.environ, **{k: str(Path(root) / sub) for k, sub in VARIABLES.items()}}
