"""The policy language for engines: rules validated at load with located errors, and linted."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.check import lint
from kernelpolicy.errors import PolicyError
from kernelpolicy.limits import MAX_ENGINE_RULE_WORDS, MAX_ENV_VALUE_CHARS
from kernelpolicy.policy import load_policies

GOOD = """schema = "kernelpolicy.policy/v1"

[features."sampler.top_k_top_p"]
description = "Top-k/top-p sampling"
fallback = "torch"

[[features."sampler.top_k_top_p".candidates]]
impl = "flashinfer"
vendor = "nvidia"
switches = [{ env = "VLLM_USE_FLASHINFER_SAMPLER", unset = "auto", true = "on", false = "off" }]
engines.vllm = [
  { versions = "<0.13", env = { VLLM_USE_FLASHINFER_SAMPLER = "1" } },
  { env = { VLLM_USE_FLASHINFER_SAMPLER = "1" }, flags = ["--attention-backend", "FLASHINFER"] },
]

[[features."sampler.top_k_top_p".candidates]]
impl = "torch"
engines.vllm = [{ env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_good_engine_rules_load(tmp_path: Path) -> None:
    """Rules compile with their version ranges; the policy set names the engines it tells."""
    policies = load_policies([write(tmp_path, GOOD)])
    assert policies.engine_names == ("vllm",)
    rules = policies.features["sampler.top_k_top_p"].candidates[0].engines["vllm"]
    assert [str(r.versions) if r.versions else None for r in rules] == ["<0.13", None]
    assert lint(policies) == []


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "message"),
    [
        pytest.param(
            'env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }',
            'env = { vllm_lower = "0" }',
            18, "candidates.1.engines.vllm.0.env", "is not an environment variable name",
            id="bad-variable-name",
        ),
        pytest.param(
            'env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }',
            'env = { VLLM_USE_FLASHINFER_SAMPLER = "0\\n1" }',
            18, "candidates.1.engines.vllm.0.env", "newlines and NUL bytes are not allowed",
            id="newline-in-value",
        ),
        pytest.param(
            'env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }',
            f'env = {{ VLLM_USE_FLASHINFER_SAMPLER = "{"1" * (MAX_ENV_VALUE_CHARS + 1)}" }}',
            18, "candidates.1.engines.vllm.0.env", "MAX_ENV_VALUE_CHARS",
            id="value-too-long",
        ),
        pytest.param(
            'flags = ["--attention-backend", "FLASHINFER"]',
            'flags = ["FLASHINFER", "--attention-backend"]',
            11, "candidates.0.engines.vllm.1.flags", "flags start with an option",
            id="flags-start-with-a-value",
        ),
        pytest.param(
            'flags = ["--attention-backend", "FLASHINFER"]',
            'flags = ["--attention backend"]',
            11, "candidates.0.engines.vllm.1.flags", "flags start with an option",
            id="flag-with-a-space",
        ),
        pytest.param(
            'versions = "<0.13"', 'versions = "=<0.13"',
            11, "candidates.0.engines.vllm.0.versions", "invalid version specifier",
            id="bad-version-range",
        ),
        pytest.param(
            "engines.vllm = [{ env", "engines.vLLM = [{ env",
            18, "candidates.1.engines", "expected lower_snake_case",
            id="bad-engine-name",
        ),
        pytest.param(
            '{ env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }',
            '{ shared_switch = "VLLM_ROCM_USE_AITER" }',
            18, "candidates.1.engines.vllm.0", "explains an 'inexpressible' rule",
            id="shared-switch-without-inexpressible",
        ),
        pytest.param(
            '{ env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }',
            '{ envs = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }',
            18, "candidates.1.engines.vllm.0.envs", "unknown key",
            id="unknown-key",
        ),
        pytest.param(
            'flags = ["--attention-backend", "FLASHINFER"]',
            "flags = [" + ", ".join(['"--x"'] * (MAX_ENGINE_RULE_WORDS + 1)) + "]",
            11, "candidates.0.engines.vllm.1.flags", "at most 64",
            id="too-many-flags",
        ),
    ],
)  # fmt: skip
def test_bad_engine_rule_is_located(
    tmp_path: Path, old: str, new: str, line: int, key: str, message: str
) -> None:
    """Each mistake names file, line, feature and key, and says what was expected."""
    assert old in GOOD
    with pytest.raises(PolicyError) as caught:
        load_policies([write(tmp_path, GOOD.replace(old, new, 1))])
    (issue,) = caught.value.issues
    assert (issue.line, issue.feature, issue.key) == (line, "sampler.top_k_top_p", key)
    assert message in issue.message


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            '{ versions = "<0.13", env',
            "{ env",
            "vllm rule 2 can never apply: rule 1 has no condition",
            id="rule-after-unconditional",
        ),
        pytest.param(
            'engines.vllm = [{ env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }]',
            "",
            "no vllm rule: where 'torch' is chosen, vllm would not be told",
            id="candidate-not-told",
        ),
        pytest.param(
            '{ versions = "<0.13", env = { VLLM_USE_FLASHINFER_SAMPLER = "1" } }',
            '{ versions = "<0.13", env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }',
            "vllm rule sets VLLM_USE_FLASHINFER_SAMPLER=0, which the policy reads as off for "
            "'flashinfer'",
            id="rule-switches-its-candidate-off",
        ),
        pytest.param(
            '{ versions = "<0.13", env = { VLLM_USE_FLASHINFER_SAMPLER = "1" } }',
            '{ versions = "<0.13", env = { VLLM_USE_FLASHINFER_SAMPLER = "enabled" } }',
            "which the policy reads as unreadable",
            id="rule-value-the-policy-cannot-read",
        ),
    ],
)
def test_lint_engine_rules(tmp_path: Path, old: str, new: str, message: str) -> None:
    """check reports rules that never apply, choices never told, and self-defeating values."""
    assert old in GOOD
    issues = lint(load_policies([write(tmp_path, GOOD.replace(old, new, 1))]))
    assert {i.feature for i in issues} == {"sampler.top_k_top_p"}
    assert message in issues[0].message


