"""No call waits on a compiler (kernelpolicy/kernels/builds.py, engine/runtime.py), through a
Resolution: a call whose kernel variant is not built yet is served by the next ready candidate
while the variant builds in a background thread, and counted; later calls switch to the kernel
once built; a build that fails sends that variant's calls to the fallback for the process;
FlashInfer's JIT build is made the same way; a variant in the kernel cache's record runs its
first call on Triton. The builds are fakes that block on an Event the test sets: no sleeps, no
timings."""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.engine.dispatch import Routed
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.kernels import adapters
from kernelpolicy.kernels.builds import Builds, BuildStats
from kernelpolicy.kernels.sampling_triton import Kernels, Variant
from kernelpolicy.policy import load_policy_text
from tests.build_helpers import SlowBuild
from tests.helpers import TritonSampler, fixture

FEATURE = "sampler.top_k_top_p"
ENTRY: object = None
"""The sampler a test's Resolution loads (its policy's entry point names it)."""


# Through a Resolution, with the Triton sampler (its build a fake, its kernels interpreted).


def policy(dtypes: bool) -> str:
    routed = 'dtypes = ["float32", "bfloat16"]\n' if dtypes else ""
    return f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "the Triton sampler, built in the background"
fallback = "torch"
{routed}[[features."{FEATURE}".candidates]]
impl = "triton"
entry = "{__name__}:ENTRY"
[[features."{FEATURE}".candidates]]
impl = "torch"
"""


@pytest.fixture
def launches() -> list[int]:
    return []


def sampler_with(build: SlowBuild, launches: list[int], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A small Triton sampler whose builds are ``build`` and whose group pass is counted."""
    kernel = Kernels().group_kernel

    class Count:
        def __getitem__(self, grid: tuple[int, ...]) -> object:
            launches.append(grid[0])
            return kernel[grid]

    sample = TritonSampler(small=True)
    sample.kernels["group_kernel"] = Count()
    sample.options["build"] = build
    monkeypatch.setattr(sys.modules[__name__], "ENTRY", sample.sampler)
    return sample.sampler


def call(kernel: Any, rows: int = 4) -> None:
    logits = torch.randn(rows, 300)
    ids = kernel(logits, torch.full((rows,), 5), None)
    assert ids.shape == (rows,)
    assert bool(((ids >= 0) & (ids < 300)).all())


@pytest.mark.parametrize("routed", [False, True], ids=["unrouted", "routed-by-dtype"])
def test_calls_go_to_torch_while_the_variant_builds_then_switch(
    routed: bool, launches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls before the build ends are served by torch and counted, runtime_fallbacks and the
    reasons say "compiling"; once it is built, calls run the Triton kernels, and say so."""
    build = SlowBuild()
    sampler = sampler_with(build, launches, monkeypatch)
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(routed)))
    kernel = resolution.impl(FEATURE)
    assert isinstance(kernel, Routed) is routed
    for _ in range(3):
        call(kernel)
    assert launches == []  # torch served them
    assert resolution.compiling_calls == {FEATURE: 3}
    assert build.began.wait(60)  # the build's thread has started
    (variant,) = build.started
    assert isinstance(variant, Variant)
    note = resolution.runtime_fallbacks[FEATURE]
    assert note == (
        f"triton is compiling {variant.describe()} in the background; its calls go to the "
        "next ready candidate until it is built"
    )
    assert f"compiling: {note}" in resolution.decision(FEATURE).reasons
    build.release.set()
    assert sampler.builds.wait(variant, timeout=60)
    call(kernel)
    assert launches == [4]  # the Triton kernels, from now on
    assert resolution.compiling_calls == {FEATURE: 3}
    assert f"triton built {variant.describe()}" in resolution.runtime_fallbacks[FEATURE]
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.reason, decision.warnings) == ("triton", Reason.PREFERRED, ())


@pytest.mark.parametrize("routed", [False, True], ids=["unrouted", "routed-by-dtype"])
def test_a_failed_build_sends_its_calls_to_the_fallback_for_good(
    routed: bool, launches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build fails: the next call meets the failure, torch serves it and every later one
    (the feature falls back, or, routed by dtype, float32 leaves triton), recorded as any
    call-time failure."""
    build = SlowBuild(fails=True)
    sampler = sampler_with(build, launches, monkeypatch)
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(routed)))
    kernel = resolution.impl(FEATURE)
    call(kernel)
    assert build.began.wait(60)  # the build's thread has started
    (variant,) = build.started
    build.release.set()
    assert sampler.builds.wait(variant, timeout=60)
    for _ in range(2):
        call(kernel)
    assert launches == []
    assert len(build.started) == 1  # never built again
    note = resolution.runtime_fallbacks[FEATURE]
    assert "BuildFailed when called: triton sampler: " in note
    assert "failed to build: RuntimeError: PassManager::run failed (planted)" in note
    decision = resolution.decision(FEATURE)
    if routed:
        assert resolution.select(FEATURE, dtype="float32") == "torch"
        assert resolution.select(FEATURE, dtype="bfloat16") == "triton"
    else:
        assert (decision.impl, decision.reason) == ("torch", Reason.FALLBACK)


# FlashInfer: its first call of a function is its JIT build, made in the background.

