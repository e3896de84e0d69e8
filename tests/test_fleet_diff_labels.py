"""kernelpolicy diff reads kubectl nodes by their labels: a node rebuilt from its labels decides
as its snapshot does (every fact a decision reads, an aiter dev build, the forces it decides
with) and its engine settings are the same."""

from __future__ import annotations

import json

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.engine import resolve_policies
from kernelpolicy.fleet import platform_from_labels
from kernelpolicy.labels import node_labels, render_nfd
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import load_policy_text
from tests.fleet_helpers import NAMES, staged_policy
from tests.helpers import FIXTURES, bundled


@pytest.mark.parametrize("switches", [
    pytest.param({}, id="plain"),
    pytest.param({"VLLM_ROCM_USE_AITER": "1"}, id="aiter-on"),  # amd-aiter's version is read
])  # fmt: skip
@pytest.mark.parametrize("name", NAMES)
def test_labels_carry_every_fact_a_decision_reads(name: str, switches: dict[str, str]) -> None:
    """A node rebuilt from its labels gets the same decisions and engine settings as its
    snapshot, and its labels are valid Kubernetes labels."""
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / f"{name}.json").read_text()), "machine_id": "ab" * 16}
    )
    env = {**platform.env, "VLLM_USE_FLASHINFER_SAMPLER": "0", **switches}
    original = resolve_policies(platform, env, bundled())
    labels = node_labels(original)
    render_nfd(labels)
    rebuilt = platform_from_labels(labels)
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, bundled())
    assert {f: (d.impl, d.error_code) for f, d in again.decisions.items()} == {
        f: (d.impl, d.error_code) for f, d in original.decisions.items()
    }
    assert rebuilt.identity == platform.identity
    for engine in ("vllm", "sglang"):
        before, after = (
            engine_settings(original, engine, env),
            engine_settings(again, engine, rebuilt.env),
        )
        assert (after.env, after.flags) == (before.env, before.flags)


def test_an_aiter_dev_build_decides_the_same_from_its_labels() -> None:
    """The MI355X fixture's amd-aiter 0.1.16.post3.dev0+g1a2b3c4 with aiter on: rebuilt from
    its labels (what ``diff --platforms nodes.json`` reads), it keeps the version and aiter."""
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / "mi355x.json").read_text()), "machine_id": "ab" * 16}
    )
    original = resolve_policies(platform, {"VLLM_ROCM_USE_AITER": "1"}, bundled())
    rebuilt = platform_from_labels(node_labels(original))
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, bundled())
    assert rebuilt.libraries["amd-aiter"] == "0.1.16.post3.dev0+g1a2b3c4"
    decided = (
        original.decision("sampler.top_k_top_p").impl,
        again.decision("sampler.top_k_top_p").impl,
    )
    assert decided == ("aiter", "aiter")


STAGED = staged_policy(10, then_slownv=True)


@pytest.mark.parametrize(
    ("overrides", "env", "impl"),
    [
        pytest.param({}, {}, "slownv", id="none"),
        pytest.param({"fleet.attn": "fastnv"}, {}, "fastnv", id="settings-override"),
        pytest.param({}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"}, "fastnv", id="variable"),
        pytest.param({"fleet.attn": "current"}, {"KERNELPOLICY_FORCE_FLEET_ATTN": "fastnv"},
                     "fastnv", id="the-variable-wins"),
        pytest.param({"fleet.attn": "nope"}, {}, None, id="unknown-override"),
        pytest.param({"no.such": "x"}, {}, "slownv", id="override-of-no-feature"),
    ],
)  # fmt: skip
def test_labels_carry_the_forces_a_node_decides_with(
    overrides: dict[str, str], env: dict[str, str], impl: str | None
) -> None:
    """A node forced through settings (KERNELPOLICY_OVERRIDES) or a variable: rebuilt from its
    labels, it decides as it did (a settings override is labelled as its force variable)."""
    policies = load_policy_text(STAGED)
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / "h100-sxm.json").read_text()), "machine_id": "cd" * 16}
    )
    original = resolve_policies(platform, env, policies, overrides=overrides)
    labels = node_labels(original)
    rebuilt = platform_from_labels(labels)
    assert rebuilt is not None
    again = resolve_policies(rebuilt, rebuilt.env, policies)
    decided = [(r.decision("fleet.attn").impl, r.decision("fleet.attn").error_code)
               for r in (original, again)]  # fmt: skip
    assert decided[0] == decided[1]
    assert decided[0][0] == impl
    assert not any("NO_SUCH" in key for key in labels)
