"""The routing keys of the policy language (``by_batch``, ``dtypes``): load-time validation
with locations, their limits, the ``check`` lints, and the evidence per dtype they read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.check import lint
from kernelpolicy.errors import EvidenceError, PolicyError
from kernelpolicy.evidence.store import (
    evidence_from_json,
    evidence_to_json,
    load_evidence,
    store_evidence,
)
from kernelpolicy.limits import MAX_BATCH_BOUND, MAX_BATCH_ROUTES
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

HEAD = """schema = "kernelpolicy.policy/v1"
[features."demo.sampler"]
description = "d"
fallback = "torch"
{feature}
[[features."demo.sampler".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
torch = ">=1.0"
[[features."demo.sampler".candidates]]
impl = "torch"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
"""
ROW = """[[features."demo.sampler".by_batch]]
{row}
"""


def policy(feature: str = "", *rows: str) -> str:
    return HEAD.format(feature=feature) + "".join(ROW.format(row=r) for r in rows)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        pytest.param(
            policy('dtypes = ["float32", "bf16"]'), "dtype 'bf16' is not one kernelpolicy verify",
            5, id="unknown-dtype",
        ),
        pytest.param(
            policy('dtypes = ["float32", "float32"]'), "a dtype is listed twice", 5,
            id="dtype-twice",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmin = 10\nmax = 9'), "max 9 is below min 10", 13,
            id="empty-range",
        ),
        pytest.param(policy("", 'prefer = ["fast"]\nmin = 0'), "outside 1 to MAX_BATCH_BOUND", 15,
                     id="min-zero"),
        pytest.param(
            policy("", 'prefer = ["fast", "fast"]'), "prefer lists 'fast' twice", 13,
            id="prefer-twice",
        ),
        pytest.param(
            policy("", 'prefer = ["slow"]'), "'slow' is not one of the candidates", 2,
            id="prefer-unknown",
        ),
        pytest.param(policy("", "prefer = []"), "at least 1 item", 14, id="prefer-empty"),
        pytest.param(
            policy('context = { batch = "string" }', 'prefer = ["fast"]'),
            "'batch' is routed on (by_batch) and must be 'int'", 2, id="batch-declared-string",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nminimum = 3'), "unknown key", 15, id="unknown-key"
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmax = true'), "an integer, got the boolean", 15,
            id="bool-bound",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmax = "32"'), "an integer, got the string", 15,
            id="string-bound",
        ),
    ],
)  # fmt: skip
def test_bad_routing_keys_are_located_errors(text: str, message: str, line: int) -> None:
    """Each mistake is one PolicyError naming the feature, the key and its line."""
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, "routes.toml")
    issue = caught.value.issues[0]
    assert message in issue.message
    assert (issue.file, issue.feature, issue.line) == ("routes.toml", "demo.sampler", line)


@pytest.mark.parametrize(
    ("count", "ok"),
    [
        pytest.param(MAX_BATCH_ROUTES, True, id="at-limit"),
        pytest.param(MAX_BATCH_ROUTES + 1, False, id="limit-plus-one"),
    ],
)
def test_batch_row_limit(count: int, ok: bool) -> None:
    """MAX_BATCH_ROUTES rows load; one more is an error naming the limit."""
    rows = [f'prefer = ["fast"]\nmin = {i + 1}\nmax = {i + 1}' for i in range(count)]
    text = policy("", *rows)
    if ok:
        assert len(load_policy_text(text).features["demo.sampler"].spec.by_batch) == count
        return
    with pytest.raises(PolicyError, match="MAX_BATCH_ROUTES"):
        load_policy_text(text)


@pytest.mark.parametrize(
    ("bound", "ok"),
    [
        pytest.param(MAX_BATCH_BOUND, True, id="at-limit"),
        pytest.param(MAX_BATCH_BOUND + 1, False, id="limit-plus-one"),
    ],
)
def test_batch_bound_limit(bound: int, ok: bool) -> None:
    """A bound of MAX_BATCH_BOUND loads; one more is an error naming the limit."""
    text = policy("", f'prefer = ["fast"]\nmin = {bound}')
    if ok:
        assert load_policy_text(text).features["demo.sampler"].spec.by_batch[0].min == bound
        return
    with pytest.raises(PolicyError, match="MAX_BATCH_BOUND"):
        load_policy_text(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            policy("", 'prefer = ["fast"]\nmax = 32', 'prefer = ["torch"]\nmin = 16'),
            ["by_batch[1]: batch 16-32 is also in by_batch[0]"], id="overlap",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmax = 32', 'prefer = ["torch"]\nmin = 64\nmax = 128'),
            ["by_batch: no by_batch row covers batch 33-63, 129 and up"], id="uncovered",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmin = 2'),
            ["by_batch: no by_batch row covers batch 1:"], id="uncovered-start",
        ),
        pytest.param(
            policy("", 'prefer = ["fast"]\nmax = 32', 'prefer = ["torch"]\nmin = 33'), [],
            id="clean",
        ),
        pytest.param(
            policy('context = { dtype = "string" }').replace(
                'impl = "fast"\n',
                'impl = "fast"\nwhen = \'dtype == "bf16" || dtype in ["float16", "fp8"]\'\n',
            ),
            ["compares dtype with 'bf16'", "compares dtype with 'fp8'"], id="unknown-dtype-in-when",
        ),
    ],
)  # fmt: skip
def test_check_lints_routing(text: str, expected: list[str]) -> None:
    """Overlapping and uncovered batch rows, and dtype names torch never gives, are reported."""
    issues = [str(issue) for issue in lint(load_policy_text(text, "routes.toml"))]
    assert len(issues) == len(expected), issues
    for issue, fragment in zip(issues, expected, strict=True):
        assert fragment in issue
        assert issue.startswith("routes.toml:2 [demo.sampler]")


def _result(impl: str, checks: dict[str, bool]) -> dict[str, object]:
    return {
        "feature": "demo.sampler",
        "impl": impl,
        "status": "passed" if all(checks.values()) else "failed",
        "checks": [{"check": c, "passed": ok, "detail": ""} for c, ok in checks.items()],
    }


@pytest.mark.parametrize(
    ("checks", "passed", "failed", "general"),
    [
        pytest.param(
            {"robustness/float32/nan": True, "robustness/float16/nan": False, "ties/big": True},
            ("float32",), ("float16",), False, id="one-dtype-fails",
        ),
        pytest.param(
            {"robustness/torch.bfloat16/nan": True, "ties/big": False},
            ("bfloat16",), (), True, id="a-check-naming-no-dtype-fails",
        ),
        pytest.param({"ties/big": True}, (), (), False, id="no-dtype-named"),
        pytest.param(
            {"robustness/float64/nan": False}, (), (), True, id="unknown-dtype-is-general"
        ),
    ],
)  # fmt: skip
def test_evidence_records_dtypes_and_survives_the_wire(
    tmp_path: Path,
    checks: dict[str, bool],
    passed: tuple[str, ...],
    failed: tuple[str, ...],
    general: bool,
) -> None:
    """Stored results are read per dtype (from the check names), and a daemon's wire form
    carries them to a client unchanged."""
    platform = fixture("cpu")
    store_evidence(platform, [_result("fast", checks)], "2026-11-23", tmp_path)
    entry = load_evidence(platform, tmp_path).get("demo.sampler", "fast")
    assert entry is not None
    assert (entry.dtypes_passed, entry.dtypes_failed, entry.general_failed) == (
        passed, failed, general,
    )  # fmt: skip
    evidence = load_evidence(platform, tmp_path)
    assert evidence_from_json(evidence_to_json(evidence)) == evidence


@pytest.mark.parametrize(
    ("row", "ok"),
    [
        pytest.param(["f", "i", True, "c", "s", "src"], True, id="six-values-earlier-daemon"),
        pytest.param(["f", "i", True, "c", "s", "src", ["float32"], [], False], True, id="nine"),
        pytest.param(["f", "i", True, "c", "s", "src", ["fp8"], [], False], False,
                     id="unknown-dtype"),
        pytest.param(["f", "i", True, "c", "s", "src", ["float32"], [], 1], False,
                     id="general-not-bool"),
        pytest.param(["f", "i", True, "c", "s", "src", "float32", [], False], False,
                     id="not-a-list"),
    ],
)  # fmt: skip
def test_wire_rows_are_checked(row: list[object], ok: bool) -> None:
    """Only known dtype names reach the engine from a daemon (it generates code naming them)."""
    text = json.dumps({"key": "k", "problem": None, "entries": [row]})
    if ok:
        assert evidence_from_json(text).get("f", "i") is not None
        return
    with pytest.raises(EvidenceError, match=r"entries\[0\]"):
        evidence_from_json(text)
