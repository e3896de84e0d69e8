"""Acceptance: the stock openfeature-sdk + openfeature-provider-flagd against kernelpolicy serve."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

DISABLE = (
    'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
    'impl = "flashinfer"\nreason = "incident 4711"\n'
)


def test_openfeature_flagd_provider(tmp_path: Path) -> None:
    """The provider becomes ready, resolves a feature, and sees a change after an edit."""
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    with running_daemon(fixture("h100-sxm"), [policies]) as running:
        address = running.daemon.bound[0]
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "openfeature_client.py"), address],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            first = json.loads(proc.stdout.readline() or "{}")
            (policies / "90-ops.toml").write_text(DISABLE)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            second = json.loads(proc.stdout.readline() or "{}")
            proc.wait(timeout=30)
        finally:
            proc.kill()
            stderr = proc.stderr.read() if proc.stderr else ""
    assert first.get("ready") is True, stderr
    assert (first["value"], first["variant"], first["reason"]) == (
        "flashinfer",
        "flashinfer",
        "TARGETING_MATCH",
    )
    assert first["gate_without_context"] is False  # INVALID_ARGUMENT -> the caller's default
    assert second["seen"] is True, stderr
    assert ["sampler.top_k_top_p"] in second["flags"]
    assert second["value"] == "triton"
