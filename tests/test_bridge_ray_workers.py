"""The plugin's variables reach vLLM's Ray workers on other nodes: vLLM copies to its actors only
its own variables, a few prefixes and the names VLLM_RAY_EXTRA_ENV_VARS_TO_COPY lists
(vllm/ray/ray_env.py get_env_vars_to_copy, 0.33.0 :36-48, :81-96), so where the plugin is turned
on the bridge adds KERNELPOLICY_VLLM_PLUGIN and KERNELPOLICY_VLLM_PLUGIN_INPUTS to that list,
merged with the operator's (the fourth audit's finding 7)."""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.bridge.plugin import ENABLE, INPUTS, merged_names
from kernelpolicy.bridge.process import child_environment
from kernelpolicy.bridge.release import MatchedRelease
from tests.helpers import resolve_on

RAY = "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY"
OURS = f"{ENABLE},{INPUTS}"


@pytest.mark.parametrize(
    ("version", "env", "sent"),
    [
        pytest.param("0.33.0", {}, OURS, id="0.33.0-plugin-names-its-variables"),
        pytest.param("0.32.1", {}, OURS, id="0.32.1-between-known-releases"),
        pytest.param("0.33.0", {RAY: "MY_VAR, HOME"}, f"MY_VAR,HOME,{OURS}",
                     id="merged-with-the-operators-list"),
        pytest.param("0.33.0", {RAY: f"{INPUTS},{ENABLE}"}, f"{INPUTS},{ENABLE}",
                     id="a-list-naming-both-is-kept-as-given"),
        pytest.param("0.31.0", {}, None, id="0.31.0-no-plugin-nothing-sent"),
        pytest.param("0.33.0", {ENABLE: "0"}, None, id="plugin-turned-off-nothing-sent"),
    ],
)  # fmt: skip
def test_the_ray_list_names_the_plugins_variables(
    version: str, env: dict[str, str], sent: str | None
) -> None:
    """H100, vLLM: the list is sent where the plugin is told, with the operator's names first;
    extending the operator's list is not overwriting it (no 'kept' warning)."""
    settings = engine_settings(resolve_on("h100-sxm", **env), "vllm", env, engine_version=version)
    assert settings.env.get(RAY) == sent, settings.env
    assert RAY not in settings.kept
    assert not [w for w in settings.warnings if w.startswith(RAY)]


@pytest.mark.parametrize(
    ("version", "reads"),
    [
        pytest.param("0.16.0", False, id="0.16.0-no-such-variable"),
        pytest.param("0.17.1", True, id="0.17.1-reads-it"),
        pytest.param("0.32.1", True, id="between-known-releases"),
        pytest.param("9.0.0", True, id="newer-than-the-tables"),
    ],
)
def test_which_releases_read_the_ray_list(version: str, reads: bool) -> None:
    """From the knob tables: vllm/ray/ray_env.py reads it from 0.17.1."""
    assert MatchedRelease("vllm", version).reads(RAY) is reads


def test_exec_merges_the_list_with_the_child_environment() -> None:
    """exec's child gets the operator's list with the plugin's names added, not replaced."""
    settings = engine_settings(resolve_on("h100-sxm"), "vllm", {}, engine_version="0.33.0")
    child = child_environment({RAY: "MY_VAR"}, settings)
    assert child[RAY] == f"MY_VAR,{OURS}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", "A,B", id="empty"),
        pytest.param(" X ,, Y", "X,Y,A,B", id="spaces-and-empty-items"),
        pytest.param("B, A", "B, A", id="already-named"),
        pytest.param("A", "A,B", id="one-missing"),
    ],
)
def test_merged_names(value: str, expected: str) -> None:
    assert merged_names(value, ("A", "B")) == expected
