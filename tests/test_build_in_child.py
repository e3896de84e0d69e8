"""The Triton sampler's background build compiles its variant in a child process and then loads
it in the build's thread (review C2: a compile in a thread of the serving process held its
interpreter, stalling the calls served meanwhile; kernelpolicy/kernels/sampling_triton/child.py).
The child here is a stand-in command (a Python one-liner that writes what it was given to a
file and exits as told); the variant is on CPU, its kernels interpreted, with the child taking
CPU variants as it takes CUDA ones on a GPU. No sleeps, no timings."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the kernel tests: before the kernels load
pytest.importorskip("triton")

from kernelpolicy.kernels.builds import BuildFailed, Compiling
from kernelpolicy.kernels.sampling_triton import Tuning, Variant, child, child_main
from kernelpolicy.kernels.sampling_triton.child import CannotStart, Child, task_of, variant_of
from kernelpolicy.kernels.sampling_triton.sampler import build_variant
from kernelpolicy.limits import MAX_BUILD_SECONDS
from tests.helpers import TritonSampler

STAND_IN = """
import json, os, sys, time
out = os.environ["KP_TEST_CHILD_OUT"]
json.dump({"argv": sys.argv[1:], "cache": os.environ.get("TRITON_CACHE_DIR"),
           "path": os.environ.get("PYTHONPATH", "")}, open(out, "w"))
if os.environ.get("KP_TEST_CHILD_HANGS"):
    time.sleep(600)
print(os.environ.get("KP_TEST_CHILD_SAYS", ""))
sys.exit(int(os.environ.get("KP_TEST_CHILD_EXIT", "0")))
"""
ROOT = str(Path(child.__file__).resolve().parents[3])


def stand_in() -> list[str]:
    return [sys.executable, "-c", STAND_IN]


def no_executable() -> list[str]:
    raise CannotStart("sys.executable is empty")


class Recorded:
    """``build_variant`` (the in-thread build: here a load, the child having compiled), noting
    its thread and whether the child had run by then."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.runs: list[tuple[str, bool]] = []

    def __call__(self, s: Any, variant: Variant) -> None:
        self.runs.append((threading.current_thread().name, self.out.exists()))
        build_variant(s, variant)


def build_once(sampler: Any, rows: int = 4) -> tuple[Variant, type[Exception] | None]:
    """A call that starts the variant's background build; wait for it to end; then a second
    call: None where it ran on the kernels, else what it raised."""
    logits, k = torch.randn(rows, 300), torch.full((rows,), 5)
    variant = sampler.variant(logits, k, None)
    with pytest.raises(Compiling):
        sampler.nonblocking(logits, k, None)
    assert sampler.builds.wait(variant, timeout=120)
    try:
        ids = sampler.nonblocking(logits, k, None)
    except BuildFailed:
        return variant, BuildFailed
    assert ids.shape == (rows,)
    return variant, None


CPU_CHILD = frozenset({"cpu"})


@pytest.mark.parametrize(
    ("child_of", "env", "spawned", "loaded_after_child", "failed"),
    [
        pytest.param(
            lambda: Child(CPU_CHILD, stand_in), {}, True, True, None, id="child-then-load"
        ),
        pytest.param(
            lambda: Child(CPU_CHILD, stand_in),
            {"KP_TEST_CHILD_EXIT": "1", "KP_TEST_CHILD_SAYS": "PassManager::run failed"},
            True,
            None,
            "its build process failed (exit 1): PassManager::run failed",
            id="child-fails",
        ),
        pytest.param(
            lambda: Child(CPU_CHILD, stand_in, seconds=0.5),
            {"KP_TEST_CHILD_HANGS": "1"},
            True,
            None,
            "its build process did not end within 0.5 s (killed)",
            id="child-past-its-seconds-killed",
        ),
        pytest.param(
            lambda: Child(CPU_CHILD, no_executable), {}, False, False, None, id="no-executable"
        ),
        pytest.param(
            lambda: Child(CPU_CHILD, lambda: ["/nonexistent/kp-python"]),
            {},
            False,
            False,
            None,
            id="exec-refused-builds-in-thread",
        ),
        pytest.param(Child, {}, False, False, None, id="cpu-not-a-child-device"),
        pytest.param(lambda: None, {}, False, False, None, id="no-child"),
    ],
)
def test_a_background_build_compiles_in_a_child_then_loads_in_its_thread(
    child_of: Callable[[], Child | None],
    env: dict[str, str],
    spawned: bool,
    loaded_after_child: bool | None,
    failed: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child gets the variant's task, this process's Triton cache and this kernelpolicy
    first on its path; the build's thread then loads the variant (the call after runs on the
    kernels). A child that fails or outlasts its seconds fails the variant (BuildFailed, no
    build in the thread); where no process can be started, or the child does not take the
    variant, the thread builds it as before."""
    out = tmp_path / "child.json"
    monkeypatch.setenv("KP_TEST_CHILD_OUT", str(out))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    build = Recorded(out)
    sample = TritonSampler(small=True)
    sample.options.update(build=build, child=child_of(), cache=lambda: None)
    variant, after = build_once(sample.sampler)
    assert out.exists() is spawned
    if spawned:
        given = json.loads(out.read_text())
        assert given["argv"] == [json.dumps(task_of(sample.sampler.tuning, variant))]
        assert given["cache"] == str(tmp_path / "triton")
        assert given["path"].split(os.pathsep)[0] == ROOT
    if failed is not None:
        assert after is BuildFailed
        assert build.runs == []
        assert failed in sample.sampler.builds._failed[variant]
        return
    assert after is None
    assert build.runs == [("kernelpolicy build: triton sampler", bool(loaded_after_child))]


def test_a_sampler_with_a_tests_kernels_never_builds_in_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child cannot have a test's spy kernels: such a sampler compiles in its thread."""
    from kernelpolicy.kernels.sampling_triton import Kernels

    out = tmp_path / "child.json"
    monkeypatch.setenv("KP_TEST_CHILD_OUT", str(out))
    sample = TritonSampler(small=True)
    sample.kernels["group_kernel"] = Kernels().group_kernel.fn  # another object: not the package's
    build = Recorded(out)
    sample.options.update(build=build, child=Child(CPU_CHILD, stand_in), cache=lambda: None)
    variant = sample.sampler.variant(torch.randn(4, 300), torch.full((4,), 5), None)
    sample.sampler.builds._in_background(variant)
    assert not out.exists()
    assert build.runs == [(threading.current_thread().name, False)]