def test_engine_only_feature_needs_no_adapter(tmp_path: Path) -> None:
    """in_process = false: implementation names without a kernelpolicy callable are fine."""
    text = """schema = "kernelpolicy.policy/v1"
[features."attention.backend"]
description = "Attention backend"
fallback = "engine_default"
in_process = false
[[features."attention.backend".candidates]]
impl = "flash_attn_3"
vendor = "nvidia"
engines.vllm = [{ flags = ["--attention-backend", "FLASH_ATTN"] }]
[[features."attention.backend".candidates]]
impl = "engine_default"
engines.vllm = [{}]
"""
    assert load_policies([write(tmp_path, text)]).engine_names == ("vllm",)
    with pytest.raises(PolicyError, match="unknown implementation 'flash_attn_3'"):
        load_policies([write(tmp_path, text.replace("in_process = false\n", ""))])


@pytest.mark.parametrize(
    ("count", "ok"),
    [
        pytest.param(MAX_ENGINE_RULE_WORDS, True, id="at-limit"),
        pytest.param(MAX_ENGINE_RULE_WORDS + 1, False, id="limit-plus-one"),
    ],
)
def test_engine_rule_variable_limit(tmp_path: Path, count: int, ok: bool) -> None:
    """MAX_ENGINE_RULE_WORDS variables in one rule load; one more is a located error."""
    variables = ", ".join(f'KP_V{i} = "1"' for i in range(count))
    text = GOOD.replace(
        'env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }', f"env = {{ {variables} }}", 1
    )
    if ok:
        load_policies([write(tmp_path, text)])
        return
    with pytest.raises(PolicyError, match="MAX_ENGINE_RULE_WORDS") as caught:
        load_policies([write(tmp_path, text)])
    assert caught.value.issues[0].line == 18


@pytest.mark.parametrize(
    ("count", "ok"),
    [
        pytest.param(MAX_ENGINE_RULE_WORDS, True, id="at-limit"),
        pytest.param(MAX_ENGINE_RULE_WORDS + 1, False, id="limit-plus-one"),
    ],
)
def test_engine_rule_flag_limit(tmp_path: Path, count: int, ok: bool) -> None:
    """MAX_ENGINE_RULE_WORDS command-line words in one rule load; one more does not."""
    words = ", ".join(['"--x"'] * count)
    text = GOOD.replace('flags = ["--attention-backend", "FLASHINFER"]', f"flags = [{words}]", 1)
    if ok:
        load_policies([write(tmp_path, text)])
    else:
        with pytest.raises(PolicyError, match="at most 64"):
            load_policies([write(tmp_path, text)])


def test_array_of_tables_rules_are_located(tmp_path: Path) -> None:
    """[[...candidates.engines.vllm]] tables work too; a mistake names its key (the line is the
    candidate's header: locate does not walk sub-tables named by dotted paths)."""
    text = GOOD.replace(
        'engines.vllm = [{ env = { VLLM_USE_FLASHINFER_SAMPLER = "0" } }]\n',
        '[[features."sampler.top_k_top_p".candidates.engines.vllm]]\n'
        'env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }\nflag = ["--x"]\n',
    )
    with pytest.raises(PolicyError) as caught:
        load_policies([write(tmp_path, text)])
    (issue,) = caught.value.issues
    assert (issue.line, issue.key) == (16, "candidates.1.engines.vllm.0.flag")
    assert "unknown key" in issue.message
