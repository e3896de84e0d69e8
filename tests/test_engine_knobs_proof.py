"""kernelpolicy check's proof of a policy's engine rules against the knob tables, on small
policies: each kind of disagreement is found and named, as docs/engines.md shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.check.bridge_proof import prove_bridge_rules
from tests.helpers import ROOT, resolve_on

# -- check's proof, on small policies ---------------------------------------------------------

POLICY = """schema = "kernelpolicy.policy/v1"

[features."demo.kernel"]
description = "A kernel the engine runs"
fallback = "plain"
in_process = false

[[features."demo.kernel".candidates]]
impl = "fast"
vendor = "amd"
engines.vllm = [RULES]

[[features."demo.kernel".candidates]]
impl = "plain"
engines.vllm = [{}]
"""


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        pytest.param(
            '{ env = { VLLM_ROCM_USE_AITER_PAGED_ATTN = "1" } }',
            "vllm 0.14.0, ..., 0.25.1 (21 releases): sets VLLM_ROCM_USE_AITER_PAGED_ATTN, which "
            "this release defines but reads nowhere",
            id="defined-but-unread",
        ),
        pytest.param(
            '{ versions = ">=0.10", env = { VLLM_NOT_A_KNOB = "1" } }',
            "sets VLLM_NOT_A_KNOB, which this release does not define",
            id="undefined-variable",
        ),
        pytest.param(
            '{ versions = ">=0.10", env = { VLLM_USE_FLASHINFER_SAMPLER = "true" } }',
            "VLLM_USE_FLASHINFER_SAMPLER=true: its parser refuses the value (ValueError)",
            id="parser-refuses",
        ),
        pytest.param(
            '{ versions = ">=0.13", flags = ["--attention-backend", "NOPE"] }, '
            '{ versions = "<0.13" }',
            "--attention-backend NOPE: not among its choices",
            id="not-in-the-enum",
        ),
        pytest.param(
            '{ versions = ">=0.10", flags = ["--moe-backend", "triton"] }',
            "--moe-backend: this release has no such option",
            id="option-too-early",
        ),
        pytest.param(
            '{ versions = ">=0.12", facts = { aiter_sampler = true } }',
            "vllm 0.7.3, ..., 0.11.2 (9 releases): no rule's versions cover it",
            id="uncovered-releases",
        ),
        pytest.param(
            '{ versions = ">=0.11", facts = { aiter_sampler = true } }, { versions = "<0.12" }',
            "vllm 0.11.0, 0.11.1, 0.11.2: the rule expects aiter_sampler = True; it has False",
            id="fact-does-not-hold",
        ),
        pytest.param(
            '{ versions = ">=0.10" }, { versions = ">=0.30" }, { versions = "<0.10" }',
            "covered by both rule 1 and rule 2",
            id="doubly-covered",
        ),
        pytest.param(
            '{ versions = ">=0.10", facts = { no_such_fact = true } }, { versions = "<0.10" }',
            "vllm rule 1: fact 'no_such_fact' is not in the knob tables (aiter_allreduce_rms,",
            id="unknown-fact",
        ),
    ],
)
def test_check_proves_rules_against_the_releases(tmp_path: Path, rules: str, message: str) -> None:
    """Each kind of disagreement is found and named with its rule, releases and knob."""
    from kernelpolicy.policy import load_policies

    path = tmp_path / "p.toml"
    path.write_text(POLICY.replace("RULES", rules))
    issues = [str(i) for i in prove_bridge_rules(load_policies([path]))]
    assert any(message in i for i in issues), issues


def test_the_docs_show_what_check_and_env_print(tmp_path: Path) -> None:
    """docs/engines.md's two example lines are the ones the code prints."""
    docs = (ROOT / "docs/engines.md").read_text()
    from kernelpolicy.policy import load_policies

    path = tmp_path / "p.toml"
    path.write_text(POLICY.replace("RULES", '{ env = { VLLM_ROCM_USE_AITER_PAGED_ATTN = "1" } }'))
    issues = [str(i) for i in prove_bridge_rules(load_policies([path]))]
    (issue,) = [i for i in issues if "reads nowhere" in i]
    assert issue.replace(str(path), "p.toml") in docs
    env = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    settings = engine_settings(resolve_on("h100-sxm", **env), "vllm", env, engine_version="0.26.0")
    (warning,) = [w for w in settings.warnings if w.startswith("VLLM_ATTENTION_BACKEND")]
    assert f"kernelpolicy: warning: {warning}" in docs
