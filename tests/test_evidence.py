"""Evidence: stored results, keyed by platform and library versions, read by the engine."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kernelpolicy.engine import CheckKind, resolve_policies
from kernelpolicy.errors import EvidenceError
from kernelpolicy.evidence.store import (
    Evidence,
    evidence_from_json,
    evidence_to_json,
    load_evidence,
    platform_key,
    store_evidence,
)
from kernelpolicy.limits import MAX_EVIDENCE_FILE_BYTES
from kernelpolicy.policy import load_policy_text
from tests.evidence_helpers import POLICY, RESULT
from tests.helpers import fixture, with_libraries

FAILED = {
    **RESULT,
    "status": "failed",
    "checks": [{"check": "robustness/greedy/nan_one_row", "passed": False}],
}


def test_round_trip_and_merge(tmp_path: Path) -> None:
    """Stored results load back; a later run of another feature keeps the earlier ones."""
    platform = fixture("mi300x")
    store_evidence(platform, [RESULT], "2026-11-22T00:00:00+00:00", tmp_path)
    store_evidence(platform, [{**RESULT, "feature": "rmsnorm", "impl": "torch"}], "later", tmp_path)
    evidence = load_evidence(platform, tmp_path)
    assert evidence.get("sampler.greedy", "fast") is not None
    assert evidence.get("rmsnorm", "torch") is not None


@pytest.mark.parametrize(
    ("versions", "changes"),
    [
        pytest.param({"amd_aiter": "0.1.13"}, True, id="kernel-library-upgraded"),
        pytest.param({"vllm": "0.10.2"}, True, id="bridge-side-upgraded"),
        pytest.param({"amd_aiter": None}, True, id="kernel-library-removed"),
        pytest.param({"numpy": "2.3.0"}, False, id="library-outside-the-kernel-stack"),
        pytest.param({"amd_aiter": "0.1.12"}, False, id="same-version-again"),
    ],
)
def test_key_follows_library_versions(versions: dict[str, str | None], changes: bool) -> None:
    """Upgrading a library of the kernel stack asks for new evidence; other libraries do not."""
    before = platform_key(fixture("mi300x"))
    assert (platform_key(with_libraries("mi300x", **versions)) != before) is changes


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


def _document(**changes: object) -> dict:  # type: ignore[type-arg]
    document = {
        "schema": "kernelpolicy.evidence/v1",
        "key": platform_key(fixture("cpu")),
        "created": "now",
        "results": [RESULT],
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not None}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        pytest.param([1, 2], "document: expected a kernelpolicy.evidence/v1 object", id="a-list"),
        pytest.param(
            _document(schema="v0"), "schema: expected 'kernelpolicy.evidence/v1'", id="wrong-schema"
        ),
        pytest.param(_document(key="0" * 16), "key: expected", id="other-key"),
        pytest.param(_document(created=None), "document.created: expected str", id="no-created"),
        pytest.param(_document(created=7), "document.created: expected str", id="int-created"),
        pytest.param(_document(results=None), "document.results: expected list", id="no-results"),
        pytest.param(
            _document(results={"a": 1}), "document.results: expected list", id="results-object"
        ),
        pytest.param(_document(results=["x"]), "results[0]: expected an object", id="result-str"),
        pytest.param(
            _document(results=[{**RESULT, "feature": None}]),
            "results[0].feature: expected str",
            id="no-feature",
        ),
        pytest.param(
            _document(results=[{"feature": "f", "status": "passed", "checks": []}]),
            "results[0].impl: expected str",
            id="no-impl",
        ),
        pytest.param(
            _document(results=[{**RESULT, "status": "great"}]),
            "results[0].status: expected passed or differs or failed or skipped",
            id="bad-status",
        ),
        pytest.param(
            _document(results=[{**RESULT, "checks": None}]),
            "results[0].checks: expected list",
            id="no-checks",
        ),
        pytest.param(
            _document(results=[{**RESULT, "checks": [{"check": "c"}]}]),
            "results[0].checks[0].passed: expected bool",
            id="check-no-passed",
        ),
        pytest.param(
            _document(results=[{**RESULT, "checks": [{"check": "c", "passed": 1}]}]),
            "results[0].checks[0].passed: expected bool",
            id="check-int-passed",
        ),
        pytest.param(
            _document(results=[{**RESULT, "checks": [5]}]),
            "results[0].checks[0]: expected an object",
            id="check-int",
        ),
    ],
)
def test_malformed_document_is_a_problem(document: object, problem: str, tmp_path: Path) -> None:
    """A document missing keys or with wrong types is no evidence, with the place named."""
    platform = fixture("cpu")
    path = store_evidence(platform, [RESULT], "now", tmp_path)
    path.write_text(json.dumps(document))
    evidence = load_evidence(platform, tmp_path)
    assert evidence.entries == {}
    assert evidence.problem is not None
    assert str(path) in evidence.problem
    assert problem in evidence.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(b"\xff\xfe", "not UTF-8", id="not-utf8"),
        pytest.param(b"[" * 40 + b"]" * 40, "over MAX_NESTING_DEPTH", id="too-deep"),
        pytest.param(b'{"created": NaN}', "not acceptable JSON", id="nan"),
        pytest.param(b"", "not JSON", id="empty"),
    ],
)
def test_unreadable_bytes_are_a_problem(text: bytes, problem: str, tmp_path: Path) -> None:
    """Bytes no JSON parser should see are refused before it does."""
    platform = fixture("cpu")
    path = store_evidence(platform, [RESULT], "now", tmp_path)
    path.write_bytes(text)
    evidence = load_evidence(platform, tmp_path)
    assert evidence.problem is not None
    assert problem in evidence.problem


def test_fifo_is_a_problem_not_a_hang(tmp_path: Path) -> None:
    """A FIFO at the evidence path is refused at once (the read is non-blocking)."""
    platform = fixture("cpu")
    path = store_evidence(platform, [RESULT], "now", tmp_path)
    path.unlink()
    os.mkfifo(path, 0o600)
    evidence = load_evidence(platform, tmp_path)
    assert evidence.problem is not None
    assert "not a regular file (a FIFO)" in evidence.problem


@pytest.mark.parametrize(
    ("extra", "loads"),
    [pytest.param(0, True, id="at-limit"), pytest.param(1, False, id="over-limit")],
)
def test_evidence_file_size_limit(extra: int, loads: bool, tmp_path: Path) -> None:
    """MAX_EVIDENCE_FILE_BYTES: a file of exactly the limit loads, one byte more does not."""
    platform = fixture("cpu")
    path = store_evidence(platform, [RESULT], "now", tmp_path)
    body = json.dumps(_document()).encode()
    path.write_bytes(body + b" " * (MAX_EVIDENCE_FILE_BYTES - len(body) + extra))
    evidence = load_evidence(platform, tmp_path)
    if loads:
        assert evidence.problem is None
        assert evidence.get("sampler.greedy", "fast") is not None
    else:
        assert evidence.problem is not None
        assert "MAX_EVIDENCE_FILE_BYTES" in evidence.problem


def test_passed_status_with_a_failed_check_is_not_a_pass(tmp_path: Path) -> None:
    """A hand-edited "passed" that lists a failing check does not verify the candidate."""
    platform = fixture("cpu")
    store_evidence(platform, [{**FAILED, "status": "passed"}], "now", tmp_path)
    entry = load_evidence(platform, tmp_path).get("sampler.greedy", "fast")
    assert entry is not None
    assert not entry.passed


def test_wire_round_trip(tmp_path: Path) -> None:
    """What the daemon sends is what the client rebuilds."""
    platform = fixture("cpu")
    store_evidence(platform, [RESULT, {**FAILED, "impl": "slow"}], "now", tmp_path)
    evidence = load_evidence(platform, tmp_path)
    assert evidence_from_json(evidence_to_json(evidence)) == evidence
    broken = Evidence("k", problem="refusing evidence store")
    assert evidence_from_json(evidence_to_json(broken)) == broken


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param("[]", "document: expected an object", id="a-list"),
        pytest.param('{"entries": []}', "key: expected a string", id="no-key"),
        pytest.param('{"key": "k"}', "entries: expected a list", id="no-entries"),
        pytest.param(
            '{"key": "k", "entries": [], "problem": 3}',
            "problem: expected a string",
            id="int-problem",
        ),
        pytest.param(
            '{"key": "k", "entries": [["f", "i", true]]}', "entries[0]: expected [", id="short-row"
        ),
        pytest.param(
            '{"key": "k", "entries": [["f", "i", 1, "c", "s", "x"]]}',
            "entries[0]: expected [",
            id="int-passed",
        ),
        pytest.param("[" * 100 + "]" * 100, "over MAX_NESTING_DEPTH", id="too-deep"),
        pytest.param('{"key": 1e999999}', "key: expected a string", id="infinite-number"),
    ],
)
def test_wire_rejects_malformed(text: str, message: str) -> None:
    """evidence_from_json: malformed input is an EvidenceError naming the place, never a crash."""
    with pytest.raises(EvidenceError, match=re.escape(message)):
        evidence_from_json(text)


@pytest.mark.parametrize(
    ("extra", "ok"),
    [pytest.param(0, True, id="at-limit"), pytest.param(1, False, id="over-limit")],
)
def test_wire_size_limit(extra: int, ok: bool) -> None:
    """MAX_EVIDENCE_FILE_BYTES bounds the wire form too."""
    body = '{"key": "k", "problem": null, "entries": []}'
    text = body + " " * (MAX_EVIDENCE_FILE_BYTES - len(body) + extra)
    if ok:
        assert evidence_from_json(text) == Evidence("k")
    else:
        with pytest.raises(EvidenceError, match="MAX_EVIDENCE_FILE_BYTES"):
            evidence_from_json(text)


def test_key_ignores_libraries_only_some_probes_read(fixtures: Path) -> None:
    """verify probes the kernel stack; explain, resolve() and serve also probe what their
    policies name. The key must be the same for all of them, and change with the stack."""
    from kernelpolicy import load_platform
    from kernelpolicy.evidence.store import platform_key

    base = load_platform(fixtures / "platforms/h100-sxm.json")
    extra = base.replace(**{"libraries": {**base.libraries, "deep_gemm": "2.1.0"}})
    upgraded = base.replace(**{"libraries": {**base.libraries, "flashinfer-python": "9.9.9"}})
    assert platform_key(extra) == platform_key(base)
    assert platform_key(upgraded) != platform_key(base)
