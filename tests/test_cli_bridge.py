"""kernelpolicy env and exec as an operator runs them: real processes, real shells."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from tests.consumers import kubernetes_expand

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "kernelpolicy/fixtures/platforms"
WEIRD_VALUE = "a b'c\"d$e\\f;g"  # quotes, a dollar, a backslash, a semicolon
WEIRD = json.dumps(WEIRD_VALUE)  # a JSON string is a TOML basic string here

POLICY = f"""schema = "kernelpolicy.policy/v1"
[features."attention.backend"]
description = "Attention backend"
fallback = "engine_default"
in_process = false
[[features."attention.backend".candidates]]
impl = "flash_attn"
vendor = "nvidia"
[[features."attention.backend".candidates.engines.vllm]]
env = {{ KP_TEST_WEIRD = {WEIRD}, KP_TEST_PLAIN = "1" }}
flags = ["--attention-backend", "FLASH_ATTN"]
[[features."attention.backend".candidates]]
impl = "engine_default"
engines.vllm = [{{}}]
"""


def platform(name: str) -> str:
    return str(FIXTURES / f"{name}.json")


def kernelpolicy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", *args],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(POLICY)
    return path


@pytest.mark.parametrize(
    ("fixture", "value"),
    [
        pytest.param("h100-sxm", "1", id="h100-with-flashinfer"),
        pytest.param("t4", "0", id="t4-sm75"),
        pytest.param("h100-real", "0", id="h100-without-flashinfer"),
    ],
)
def test_env_tells_vllm_about_the_flashinfer_sampler(
    capsys: pytest.CaptureFixture[str], fixture: str, value: str
) -> None:
    """The issue's done-when: FlashInfer sampler on an H100 with flashinfer-python, not a T4."""
    assert main(["env", "--engine", "vllm", "--platform", platform(fixture)]) == 0
    assert f"export VLLM_USE_FLASHINFER_SAMPLER={value}\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fixture_name", "why", "hinted"),
    [
        pytest.param("t4", "needs compute capability >=8.0,<=12.1, found 7.5", False,
                     id="t4-no-install-helps"),
        pytest.param("h100-real", "needs flashinfer-python (not installed)", True,
                     id="h100-the-install-is-all-it-lacks"),
    ],
)  # fmt: skip
def test_env_error_exits_1_with_explains_text(
    fixture_name: str, why: str, hinted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision in error: nothing on stdout, explain's error on stderr, and the install hint
    only where installing would make the candidate run (a T4 lacks the capability anyway)."""
    code = main([
        "env", "--engine", "vllm", "--platform", platform(fixture_name),
        "--env", "VLLM_USE_FLASHINFER_SAMPLER=1",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert (
        "kernelpolicy: error: sampler.top_k_top_p: VLLM_USE_FLASHINFER_SAMPLER=1 requires "
        "flashinfer, which is not supported here: "
    ) in captured.err
    assert why in captured.err
    assert ("hint: pip install 'flashinfer-python>=0.2.3'" in captured.err) is hinted


def test_unknown_engine_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An engine no policy names: exit 2 with the names that exist."""
    assert main(["env", "--engine", "tgi", "--platform", platform("t4")]) == 2
    assert "the policies name: " in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_format_survives_a_real_shell(policy_file: Path) -> None:
    """Quoted with shlex: bash reads back exactly the value, quotes and $ included."""
    out = kernelpolicy(
        "env", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--policies", str(policy_file), "--format", "shell",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "# append to the vllm command line: --attention-backend FLASH_ATTN" in out.stdout
    shell = subprocess.run(
        ["bash", "-c", out.stdout + '\nprintf "%s" "$KP_TEST_WEIRD"'],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert shell.stdout == WEIRD_VALUE


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("recipe", "stops"),
    [
        pytest.param('s=$(kernelpolicy env {args}) || exit; eval "$s"', True, id="documented"),
        pytest.param('eval "$(kernelpolicy env {args})"', False, id="eval-of-nothing-succeeds"),
        pytest.param('s=$(kernelpolicy env {args}) && eval "$s"', False, id="and-list-is-exempt"),
    ],
)
def test_the_documented_recipe_stops_a_script_when_env_refuses(recipe: str, stops: bool) -> None:
    """env --help's recipe: under set -e an env that refuses (exit 1, no output) stops the
    script; eval "$(...)" does not, which is why the docs no longer show it."""
    args = f"--engine vllm --platform {platform('t4')} --env VLLM_USE_FLASHINFER_SAMPLER=1"
    script = 'set -e\nkernelpolicy() { python3 -m kernelpolicy "$@"; }\n'
    script += recipe.format(args=args) + "\necho continued\n"
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    shell = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=base, timeout=120, check=False
    )
    assert "VLLM_USE_FLASHINFER_SAMPLER" in shell.stderr  # env refused
    assert ("continued" not in shell.stdout) is stops


@pytest.mark.parametrize("fmt", ["k8s", "k8s-json", "json"])
def test_structured_formats_carry_the_exact_values(
    capsys: pytest.CaptureFixture[str], policy_file: Path, fmt: str
) -> None:
    """k8s (YAML), k8s-json and json hold every value exactly: the container gets it through
    the kubelet's $(NAME) expansion."""
    assert main([
        "env", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--policies", str(policy_file), "--format", fmt,
    ]) == 0  # fmt: skip
    out = capsys.readouterr().out
    if fmt == "k8s":
        yaml = pytest.importorskip("yaml")
        document = yaml.safe_load(out)
    else:
        document = json.loads(out)
    env = document["env"]
    pairs = (
        {e["name"]: kubernetes_expand(e["value"], {}) for e in env}
        if isinstance(env, list)
        else env
    )
    assert pairs == {"KP_TEST_WEIRD": WEIRD_VALUE, "KP_TEST_PLAIN": "1"}
    if fmt == "k8s-json":
        assert document["args"] == ["--attention-backend", "FLASH_ATTN"]


def test_dotenv_refuses_a_value_no_quoting_carries(
    capsys: pytest.CaptureFixture[str], policy_file: Path
) -> None:
    """The weird value has a ' and a $: python-dotenv and a shell read no quoting of it alike,
    so dotenv refuses it (one line, exit 2) rather than write something else
    (tests/test_bridge_encoding.py reads the values it can carry back in both)."""
    assert main([
        "env", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--policies", str(policy_file), "--format", "dotenv",
    ]) == 2  # fmt: skip
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "the dotenv format cannot carry the value of KP_TEST_WEIRD" in captured.err


CHILD = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))"


