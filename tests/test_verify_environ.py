"""`kernelpolicy verify` never writes this process's environment (STYLE.md: no code writes back
into os.environ): the kernel cache it uses is handed down explicitly
(kernelpolicy/kernels/cache_lookup.py's contexts), Triton is pointed at it through Triton's own
setting, and a build's child process gets its environment as a dict. Each run here replaces
os.environ with a mapping that refuses writes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.kernel_cache import VARIABLES, BuiltRecord, kernel_cache_dir, prepare_kernel_cache
from kernelpolicy.kernels import cache_lookup


class ReadOnlyEnviron(MutableMapping[str, str]):
    """os.environ's contents, read as usual; each write is kept in ``writes`` and refused."""

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items
        self.writes: list[str] = []

    def __getitem__(self, name: str) -> str:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, name: str, value: str) -> None:
        self.writes.append(f"{name}={value}")
        raise RuntimeError(f"os.environ written: {name}={value}")

    def __delitem__(self, name: str) -> None:
        self.writes.append(f"del {name}")
        raise RuntimeError(f"os.environ written: del {name}")

    def copy(self) -> dict[str, str]:
        return dict(self._items)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trusted kernel cache under KERNELPOLICY_CACHE_DIR, none of its variables set."""
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return prepare_kernel_cache(tmp_path)


def _spied_suite(monkeypatch: pytest.MonkeyPatch, gpu: bool) -> dict[str, Any]:
    """What the suite saw when it ran here: the record its samplers find and, on a GPU run
    (faked: the suite runs nothing), Triton's directory and a background build child's."""
    from kernelpolicy.cli import verify_cmd
    from kernelpolicy.verify import suite

    seen: dict[str, Any] = {}
    run = suite.iter_run

    def iter_run(*args: Any, **kwargs: Any) -> Iterator[Any]:
        record = cache_lookup.kernel_cache()
        seen["record"] = None if record is None else record.root
        if gpu:  # what the sampler's build uses: Triton's setting, the child's environment
            import triton

            from kernelpolicy.kernels.sampling_triton import child

            seen["triton"] = triton.knobs.cache.dir
            seen["child"] = child.environment()["TRITON_CACHE_DIR"]
            return iter(())
        return run(*args, **kwargs)

    monkeypatch.setattr(suite, "iter_run", iter_run)
    monkeypatch.setattr(verify_cmd, "_builds_kernels", lambda device: gpu)
    return seen


def _verify(monkeypatch: pytest.MonkeyPatch, environ: ReadOnlyEnviron, argv: list[str]) -> int:
    """``kernelpolicy verify ARGV`` in-process, with ``environ`` as os.environ."""
    with monkeypatch.context() as scoped:  # put back before pytest writes its own variable
        scoped.setattr(os, "environ", environ)
        return main(["verify", *argv])


@pytest.mark.parametrize(
    ("gpu", "argv"),
    [
        pytest.param(False, ["--feature", "topk_per_row", "--quick"], id="a-real-cpu-run"),
        pytest.param(True, ["--feature", "sampler.top_k_top_p"], id="a-gpu-run-faked"),
    ],
)
def test_verify_reads_the_environment_and_never_writes_it(
    gpu: bool, argv: list[str], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with os.environ refusing writes, verify runs here (FlashInfer's workspace
    set: nothing to start a child for), exits 0 and wrote nothing into it; the samplers see the
    cache's record, and on a run that builds kernels Triton and a background build's child
    process are given the cache's Triton directory."""
    seen = _spied_suite(monkeypatch, gpu)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(cache / "flashinfer"))
    environ = ReadOnlyEnviron(dict(os.environ))
    assert _verify(monkeypatch, environ, ["--no-store", *argv]) == 0
    assert environ.writes == []
    assert seen.pop("record") == cache
    if gpu:
        assert seen == {"triton": str(cache / "triton"), "child": str(cache / "triton")}


