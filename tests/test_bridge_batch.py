"""Per-batch choices and the engine bridge: ``select()`` may choose by the call's batch
in-process, an engine's variables carry one choice; ``kernelpolicy env`` says which is which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.bridge import Status, engine_settings
from kernelpolicy.bridge.model import BatchChoice
from kernelpolicy.engine import resolve_policies
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture, resolve_on

ROOT = Path(__file__).resolve().parent.parent
H100 = str(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")
NOTE = (
    "sampler.top_k_top_p: chosen per call by batch in-process only (resolve().select(), the "
    "worker bridge): batch 1+: triton; vllm is told one choice, flashinfer, for every batch"
)

HEAD = """schema = "kernelpolicy.policy/v1"
[features.f]
description = "d"
fallback = "slow"
in_process = false
"""
TELLS = 'engines.vllm = [{ env = { KP_F = "%s" } }]\n'
ROWS = f"""{HEAD}
[[features.f.candidates]]
impl = "slow"
{TELLS % "slow"}
[[features.f.candidates]]
impl = "fast"
vendor = "nvidia"
{TELLS % "fast"}
[[features.f.by_batch]]
min = 1
max = 64
prefer = ["fast"]
"""
CONDITION = f"""{HEAD}context = {{ batch = "int" }}
[[features.f.candidates]]
impl = "fast"
when = "batch <= 256"
{TELLS % "fast"}
[[features.f.candidates]]
impl = "slow"
{TELLS % "slow"}
"""
SILENT = ROWS.replace(TELLS % "slow", "").replace(TELLS % "fast", "")  # vllm told nothing


@pytest.mark.parametrize(
    ("text", "status", "by_batch", "conditions"),
    [
        pytest.param(
            ROWS,
            Status.TOLD,
            (BatchChoice(1, 64, "fast"), BatchChoice(65, None, "slow")),
            (),
            id="by-batch-rows-and-the-range-they-leave",
        ),
        pytest.param(CONDITION, Status.TOLD, (), ("fast",), id="a-condition-on-batch"),
        pytest.param(SILENT, Status.NOT_FOR_ENGINE, (), (), id="engine-told-nothing"),
    ],
)
def test_told_says_what_select_chooses_per_batch(
    text: str, status: Status, by_batch: tuple[BatchChoice, ...], conditions: tuple[str, ...]
) -> None:
    """Each range's first choice (uncovered ranges included) and the conditions on batch,
    only for a feature the engine is told about."""
    res = resolve_policies(fixture("h100-sxm"), {}, load_policy_text(text))
    told = engine_settings(res, "vllm", {}).decisions["f"]
    assert (told.status, told.by_batch, told.batch_conditions) == (status, by_batch, conditions)
    assert told.per_batch == bool(by_batch or conditions)


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        pytest.param("h100-sxm", {}, ("sampler.top_k_top_p",), id="h100-triton-by-batch"),
        pytest.param("t4", {}, (), id="t4-one-choice"),
        pytest.param(  # a switch-requested implementation serves every batch, as asked
            "h100-sxm", {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, (), id="switch-forces-one-choice"
        ),
    ],
)
def test_bundled_per_batch_features(
    platform: str, env: dict[str, str], expected: tuple[str, ...]
) -> None:
    """The bundled sampler's by_batch row reaches the bridge only where it changes the choice."""
    settings = engine_settings(resolve_on(platform, **env), "vllm", env)
    assert settings.per_batch == expected
    assert settings.to_dict()["per_batch"] == list(expected)


def kernelpolicy(
    *args: str, command: str = "env", log: str = "off"
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": log}
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", command, "--engine", "vllm", "--platform", H100,
         *args],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["shell", "dotenv", "k8s"])
def test_env_text_formats_say_it_in_a_comment(fmt: str) -> None:
    """The note is a comment line of the output, so the output still loads where it goes."""
    run = kernelpolicy("--format", fmt)
    assert f"\n# {NOTE}\n" in run.stdout
    assert run.stderr == ""


def test_env_json_has_a_per_batch_field() -> None:
    """JSON: the features routed per batch, and per decision the ranges and conditions."""
    document = json.loads(kernelpolicy("--format", "json").stdout)
    assert document["per_batch"] == ["sampler.top_k_top_p"]
    assert document["decisions"]["sampler.top_k_top_p"]["per_batch"] == {
        "by_batch": [{"batch": [1, None], "impl": "triton"}],
        "conditions": [],
    }
    assert document["decisions"]["sampler.greedy"]["per_batch"] is None


def test_env_k8s_json_keeps_the_fragment_and_notes_on_stderr() -> None:
    """A container fragment has only env and args: the note goes to stderr."""
    run = kernelpolicy("--format", "k8s-json")
    assert set(json.loads(run.stdout)) == {"env", "args"}
    assert run.stderr == f"kernelpolicy: note: {NOTE}\n"


def test_exec_notes_it_and_logs_the_features() -> None:
    """exec starts the engine with the one choice, says so on stderr and in its log event."""
    run = kernelpolicy("--", sys.executable, "-c", "pass", command="exec", log="json")
    lines = run.stderr.splitlines()
    assert f"kernelpolicy: note: {NOTE}" in lines
    (event,) = [json.loads(line) for line in lines if line.startswith("{")]
    assert event["per_batch"] == ["sampler.top_k_top_p"]