TUNINGS = [
    pytest.param(Tuning(), {}, id="default-tuning"),
    pytest.param(Tuning().replace(group=4, cap=256), {"group": 4, "cap": 256}, id="changed"),
]


@pytest.mark.parametrize(("tuning", "changed"), TUNINGS)
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(
            Variant("cuda:0", torch.bfloat16, torch.int32, (True, True, False), 128256, 32),
            id="bf16-int32-k-p",
        ),
        pytest.param(
            Variant("cuda:3", torch.float32, None, (False, True, True), 151936, 32),
            id="f32-p-only-wide",
        ),
    ],
)
def test_a_task_reads_back_as_its_variant_and_tuning(
    tuning: Tuning, changed: dict[str, int], variant: Variant
) -> None:
    """The child's task is JSON that names the variant and the tuning's changes; it reads
    back as the same variant and tuning."""
    task = json.loads(json.dumps(task_of(tuning, variant)))
    assert task["tuning"] == changed
    assert variant_of(task) == (tuning, variant)


@pytest.mark.parametrize("fails", [pytest.param(False, id="built"), pytest.param(True, id="fails")])
def test_the_child_builds_the_task_s_variant_with_its_tuning(fails: bool) -> None:
    """The child builds the task's variant in its own thread (warm: no grandchild) with a
    sampler of the task's tuning, and says why when that fails."""
    from kernelpolicy.kernels.sampling_triton import Sampler
    from tests.helpers import SMALL_TRITON_TUNING

    tuning = Tuning().replace(**SMALL_TRITON_TUNING)
    variant = Variant("cpu", torch.float32, torch.int64, (True, False, False), 300, 4)
    built: list[tuple[Tuning, Variant, str]] = []

    def fake(s: Any, v: Variant) -> None:
        built.append((s.tuning, v, threading.current_thread().name))
        if fails:
            raise RuntimeError("planted")

    def make(t: Tuning) -> Sampler:
        return Sampler(t, build=fake, child=Child(CPU_CHILD, stand_in), cache=lambda: None)

    said = child_main.build(task_of(tuning, variant), make)
    assert built == [(tuning, variant, threading.current_thread().name)]
    assert said == ("RuntimeError: planted" if fails else None)


def test_the_child_builds_a_real_variant() -> None:
    """The child's own entry (its main, here in this process, interpreted) builds the variant
    with the package's sampler and exits 0."""
    from tests.helpers import SMALL_TRITON_TUNING

    tuning = Tuning().replace(**SMALL_TRITON_TUNING)
    variant = Variant("cpu", torch.float32, torch.int64, (True, False, False), 300, 4)
    assert child_main.main(["child", json.dumps(task_of(tuning, variant))]) == 0


def test_the_child_module_runs_as_the_parent_starts_it() -> None:
    """``python -m`` on the module the parent names (child.MODULE), as a real process,
    interpreted: exit 0; a task it cannot read: exit non-zero, said on stderr."""
    import subprocess

    from tests.helpers import SMALL_TRITON_TUNING

    tuning = Tuning().replace(**SMALL_TRITON_TUNING)
    variant = Variant("cpu", torch.float32, torch.int64, (True, False, False), 300, 4)
    env = os.environ | {"TRITON_INTERPRET": "1", "PYTHONPATH": ROOT}
    for task, ok in ((json.dumps(task_of(tuning, variant)), True), ('{"x": 1}', False)):
        done = subprocess.run(
            [sys.executable, "-m", child.MODULE, task], env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert (done.returncode == 0) is ok, done.stderr[-2000:]


def test_the_child_may_take_a_build_as_long_as_a_background_build() -> None:
    """Killed past MAX_BUILD_SECONDS, as a background build is failed past it."""
    assert Child().seconds == MAX_BUILD_SECONDS