def test_a_gpu_run_runs_again_in_a_child_that_has_the_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU run whose environment does not point FlashInfer at the kernel cache runs the same
    command in a child whose environment does (FlashInfer reads it when imported) and Triton's
    too, with kernelpolicy first on its path; os.environ is not written and the suite does not
    run here; the child's exit status is verify's. That child, given this environment, runs the
    suite itself with the cache's record and Triton there, and starts no other."""
    from kernelpolicy.cli import verify_child

    seen = _spied_suite(monkeypatch, True)
    started: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], env: dict[str, str]) -> int:
        started.append((list(argv), dict(env)))
        return 3

    monkeypatch.setattr(verify_child, "run", run)
    environ = ReadOnlyEnviron(dict(os.environ))
    monkeypatch.chdir(cache)  # --out's folder, relative: the child runs here too
    argv = ["--feature", "sampler.top_k_top_p", "--no-store", "--out=-r.json"]
    assert _verify(monkeypatch, environ, argv) == 3
    assert (environ.writes, seen) == ([], {})
    [(command, env)] = started
    assert command == [
        sys.executable, "-P", "-m", "kernelpolicy", "verify",
        "--feature=sampler.top_k_top_p", "--out=-r.json", "--no-store",
    ]  # fmt: skip
    assert {name: env.get(name) for name in VARIABLES} == {
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "FLASHINFER_WORKSPACE_BASE": str(cache / "flashinfer"),
    }
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(verify_child.__file__).parents[2])
    assert env[verify_child.PARENT_SAID] == "1"  # what this run said is not said again
    rest = (*VARIABLES, "PYTHONPATH", verify_child.PARENT_SAID)
    assert {k: v for k, v in env.items() if k not in rest} == {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"
    }
    child = ReadOnlyEnviron(env)
    assert _verify(monkeypatch, child, argv[:3]) == 0  # the child's run, here
    assert (child.writes, len(started)) == ([], 1)
    import triton  # Triton reads the real environment's variable (a child's is the cache's)

    unchanged = triton.knobs.cache.dir  # so here verify leaves its setting alone
    assert seen == {"record": cache, "triton": unchanged, "child": unchanged}


_REPORTS = (
    "import os, sys; print(os.environ['FLASHINFER_WORKSPACE_BASE'], os.getcwd()); "
    "print('said', file=sys.stderr); "
)


