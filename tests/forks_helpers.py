"""Processes of their own without an interpreter's start each: one interpreter imports the heavy
modules every case imports (torch, vLLM) and nothing of kernelpolicy, then forks a child per
case that takes the case's working directory, environment and PYTHONPATH and runs its code as
``python -c CODE ARGV...`` (or its module as ``python -m MODULE ARGV...``) would, exit included
(non-daemon threads joined, atexit handlers run). Those imports were most of each case's time:
about 2 s of CPU for torch (tests/test_halt_loop.py's workers), 8 s for vLLM
(tests/test_vllm_plugin_install.py).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CASE_SECONDS = 300
Done = subprocess.CompletedProcess[str]

# Run by the interpreter with the modules to import as arguments; a request is a JSON line,
# the reply the child's exit status. No thread runs when it forks (a fork copies one only).
FORKS = r"""
import atexit, json, os, runpy, signal, sys, threading, traceback
for name in sys.argv[1:]:
    __import__(name)
loaded = sorted(m for m in sys.modules if m.partition(".")[0] == "kernelpolicy")
assert not loaded, f"each case imports kernelpolicy itself: {loaded}"


def run(case):
    signal.alarm(case["seconds"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, case["stdout"]), (2, case["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.chdir(case["cwd"])
    os.environ.clear()
    os.environ.update(case["env"])
    paths = [path for path in case["env"].get("PYTHONPATH", "").split(os.pathsep) if path]
    if case["module"]:
        sys.path[0:1] = [os.getcwd(), *paths]
        sys.argv = [case["module"], *case["argv"]]
        runpy.run_module(case["module"], run_name="__main__", alter_sys=True)
    else:
        sys.path[0:1] = ["", *paths]
        sys.argv = ["-c", *case["argv"]]
        exec(compile(case["code"], "<string>", "exec"), {"__name__": "__main__"})


def child(case):
    status = 0
    try:
        run(case)
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    case = json.loads(line)
    assert threading.active_count() == 1, threading.enumerate()
    pid = os.fork()
    if pid == 0:
        child(case)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"returncode": status}), flush=True)
"""


class Forks:
    """The forking interpreter: ``python`` importing ``preload``, started with ``env`` (without
    PYTHONPATH: each case's own finds kernelpolicy) and its log and the cases' output in
    ``directory``."""

    def __init__(
        self, python: Path | str, preload: Sequence[str], env: dict[str, str], directory: Path
    ) -> None:
        self.directory = directory
        self.count = 0
        self.log = directory / "forks.log"
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(python), "-c", FORKS, *preload], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, env=env,
            )  # fmt: skip
        self._reply()

    def code(self, code: str, argv: Sequence[str], env: dict[str, str]) -> Done:
        """``python -c CODE ARGV...`` in the environment ``env``, forked."""
        return self._run({"code": code, "module": None}, argv, env, os.getcwd())

    def module(self, module: str, argv: Sequence[str], env: dict[str, str], cwd: Path) -> Done:
        """``python -m MODULE ARGV...`` in ``cwd`` and the environment ``env``, forked."""
        return self._run({"code": None, "module": module}, argv, env, str(cwd))

    def _run(
        self, what: dict[str, Any], argv: Sequence[str], env: dict[str, str], cwd: str
    ) -> Done:
        self.count += 1
        out, err = (self.directory / f"{self.count}.{name}" for name in ("out", "err"))
        request = {**what, "argv": list(argv), "env": env, "cwd": cwd, "seconds": CASE_SECONDS,
                   "stdout": str(out), "stderr": str(err)}  # fmt: skip
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        status = self._reply()["returncode"]
        return subprocess.CompletedProcess(list(argv), status, out.read_text(), err.read_text())

    def _reply(self) -> dict[str, Any]:
        """The interpreter's next line (a bound on a hang, not a speed check)."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], CASE_SECONDS + 30)
        line = self.process.stdout.readline() if ready else b""
        assert line, f"no answer from the forking interpreter:\n{self.log.read_text()[-3000:]}"
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
