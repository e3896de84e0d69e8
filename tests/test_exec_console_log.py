"""exec's console event is one short line of words (review: a first run on a machine without
vLLM logged a [warning] line of ~1,000 characters, the Python dict of all 18 decisions, because
the release note "vllm not installed here" counted as a warning of the event)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

FIXTURES = ROOT / "kernelpolicy/fixtures/platforms"


def _exec(fmt: str, *args: str) -> list[str]:
    """exec's stderr lines (the command, ``true``, starts and exits 0 where it may)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": fmt}
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", *args, "--", "true"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return out.stderr.splitlines()


def _platform(name: str) -> list[str]:
    return ["--platform", str(FIXTURES / f"{name}.json")]


@pytest.mark.parametrize(
    ("args", "level", "told"),
    [
        pytest.param(["--engine-version", "99.0.0"], "info", "told=none",
                     id="release-note-only-is-info"),
        pytest.param([*_platform("t4"), "--engine-version", "0.12.0"], "info",
                     "told=sampler.top_k_top_p:torch,moe.experts:triton", id="told-by-variables"),
        pytest.param([*_platform("h100-sxm"), "--engine-version", "0.33.0"], "warning",
                     "moe.experts:triton", id="inexpressible-is-a-warning"),
        pytest.param([*_platform("mi300x"), "--engine-version", "0.16.0", "--model-kind",
                      "mla-sparse"], "error", "sparse_attn_indexer:ERROR", id="error"),
    ],
)  # fmt: skip
def test_the_console_event_is_one_short_line(args: list[str], level: str, told: str) -> None:
    """One line, no Python dict or list: the decisions told to the engine by name, the rest
    counted; a warning only where one concerns what the engine is told."""
    lines = _exec("console", *args)
    (event,) = [line for line in lines if "kernelpolicy.exec" in line]
    assert f"[{level}" in event
    fields = event.split()
    (told_field,) = [field for field in fields if field.startswith("told=")]
    assert told in told_field
    assert "{" not in event
    assert "[" not in event.split("]", 1)[1]  # past the level's brackets
    assert any(field.startswith("decisions=") and field[10:].isdigit() for field in fields)


def test_the_json_event_keeps_every_decision() -> None:
    """The JSON event keeps what the console line leaves out: each decision in explain's
    words and each warning (here the release note, at info level)."""
    lines = _exec("json", "--engine-version", "99.0.0")
    (event,) = [json.loads(line) for line in lines if line.startswith("{")]
    assert event["level"] == "info"
    assert event["decisions"]["sampler.greedy"] == "torch"
    assert len(event["decisions"]) > 1
    assert any("is newer than" in warning for warning in event["warnings"])