FLASHINFER_POLICY = f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "FlashInfer, its JIT build in the background"
fallback = "torch"
[[features."{FEATURE}".candidates]]
impl = "flashinfer"
[[features."{FEATURE}".candidates]]
impl = "torch"
"""


@pytest.fixture
def slow_flashinfer(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SlowBuild, list[str]]]:
    """A stand-in ``flashinfer.sampling`` whose first call of each function blocks until the
    test releases it (its JIT build), and a fresh record of FlashInfer's builds."""
    build, calls = SlowBuild(), []
    built: set[str] = set()

    def function(name: str) -> Any:
        def run(first: torch.Tensor, *args: Any, deterministic: bool = False) -> torch.Tensor:
            if name not in built:
                build(name)
                built.add(name)
            else:
                calls.append(name)
            return first.argmax(dim=-1).to(torch.int32)

        return run

    sampling = types.ModuleType("flashinfer.sampling")
    for name in ("top_p_sampling_from_probs", "top_k_sampling_from_probs"):
        setattr(sampling, name, function(name))
    sampling.top_k_top_p_sampling_from_logits = function("top_k_top_p_sampling_from_logits")  # type: ignore[attr-defined]
    package = types.ModuleType("flashinfer")
    package.sampling = sampling  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.sampling", sampling)
    fresh: Builds[adapters.FlashInferVariant] = Builds(
        "flashinfer", adapters._build_flashinfer, describe=adapters.describe_flashinfer
    )
    monkeypatch.setattr(adapters, "FLASHINFER_BUILDS", fresh)
    yield build, calls
    build.release.set()


def test_flashinfer_builds_in_the_background(
    slow_flashinfer: tuple[SlowBuild, list[str]],
) -> None:
    """FlashInfer's first call of top_k_sampling_from_probs is its build: calls meanwhile go
    to torch and are counted; once it returns, calls reach FlashInfer."""
    build, calls = slow_flashinfer
    resolution: Resolution = resolve_policies(
        fixture("cpu"), {}, load_policy_text(FLASHINFER_POLICY)
    )
    kernel = resolution.impl(FEATURE)
    for _ in range(2):
        call(kernel)
    assert build.began.wait(60)  # the build runs in a thread: wait for it to start, not a time
    assert build.started == ["top_k_sampling_from_probs"]
    assert calls == []
    assert resolution.compiling_calls == {FEATURE: 2}
    assert (
        "flashinfer is compiling top_k_sampling_from_probs for float32 on cpu"
        in (resolution.runtime_fallbacks[FEATURE])
    )
    build.release.set()
    assert adapters.FLASHINFER_BUILDS.wait(("top_k_sampling_from_probs", "float32", "cpu"), 60)
    call(kernel)
    assert calls == ["top_k_sampling_from_probs"]
    assert resolution.decision(FEATURE).impl == "flashinfer"


def _cached_sampler(build: Any, cache: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A small Triton sampler (the package's kernels, interpreted) that finds its kernel cache's
    record with ``cache``."""
    sample = TritonSampler(small=True)
    sample.options.update(build=build, cache=cache)
    monkeypatch.setattr(sys.modules[__name__], "ENTRY", sample.sampler)
    return sample.sampler


@pytest.mark.parametrize(
    ("recorded", "trusted"),
    [
        pytest.param(True, True, id="in-cache"),
        pytest.param(False, True, id="not-in-cache"),
        pytest.param(True, False, id="in-an-untrusted-cache"),
    ],
)
def test_a_variant_warm_built_runs_the_first_call_on_triton(
    recorded: bool,
    trusted: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """With the call's variant in the kernel cache's record, the first call loads it in the
    calling thread and runs on Triton: no call served elsewhere, nothing said; without it, or
    with it in a cache that is not trusted (ignored, said in one line), the call goes to torch
    while the variant builds in the background."""
    from kernelpolicy.kernel_cache import BuiltRecord, prepare_kernel_cache
    from kernelpolicy.kernels.cache_lookup import kernel_cache, looking_for_kernel_cache
    from kernelpolicy.kernels.sampling_triton.cached import describe

    build = SlowBuild()
    if recorded and trusted:
        build.release.set()  # built in the calling thread: it must not wait
    threads: list[str] = []
    root = prepare_kernel_cache(tmp_path)
    exec_gave = {"TRITON_CACHE_DIR": str(root / "triton")}  # the worker's environment
    with looking_for_kernel_cache(exec_gave):  # looked for afresh, and forgotten after
        monkeypatch.setattr(sys.modules[__name__], "ENTRY", None)

        def recorded_build(s: Any, v: Any) -> None:
            threads.append(threading.current_thread().name)
            build(s, v)

        sampler = _cached_sampler(recorded_build, kernel_cache, monkeypatch)
        logits, k = torch.randn(4, 300), torch.full((4,), 5)
        variant = sampler.variant(logits, k, None)
        if recorded:
            BuiltRecord(root).add(describe(sampler.tuning, variant))
        if not trusted:
            (root / "flashinfer").chmod(0o770)
        resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(False)))
        kernel = resolution.impl(FEATURE)
        kernel_cache()  # looked for (a call that finds it not looked for yet is served elsewhere)
        ids = kernel(logits, k, None)
        assert ids.shape == (4,)
        build.release.set()
        assert sampler.builds.wait(variant, timeout=60)
    assert build.started == [variant]
    said = capfd.readouterr().err.splitlines()
    if recorded and trusted:
        assert threads == ["MainThread"]
        assert resolution.compiling_calls == {}
        assert FEATURE not in resolution.runtime_fallbacks
        assert sampler.builds.stats() == BuildStats(1, 0, 0, 0, 1)
        assert said == []
        return
    assert threads == ["kernelpolicy build: triton sampler"]
    assert resolution.compiling_calls == {FEATURE: 1}
    if trusted:
        assert said == []
        assert BuiltRecord(root).has(describe(sampler.tuning, variant))  # the next loads it
    else:
        assert said == [
            f"kernelpolicy: warning: kernel cache not used: {root / 'flashinfer'}: writable by "
            "group or others (mode 0770)"
        ]
