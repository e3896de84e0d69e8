"""With --platform, env previews the snapshot's machine with the snapshot's recorded environment
and names each variable of this shell it ignored; exec starts an engine here, which inherits
this shell's environment, so it decides with that one and names what the snapshot records
otherwise (first-day review, findings 1 and 2: both were silent, and a reader could not tell
why they answered differently)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelpolicy.cli import exec_cmd, main
from tests.helpers import FIXTURES

SWITCH = "VLLM_USE_FLASHINFER_SAMPLER"
FORCE = "KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P"
USES = "whose environment the answer uses); pass --env to use it"
NOT_USED = "not used: the engine starts here with this shell's environment"
SAID = ("ignored with --platform", "not used:")


def _snapshot(tmp_path: Path, env: dict[str, str]) -> str:
    document = json.loads((FIXTURES / "h100-sxm.json").read_text())
    document["env"] = env
    path = tmp_path / "node.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize(
    ("shell", "snapshot", "extra", "notes", "told"),
    [
        pytest.param({SWITCH: "0"}, {}, [],
                     [f"your shell has {SWITCH}=0, ignored with --platform (unset in the "
                      f"snapshot, {USES}"], "1", id="switch-unset-in-snapshot"),
        pytest.param({SWITCH: "0"}, {SWITCH: "1"}, [],
                     [f"your shell has {SWITCH}=0, ignored with --platform ({SWITCH}=1 in the "
                      f"snapshot, {USES}"], "1", id="switch-set-otherwise"),
        pytest.param({FORCE: "torch"}, {}, [],
                     [f"your shell has {FORCE}=torch, ignored with --platform (unset in the "
                      f"snapshot, {USES}"], "1", id="force"),
        pytest.param({"KERNELPOLICY_OVERRIDES": '{"sampler.top_k_top_p": "torch"}'}, {}, [],
                     ["your shell has KERNELPOLICY_OVERRIDES={\"sampler.top_k_top_p\": \"torch"
                      "\"}, ignored with --platform (unset in the snapshot, " + USES], "1",
                     id="override"),
        pytest.param({SWITCH: "0"}, {}, ["--env", f"{SWITCH}=0"], [], "0", id="used-by-env"),
        pytest.param({SWITCH: "1"}, {SWITCH: "1"}, [], [], "1", id="the-same-value"),
        pytest.param({"MYLAB_UNREAD": "1"}, {}, [], [], "1", id="a-variable-nothing-reads"),
    ],
)  # fmt: skip
def test_env_platform_names_the_shell_values_it_ignored(
    shell: dict[str, str],
    snapshot: dict[str, str],
    extra: list[str],
    notes: list[str],
    told: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """env --platform: the snapshot's environment decides; each of this shell's variables the
    answer would read and did not is a note on stderr."""
    for key, value in shell.items():
        monkeypatch.setenv(key, value)
    argv = ["env", "--engine", "vllm", "--engine-version", "0.12.0", "--format", "json"]
    assert main([*argv, "--platform", _snapshot(tmp_path, snapshot), *extra]) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if any(s in line for s in SAID)]
    assert said == [f"kernelpolicy: note: {note}" for note in notes]
    assert json.loads(captured.out)["env"][SWITCH] == told


@pytest.mark.parametrize(
    ("shell", "snapshot", "notes", "child"),
    [
        pytest.param({SWITCH: "0"}, {SWITCH: "1"},
                     [f"the snapshot has {SWITCH}=1, {NOT_USED} ({SWITCH}=0), as the answer "
                      "does; set it here to use it"], "0", id="shell-switch-wins"),
        pytest.param({}, {FORCE: "torch"},
                     [f"the snapshot has {FORCE}=torch, {NOT_USED} (unset), as the answer does; "
                      "set it here to use it"], "1", id="snapshot-force-not-used"),
        pytest.param({FORCE: "torch"}, {}, [], "0", id="shell-force-used"),
        pytest.param({SWITCH: "0"}, {SWITCH: "0"}, [], "0", id="the-same-value"),
    ],
)  # fmt: skip
def test_exec_platform_decides_with_the_shell_the_engine_inherits(
    shell: dict[str, str],
    snapshot: dict[str, str],
    notes: list[str],
    child: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """exec --platform: this shell's environment decides (the engine inherits it, and gets
    what the answer says); what the snapshot records otherwise is a note on stderr."""
    started: list[dict[str, str]] = []
    monkeypatch.setattr(exec_cmd, "_exec", lambda argv, env: started.append(env) or 0)
    monkeypatch.setenv("KERNELPOLICY_LOG_FORMAT", "off")
    for key, value in shell.items():
        monkeypatch.setenv(key, value)
    argv = ["exec", "--engine", "vllm", "--engine-version", "0.12.0"]
    path = _snapshot(tmp_path, snapshot)
    assert main([*argv, "--platform", path, "--", sys.executable, "-c", "pass"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if any(s in line for s in SAID)]
    assert said == [f"kernelpolicy: note: {note}" for note in notes]
    assert started[0][SWITCH] == child
