"""Evidence: stored results, keyed by platform and library versions, read by the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.conformance.evidence import (
    load_evidence,
    platform_key,
    store_evidence,
)
from kernelpolicy.engine import CheckKind, resolve_policies
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture, with_libraries

RESULT = {"feature": "sampler.greedy", "impl": "fast", "status": "passed", "checks": []}
FAILED = {
    **RESULT,
    "status": "failed",
    "checks": [{"check": "robustness/greedy/nan_one_row", "passed": False}],
}
POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:greedy"
verified = true
[[features."sampler.greedy".candidates]]
impl = "torch"
"""


def test_round_trip_and_merge(tmp_path: Path) -> None:
    """Stored results load back; a later run of another feature keeps the earlier ones."""
    platform = fixture("mi300x")
    store_evidence(platform, [RESULT], "2026-11-22T00:00:00+00:00", tmp_path)
    store_evidence(platform, [{**RESULT, "feature": "rmsnorm", "impl": "torch"}], "later", tmp_path)
    evidence = load_evidence(platform, tmp_path)
    assert evidence.get("sampler.greedy", "fast") is not None
    assert evidence.get("rmsnorm", "torch") is not None


def test_key_follows_library_versions() -> None:
    """Upgrading a library asks for new evidence."""
    assert platform_key(fixture("mi300x")) != platform_key(
        with_libraries("mi300x", amd_aiter="0.1.13")
    )
    assert platform_key(fixture("mi300x")) == platform_key(fixture("mi300x"))


def test_broken_file_is_reported_not_raised(tmp_path: Path) -> None:
    """An unreadable evidence file is no evidence, with the reason."""
    platform = fixture("cpu")
    path = store_evidence(platform, [RESULT], "now", tmp_path)
    path.write_text("{not json")
    evidence = load_evidence(platform, tmp_path)
    assert evidence.entries == {}
    assert evidence.problem is not None
    assert "unreadable evidence" in evidence.problem


@pytest.mark.parametrize(
    ("stored", "impl", "message"),
    [
        pytest.param(None, "torch", "not verified on this platform", id="no-evidence"),
        pytest.param(
            FAILED,
            "torch",
            "failed kernelpolicy verify on now: failed: robustness/greedy/nan_one_row",
            id="failed",
        ),
        pytest.param(RESULT, "fast", None, id="passed"),
    ],
)
def test_engine_honours_verified(
    stored: dict | None, impl: str, message: str | None, tmp_path: Path
) -> None:  # type: ignore[type-arg]
    """verified = true: chosen only once its suite passed here, and explain says which."""
    platform = fixture("cpu")
    if stored is not None:
        store_evidence(platform, [stored], "now", tmp_path)
    evidence = load_evidence(platform, tmp_path)
    decision = resolve_policies(platform, {}, load_policy_text(POLICY), evidence=evidence).decision(
        "sampler.greedy"
    )
    assert decision.impl == impl
    fast = decision.candidates[0]
    if message is None:
        assert any("verified by kernelpolicy verify on now" in line for line in decision.reasons)
    else:
        assert fast.failures[0].kind is CheckKind.EVIDENCE
        assert message in fast.failures[0].message
        assert fast.failures[0].hint is not None
        assert "kernelpolicy verify --feature sampler.greedy --impl fast" in fast.failures[0].hint


def test_evidence_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    """New evidence changes the fingerprint (it can change decisions)."""
    platform = fixture("cpu")
    policies = load_policy_text(POLICY)
    before = resolve_policies(platform, {}, policies, evidence=load_evidence(platform, tmp_path))
    store_evidence(platform, [RESULT], "now", tmp_path)
    after = resolve_policies(platform, {}, policies, evidence=load_evidence(platform, tmp_path))
    assert before.fingerprint != after.fingerprint
    assert json.loads(json.dumps(after.to_dict()))["decisions"]["sampler.greedy"]["impl"] == "fast"
