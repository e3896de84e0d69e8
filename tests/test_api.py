"""kernelpolicy.resolve(): defaults, explicit inputs, and the decision log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import kernelpolicy
from kernelpolicy.api import resolve
from tests.helpers import ROOT, fixture


def test_resolve_probes_this_machine() -> None:
    """With no arguments: probe, os.environ, the bundled pack."""
    resolution = resolve(env={"KERNELPOLICY_LOG_FORMAT": "off"})
    assert resolution.platform.vendor in {"nvidia", "amd", "none"}
    assert resolution.decision("topk_per_row").impl == "torch"


def test_resolve_is_exported() -> None:
    """resolve and the Resolution types are part of the public API."""
    assert kernelpolicy.resolve is resolve
    assert kernelpolicy.Resolution.__name__ == "Resolution"


def test_explicit_policies_paths(tmp_path: Path) -> None:
    """policies= takes paths; KERNELPOLICY_POLICY_PATHS does the same through env."""
    only = tmp_path / "pack"
    only.mkdir()
    (only / "greedy.toml").write_text((ROOT / "policies/10-sampler.toml").read_text())
    a = resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "off"}, [only])
    b = resolve(
        fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "off", "KERNELPOLICY_POLICY_PATHS": str(only)}
    )
    assert list(a.decisions) == list(b.decisions) == ["sampler.top_k_top_p", "sampler.greedy"]


def test_decision_log_is_one_json_event(caplog: pytest.LogCaptureFixture) -> None:
    """KERNELPOLICY_LOG_FORMAT=json: one JSON event per resolution, through logging."""
    with caplog.at_level(logging.DEBUG, logger="kernelpolicy"):
        resolution = resolve(
            fixture("mi300x"), {"KERNELPOLICY_LOG_FORMAT": "json", "VLLM_ROCM_USE_AITER": "1"}
        )
    records = [r for r in caplog.records if r.name == "kernelpolicy"]
    assert len(records) == 1
    assert records[0].levelname == "WARNING"  # the aiter sampler fell back: aiter 0.1.12 is buggy
    event = json.loads(records[0].getMessage())
    assert event["event"] == "kernelpolicy.resolved"
    assert event["fingerprint"] == resolution.fingerprint
    assert event["decisions"]["sampler.top_k_top_p"] == "torch"
    assert event["errors"] is None
    assert "ROCm/aiter#2035" in event["warnings"][0]


def test_decision_log_off(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """KERNELPOLICY_LOG_FORMAT=off: nothing on stderr, nothing logged."""
    with caplog.at_level(logging.DEBUG, logger="kernelpolicy"):
        resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "off"})
    assert capsys.readouterr().err == ""
    assert not [r for r in caplog.records if r.name == "kernelpolicy"]


def test_policy_cache_keeps_only_the_newest_sets(tmp_path: Path) -> None:
    """Each edit of a policy file loads a new set; only POLICY_CACHE_ENTRIES are kept, the
    most recently used first, so a long-lived process does not grow with every edit."""
    import os

    from kernelpolicy import inputs

    policy = tmp_path / "p.toml"
    text = 'schema = "kernelpolicy.policy/v1"\n[features."x.y"]\ndescription = "{}"\n'
    text += 'fallback = "a"\n[[features."x.y".candidates]]\nimpl = "a"\nentry = "json:loads"\n'
    inputs._POLICY_CACHE.clear()
    for edit in range(inputs.POLICY_CACHE_ENTRIES + 3):
        policy.write_text(text.format("d" * (edit + 1)))  # a new size: a new cache key
        os.utime(policy, (edit, edit))
        first = inputs.load_policies_cached([policy])
        assert inputs.load_policies_cached([policy]) is first  # unchanged file: the cached set
    assert len(inputs._POLICY_CACHE) == inputs.POLICY_CACHE_ENTRIES
