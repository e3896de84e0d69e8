"""The sixth audit's finding on what only ``select()`` applies per call (finding 9): SGLang
0.5.13 and later run aiter's greedy_sample for every all-greedy batch once SGLANG_USE_AITER is
on (layers/sampler.py 0.5.13 :45-54, :120-124; 0.5.23 :63-74, :210-214), so the greedy aiter
candidate's condition (on gfx950, not for vocab sizes under 16384) and its clamp_token_ids
guard never reach SGLang, and the bridge reported only conditions on ``batch``. It now warns
where an engine is told an implementation for every call whose condition reads other call
variables (the platform's facts inlined) or that carries an output guard, except the variables
the engine checks itself (``bridge.per_call.ENGINE_CHECKS``, from the releases' code) and where
kernelpolicy's plugin carries the choice per call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status, engine_settings
from kernelpolicy.engine import resolve_policies
from kernelpolicy.policy import load_policies
from tests.bridge_audit_helpers import Case, told6
from tests.helpers import fixture

EVERY_CALL = "for every call, but only resolve().select()"
GREEDY = "sampler.greedy"
SG_AITER = {"SGLANG_USE_AITER": "1"}


def said(case: Case) -> str:
    """The warnings about the case's feature, joined."""
    settings = told6(case)
    return " ".join(w for f, w in settings.feature_warnings if f == case.feature)


@pytest.mark.parametrize(
    ("case", "words", "not_words"),
    [
        pytest.param(
            Case("mi355x", "sglang", "0.5.23", env=SG_AITER, feature=GREEDY),
            ("sglang is told aiter " + EVERY_CALL, "condition on vocab_size", "clamp_token_ids"),
            (),
            id="sglang-0.5.23-mi355x-greedy-condition-and-guard",
        ),
        pytest.param(
            Case("mi325x", "sglang", "0.5.13", env=SG_AITER, feature=GREEDY),
            ("its output guard clamp_token_ids",),
            ("vocab_size",),  # on gfx942 the condition reads no call variable
            id="sglang-0.5.13-mi325x-greedy-guard-only",
        ),
        # unchanged: vLLM and SGLang check the FlashInfer sampler's conditions themselves
        pytest.param(
            Case("h100-sxm", "vllm", "0.21.0", feature="sampler.top_k_top_p"),
            (), (EVERY_CALL,), id="vllm-0.21.0-h100-flashinfer-checked-by-vllm",
        ),
        pytest.param(
            Case("h100-sxm", "sglang", "0.5.23", feature="sampler.top_k_top_p"),
            (), (EVERY_CALL,), id="sglang-0.5.23-h100-flashinfer-checked-by-sglang",
        ),
        # unchanged: SGLang before 0.5.13 has no aiter greedy kernel (inexpressible)
        pytest.param(
            Case("mi355x", "sglang", "0.5.12", env=SG_AITER, feature=GREEDY),
            (), (EVERY_CALL,), id="sglang-0.5.12-mi355x-no-aiter-greedy",
        ),
    ],
)  # fmt: skip
def test_what_only_select_applies_is_said_6(
    case: Case, words: tuple[str, ...], not_words: tuple[str, ...]
) -> None:
    """Where an engine runs a candidate for every call, the warnings name what only select()
    applies to it; none where the engine checks the same itself."""
    text = said(case)
    assert all(w in text for w in words), text
    assert not any(w in text for w in not_words), text
    assert told6(case).decisions[case.feature].status is not Status.ERROR


POLICY = """schema = "kernelpolicy.policy/v1"

[features."demo.kernel"]
description = "a kernel chosen per call"
fallback = "plain"
in_process = false
context = { tokens = "int", tag = "string", batch = "int" }

[[features."demo.kernel".candidates]]
impl = "fast"
vendor = "nvidia"
when = 'WHEN'
engines.vllm = [RULE]

[[features."demo.kernel".candidates]]
impl = "plain"
engines.vllm = [{}]
"""


@pytest.mark.parametrize(
    ("when", "rule", "words"),
    [
        pytest.param(
            'tokens <= 80 && tag != "x"', '{ env = { VLLM_USE_DEEP_GEMM = "1" } }',
            "condition on tag, tokens", id="told-two-variables",
        ),
        pytest.param("tokens <= 80", "{}", "condition on tokens", id="engine-default"),
        pytest.param(
            'arch == "sm_90" || tokens <= 80', "{}", None, id="folded-away-on-sm90",
        ),
        pytest.param("batch <= 64", "{}", None, id="batch-is-the-per-batch-note"),
        pytest.param(
            "tokens <= 80", '{ inexpressible = "vLLM cannot run it" }', None,
            id="inexpressible-explains-itself",
        ),
    ],
)  # fmt: skip
def test_a_told_candidates_call_conditions_are_said(
    tmp_path: Path, when: str, rule: str, words: str | None
) -> None:
    """A candidate the engine is told for every call whose condition reads call variables
    other than batch (after the H100's facts are inlined) gets a warning naming them; none
    for batch alone, a condition the facts decide, or an inexpressible rule."""
    path = tmp_path / "p.toml"
    path.write_text(POLICY.replace("WHEN", when).replace("RULE", rule))
    resolution = resolve_policies(fixture("h100-sxm"), {}, load_policies([path]))
    settings = engine_settings(resolution, "vllm", {}, engine_version="0.10.2")
    text = " ".join(w for f, w in settings.feature_warnings if f == "demo.kernel")
    if words is None:
        assert EVERY_CALL not in text, text
    else:
        assert f"vllm is told fast {EVERY_CALL}" in text, text
        assert words in text, text