def test_exec_starts_the_child_with_the_settings(policy_file: Path) -> None:
    """exec -- python: the child sees the variables and the appended flags."""
    out = kernelpolicy(
        "exec", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--", sys.executable, "-c", CHILD, "serve", "model",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout)
    assert child["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    assert child["argv"] == ["serve", "model"]
    flagged = kernelpolicy(
        "exec", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--policies", str(policy_file), "--", sys.executable, "-c", CHILD, "serve",
    )  # fmt: skip
    child = json.loads(flagged.stdout)
    assert child["argv"] == ["serve", "--attention-backend", "FLASH_ATTN"]
    assert child["env"]["KP_TEST_WEIRD"] == WEIRD_VALUE


def test_exec_env_shows_the_settings() -> None:
    """The issue's done-when: `exec -- env` shows the settings in the child."""
    env_tool = shutil.which("env")
    if env_tool is None:
        pytest.skip("needs env(1)")
    out = kernelpolicy("exec", "--engine", "vllm", "--platform", platform("t4"), "--", "env")
    assert out.returncode == 0, out.stderr
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in out.stdout.splitlines()


def test_exec_never_overwrites_what_the_user_set() -> None:
    """A variable set by the user reaches the child unchanged, with a warning."""
    out = kernelpolicy(
        "exec", "--engine", "vllm", "--platform", platform("h100-sxm"),
        "--", sys.executable, "-c", CHILD,
        env={"VLLM_USE_FLASHINFER_SAMPLER": "true"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "true"
    assert "VLLM_USE_FLASHINFER_SAMPLER=true is set in the environment and kept" in out.stderr


def test_exec_refuses_to_start_on_an_error(tmp_path: Path) -> None:
    """A required kernel that cannot run: exit 1 with the reasons, the child never runs (vLLM
    0.16, a sparse-MLA model: the indexer's requirement holds from 0.15, where its layer raises
    without aiter)."""
    marker = tmp_path / "started"
    out = kernelpolicy(
        "exec", "--engine", "vllm", "--engine-version", "0.16.0", "--platform",
        platform("mi300x"), "--model-kind", "mla-sparse",
        "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    )  # fmt: skip
    assert out.returncode == 1
    assert "sparse_attn_indexer is required here and no implementation is usable" in out.stderr
    assert "hint: set VLLM_ROCM_USE_AITER=1" in out.stderr
    assert "not starting the engine" in out.stderr
    assert not marker.exists()


def test_exec_logs_the_decision_with_its_fingerprint() -> None:
    """One JSON event, kernelpolicy.exec, with the fingerprint, settings and command."""
    out = kernelpolicy(
        "exec", "--engine", "vllm", "--platform", platform("t4"), "--", "true",
        env={"KERNELPOLICY_LOG_FORMAT": "json"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (event,) = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert event["event"] == "kernelpolicy.exec"
    assert len(event["fingerprint"]) == 16
    assert event["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert event["command"] == "true"


@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        pytest.param(["kp-no-such-command-xyz"], 127, "command not found", id="not-found"),
        pytest.param([], 2, "no command given", id="no-command"),
    ],
)
def test_exec_bad_command(command: list[str], code: int, message: str) -> None:
    """A missing command is reported, never a traceback."""
    out = kernelpolicy("exec", "--engine", "vllm", "--platform", platform("t4"), "--", *command)
    assert out.returncode == code
    assert message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("target", "mode", "code", "message"),
    [
        pytest.param(None, 0, 127, "command not found", id="dangling-link-on-path"),
        pytest.param("file", 0o644, 126, "permission denied", id="not-executable-on-path"),
    ],
)  # fmt: skip
def test_exec_a_command_on_path_that_cannot_run(
    tmp_path: Path, target: str | None, mode: int, code: int, message: str
) -> None:
    """A name on PATH that cannot start (a dangling link passes the PATH lookup before the
    log; a file without execute permission) ends as the shell would, never a traceback (found
    untested by a coverage review)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "kp-engine"
    if target is None:
        command.symlink_to(tmp_path / "nonexistent")
    else:
        command.write_text("#!/bin/sh\n")
        command.chmod(mode)
    out = kernelpolicy(
        "exec", "--engine", "vllm", "--platform", platform("t4"), "--", "kp-engine",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert out.returncode == code, out.stderr
    assert f"kp-engine: {message}" in out.stderr
    assert "Traceback" not in out.stderr


def test_explain_shows_what_each_engine_is_told(capsys: pytest.CaptureFixture[str]) -> None:
    """explain's text and JSON carry, per decision, each engine's settings."""
    assert main(["explain", "--platform", platform("h100-sxm")]) == 0
    text = capsys.readouterr().out
    assert "engines: what each is told (kernelpolicy env --engine NAME prints it)" in text
    assert "VLLM_USE_FLASHINFER_SAMPLER=1" in text
    assert "--sampling-backend" not in text  # SGLang's own default there (the sixth audit)
    assert main(["explain", "--platform", platform("h100-sxm"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    told = document["decisions"]["sampler.top_k_top_p"]["engines"]["vllm"]
    assert told["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    assert told["status"] == "told"
    sglang = document["decisions"]["sampler.top_k_top_p"]["engines"]["sglang"]
    assert (sglang["status"], sglang["flags"]) == ("default", [])