@pytest.mark.parametrize(
    ("ends", "code"),
    [
        pytest.param("sys.exit(3)", 3, id="its-exit-status"),
        pytest.param("import signal; os.kill(os.getpid(), signal.SIGTERM)", 143, id="killed"),
    ],
)
def test_the_child_gets_its_environment_and_its_status_is_verifys(
    ends: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A real child process: it has the environment given (os.environ unchanged), runs in the
    current directory, writes to this process's stdout and stderr, and its exit status is
    returned (128 + the signal that ended it, as a shell says it)."""
    from kernelpolicy.cli import verify_child

    monkeypatch.chdir(tmp_path)
    before = dict(os.environ)
    env = verify_child.environment(os.environ, {"FLASHINFER_WORKSPACE_BASE": "/kc/flashinfer"})
    assert verify_child.run([sys.executable, "-c", _REPORTS + ends], env) == code
    assert dict(os.environ) == before
    assert capfd.readouterr() == (f"/kc/flashinfer {tmp_path}\n", "said\n")


def test_an_interrupt_is_passed_on_to_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt that reaches this process while it waits (``kill -INT`` of its id alone)
    is passed on: the child ends on it, and verify exits as it did (130)."""
    import subprocess

    from kernelpolicy.cli import verify_child

    wait = subprocess.Popen.wait
    calls: list[float | None] = []

    def interrupted_once(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted_once)
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert verify_child.run(argv, dict(os.environ)) == 130
    assert calls == [None, verify_child.INTERRUPT_SECONDS]


@pytest.mark.parametrize(
    "record",
    [pytest.param(True, id="a-record"), pytest.param(False, id="no-kernel-cache")],
)
def test_using_kernel_cache_answers_then_puts_the_lookup_back(record: bool, tmp_path: Path) -> None:
    """Within using_kernel_cache, every thread's kernel_cache() is the record given, with no
    look; after it, the lookup that was in place answers again."""
    import threading

    given = BuiltRecord(kernel_cache_dir(tmp_path)) if record else None
    outer = prepare_kernel_cache(tmp_path / "outer")
    with cache_lookup.looking_for_kernel_cache({"TRITON_CACHE_DIR": str(outer / "triton")}):
        with cache_lookup.using_kernel_cache(given):
            answers: list[object] = []
            thread = threading.Thread(target=lambda: answers.append(cache_lookup.kernel_cache()))
            thread.start()
            thread.join(60)
            assert answers == [given]
            assert cache_lookup.kernel_cache() is given
        found = cache_lookup.kernel_cache()
        assert found is not None
        assert found.root == outer


def test_looking_for_kernel_cache_looks_in_the_mapping_given(tmp_path: Path) -> None:
    """looking_for_kernel_cache looks in the mapping given, never in os.environ, and the look
    made there is forgotten when it ends."""
    root = prepare_kernel_cache(tmp_path)
    with cache_lookup.looking_for_kernel_cache({"TRITON_CACHE_DIR": str(root / "triton")}):
        found = cache_lookup.kernel_cache()
        assert found is not None
        assert found.root == root
    with cache_lookup.looking_for_kernel_cache({}):
        assert cache_lookup.kernel_cache() is None


_EVERY_OTHER_OPTION = ["--feature", "sampler.greedy", "--entry", "m:f", "--guard",
    "clamp_token_ids", "--device", "cuda", "--out", "r.json", "--no-store", "--quick",
    "--json"]  # fmt: skip
_OPTIONS = [
    pytest.param([], id="none"),
    pytest.param(
        ["--feature", "rmsnorm", "--feature", "sampler.greedy", "--impl", "torch", "--impl", "x"],
        id="repeated",
    ),
    pytest.param(_EVERY_OTHER_OPTION, id="every-other-option"),
    pytest.param(["--out=-r.json", "--feature=-f"], id="values-starting-with-a-dash"),
]


def _verify_parser() -> argparse.ArgumentParser:
    from kernelpolicy.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    verify: argparse.ArgumentParser = commands.choices["verify"]
    return verify


@pytest.mark.parametrize("argv", _OPTIONS)
def test_the_childs_command_is_the_one_given(argv: list[str]) -> None:
    """The child is ``python -P -m kernelpolicy`` with the verify options that were parsed,
    which parse to the same."""
    from kernelpolicy.cli import verify_child

    parser = _verify_parser()
    args = parser.parse_args(argv)
    command = verify_child.command(args)
    assert command[:5] == [sys.executable, "-P", "-m", "kernelpolicy", "verify"]
    assert parser.parse_args(command[5:]) == args


def test_every_verify_option_is_passed_to_the_child() -> None:
    """Each of verify's options is given a value by a case of the table above: an option added
    to verify and not to the child's command fails the round trip."""
    parser = _verify_parser()
    defaults = parser.parse_args([])
    given = {
        dest
        for case in _OPTIONS
        for dest, value in vars(parser.parse_args(case.values[0])).items()
        if value != getattr(defaults, dest)
    }
    options = {a.dest for a in parser._actions if a.option_strings and a.dest != "help"}
    assert given == options


@pytest.mark.parametrize(
    ("parent_said", "lines"),
    [
        pytest.param(False, 2, id="said-here"),
        pytest.param(True, 0, id="the-child-of-a-parent-that-said-them"),
    ],
)
def test_a_child_does_not_say_again_what_its_parent_said(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    parent_said: bool,
    lines: int,
) -> None:
    """A GPU run says a misspelt variable and a kernel cache not used, then runs again in a
    child with the same environment: the child says neither (they were said twice)."""
    import kernelpolicy.settings as settings_module
    from kernelpolicy.cli import verify_child, verify_cmd

    kernels = prepare_kernel_cache(tmp_path / "cache")
    kernels.chmod(0o777)  # a kernel cache others can write: not used, and said
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path / "cache"))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNELPOLICY_LOG_FROMAT", "json")
    monkeypatch.delenv(verify_child.PARENT_SAID, raising=False)
    if parent_said:
        monkeypatch.setenv(verify_child.PARENT_SAID, "1")
    monkeypatch.setattr(settings_module, "_SAID", set())  # each variable is said once a process
    monkeypatch.setattr(verify_cmd, "_reports", lambda *args: [])  # the suite is not the point
    assert main(["verify", "--device", "cpu", "--no-store"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("kernelpolicy: warning:")]
    assert len(said) == lines, err
    assert verify_child.environment({}, {})[verify_child.PARENT_SAID] == "1"
