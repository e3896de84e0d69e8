"""The knob tables after the fourth audit: the releases it read are in them (vLLM 0.8.5.post1 and
0.9.2, SGLang 0.4.5-0.4.9.post6), and SGLang's boolean variables read as its own parser reads
them, where 0.5.17-0.5.23 stored the repr of a stub (their ``srt.utils`` does not import under
the probe's stubs; the probe now runs ``get_bool_env_var``'s definition alone)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from tests.knob_helpers import table


@pytest.mark.parametrize(
    ("engine", "release"),
    [
        pytest.param("vllm", "0.8.5.post1", id="vllm-0.8.5.post1"),
        pytest.param("vllm", "0.9.2", id="vllm-0.9.2"),
        pytest.param("sglang", "0.4.5", id="sglang-0.4.5"),
        pytest.param("sglang", "0.4.6.post5", id="sglang-0.4.6.post5"),
        pytest.param("sglang", "0.4.9.post6", id="sglang-0.4.9.post6"),
    ],
)
def test_the_audited_releases_are_in_the_tables(engine: str, release: str) -> None:
    assert release in table(engine).releases


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_value_is_a_stubs_repr(engine: str) -> None:
    """What a release's parser returned is never the probe's own placeholder."""
    text = resources.files("kernelpolicy.knobs").joinpath(f"{engine}.json").read_text()
    assert "engine_stubs" not in text


@pytest.mark.parametrize("release", ["0.5.16", "0.5.17", "0.5.18", "0.5.23"])
def test_sglang_kill_switch_reads_as_a_boolean(release: str) -> None:
    """SGLANG_DISABLE_AITER_GREEDY_SAMPLE through get_bool_env_var: "1"/"true" on, else off."""
    knob = table("sglang").env("SGLANG_DISABLE_AITER_GREEDY_SAMPLE", release)
    assert knob is not None
    assert knob.parse is not None
    assert {v: knob.parse[v] for v in ("1", "true", "0", "x", "unset")} == {
        "1": True, "true": True, "0": False, "x": False, "unset": False,
    }  # fmt: skip
    assert json.dumps(knob.parse).count("repr") == 0
