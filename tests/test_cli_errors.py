"""Every CLI mistake is one line on stderr with exit 2, never a traceback or a silent success."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.cli import build_parser, main
from kernelpolicy.cli.common import run_guarded
from kernelpolicy.errors import KernelPolicyError
from tests.helpers import FIXTURES, ROOT

CPU = str(FIXTURES / "cpu.json")
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="verify needs torch")


def _cuda() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


def kernelpolicy(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python3 -m kernelpolicy ARGV`` as a user runs it, with this checkout on PYTHONPATH."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KERNELPOLICY_") or k == "KERNELPOLICY_CACHE_DIR"
    }
    full.update({"PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", *argv],
        capture_output=True, text=True, env=full, cwd=cwd, check=False, timeout=300,
    )  # fmt: skip


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("kernelpolicy: error: ")
    return lines[0]


USAGE_ERRORS = [
    pytest.param(
        ["status", "--address", ""], {}, ["--address '': no HOST:PORT"], id="status-address-empty"
    ),
    pytest.param(
        ["status", "--clear-halt", "sampler.top_k_top_p", "--address", "127.0.0.1:50151"], {},
        ["--clear-halt with --address 127.0.0.1:50151: it goes over the daemon's unix socket"],
        id="status-clear-halt-over-tcp",
    ),
    pytest.param(
        ["diff", "--against", "+docs/rollout/step-50", "--platforms", "/nonexistent"], {},
        ["--platforms /nonexistent: no such file"], id="diff-platforms-missing",
    ),
    pytest.param(
        ["diff", "--against", "+docs/rollout/step-50", "--daemons", "@/nonexistent"], {},
        ["--daemons @/nonexistent: no such file"], id="diff-daemons-file-missing",
    ),
    pytest.param(
        ["diff", "--against", "+docs/rollout/step-50", "--steps", "1,0.001"], {},
        ["--steps: 0.001 has more than two decimals"], id="diff-steps-too-fine",
    ),
    pytest.param(
        ["serve", "--ready-requires-current-policy", "--listen", "127.0.0.1:0"], {},
        ["--ready-requires-current-policy: it changes /readyz, which only --http serves"],
        id="serve-ready-without-http",
    ),
    pytest.param(
        ["status", "--address", "/run/kp.sock"], {},
        ["--address '/run/kp.sock': a path; did you mean unix:/run/kp.sock?"],
        id="status-address-a-path",
    ),
    pytest.param(
        ["diff", "--against", "+docs/rollout/step-50", "--daemons", "node1:50151,http://node2:50151"],
        {},
        ["--daemons 'http://node2:50151': a URL: give HOST:PORT"],
        id="diff-daemons-a-url",
    ),
    pytest.param(
        ["matrix", "--platforms", "/nonexistent"], {},
        ["--platforms /nonexistent: no such directory; expected a directory of platform "
         "snapshots"],
        id="matrix-platforms-missing",
    ),
    pytest.param(
        ["matrix", "--platforms", CPU], {}, [f"--platforms {CPU}: not a directory"],
        id="matrix-platforms-a-file",
    ),
    pytest.param(
        ["matrix", "--platforms", str(ROOT / "docs")], {}, ["no *.json platform snapshots"],
        id="matrix-platforms-no-snapshots",
    ),
    pytest.param(
        ["probe", "--root", "/nonexistent"], {},
        ["--root /nonexistent: no such directory; expected the directory to read sysfs"],
        id="probe-root-missing",
    ),
    pytest.param(
        ["explain", "--platform", CPU, "--env", "KERNELPOLICY_FORCE_NO_SUCH=torch"], {},
        ["KERNELPOLICY_FORCE_NO_SUCH names no feature of the policies; known: ",
         "KERNELPOLICY_FORCE_SAMPLER_GREEDY (sampler.greedy)"],
        id="explain-force-typo",
    ),
    pytest.param(
        ["explain"], {"KERNELPOLICY_FORCE_SAMPLER_GREEDDY": "torch"},
        ["KERNELPOLICY_FORCE_SAMPLER_GREEDDY names no feature of the policies"],
        id="explain-force-typo-in-the-environment",
    ),
    pytest.param(
        ["matrix", "--env", "KERNELPOLICY_FORCE_NO_SUCH=torch"], {},
        ["KERNELPOLICY_FORCE_NO_SUCH names no feature"], id="matrix-force-typo",
    ),
    pytest.param(
        ["explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"no.such": "torch"}'],
        {}, ["KERNELPOLICY_OVERRIDES names unknown feature 'no.such'; the policies define: "],
        id="overrides-unknown-feature",
    ),
    pytest.param(
        ["explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"mhc": "nope"}'], {},
        ["KERNELPOLICY_OVERRIDES['mhc'] = 'nope' is not an implementation of mhc; expected one "
         "of aiter, torch"],
        id="overrides-unknown-impl",
    ),
    pytest.param(
        ["explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"mhc": 3}'], {},
        ["KERNELPOLICY_OVERRIDES: expected a JSON object of feature -> implementation name"],
        id="overrides-wrong-type",
    ),
    pytest.param(
        ["explain", "--platform", CPU], {"KERNELPOLICY_POLICY_PATHS": "/nonexistent"},
        ["/nonexistent: no such policy file or directory (from KERNELPOLICY_POLICY_PATHS)"],
        id="policy-paths-variable-missing",
    ),
    pytest.param(
        ["matrix", "--policies", "/nonexistent"], {},
        ["/nonexistent: no such policy file or directory (from --policies)"],
        id="policies-option-missing",
    ),
    pytest.param(
        ["explain", "--policies", "/nonexistent\x1b[2J"], {},
        ["/nonexistent\\x1b[2J: no such policy file"], id="control-characters-shown-not-sent",
    ),
    pytest.param(
        ["explain", "--platform", CPU, "no.such.feature"], {},
        ["unknown feature 'no.such.feature'; the policies define: "],
        id="explain-unknown-feature",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "env", "expected"), USAGE_ERRORS)
def test_mistakes_are_one_line_and_exit_2(
    argv: list[str], env: dict[str, str], expected: list[str]
) -> None:
    """What was wrong and what is accepted, on one line; exit 2; nothing on stdout."""
    done = kernelpolicy(*argv, env=env)
    assert done.returncode == 2, done.stderr
    line = _one_line(done)
    for part in expected:
        assert part in line
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("argv", "usage_of", "expected"),
    [
        pytest.param(["env"], "kernelpolicy env", "required: --engine", id="missing-required"),
        pytest.param(
            ["explain", "--platfrom", CPU], "kernelpolicy explain", "did you mean --platform?",
            id="mistyped-option-of-a-command",
        ),
        pytest.param(
            ["diff", "--platforms", "x"], "kernelpolicy diff", "required: --against",
            id="another-command",
        ),
        pytest.param(["nosuch"], "kernelpolicy [-h]", "invalid choice: 'nosuch'", id="no-command"),
        pytest.param(
            ["env", "--engine", "vllm", "--format", "k8s", "--json"], "kernelpolicy env",
            "argument --json: not allowed with argument --format", id="env-two-formats",
        ),
        pytest.param(
            ["labels", "--json", "--format", "nfd"], "kernelpolicy labels",
            "argument --format: not allowed with argument --json", id="labels-two-formats",
        ),
    ],
)  # fmt: skip
def test_usage_mistakes_name_the_command(argv: list[str], usage_of: str, expected: str) -> None:
    """argparse's usage errors: the usage of the command they are about first (its options),
    then one line that starts `kernelpolicy: error:` whichever command it was."""
    done = kernelpolicy(*argv)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"usage: {usage_of}")
    assert lines[-1].startswith("kernelpolicy: error: ")
    assert expected in lines[-1]
    assert [line for line in lines if ": error:" in line] == [lines[-1]]
    assert done.stdout == ""


# verify imports torch: these run in this process (torch imported once) through the same
# main() and error boundary; the first also runs as a process below.
VERIFY_ERRORS = [
    pytest.param(
        ["verify", "--device", "cuda", "--feature", "sampler.greedy", "--no-store"],
        ["--device cuda: torch", "sees no CUDA or ROCm device",
         "accepted on this machine: --device cpu"],
        marks=[needs_torch, pytest.mark.skipif(_cuda(), reason="this machine has a GPU")],
        id="verify-device-cuda-on-cpu-torch",
    ),
    pytest.param(
        ["verify", "--device", "tpu", "--no-store"],
        ["--device 'tpu': expected cpu or cuda"], marks=needs_torch, id="verify-device-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "mypkg.kernels:greedy",
         "--guard", "bogus"],
        ["--guard 'bogus': unknown guard; known: clamp_token_ids"],
        marks=needs_torch, id="verify-guard-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "nomod:fn"],
        ["--entry nomod:fn: cannot import module 'nomod'", "No module named 'nomod'"],
        marks=needs_torch, id="verify-entry-not-importable",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "kernelpolicy.cli:nofn"],
        ["--entry kernelpolicy.cli:nofn: module 'kernelpolicy.cli' has no 'nofn'"],
        marks=needs_torch, id="verify-entry-no-function",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "tests.entry_raises:fn"],
        ["--entry tests.entry_raises:fn: importing 'tests.entry_raises' failed: RuntimeError: "
         "boom at import"],
        marks=needs_torch, id="verify-entry-import-raises",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry",
         "kernelpolicy.limits:MAX_NESTING_DEPTH"],
        ["--entry kernelpolicy.limits:MAX_NESTING_DEPTH: 'MAX_NESTING_DEPTH' is not callable"],
        marks=needs_torch, id="verify-entry-not-callable",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "nocolon"],
        ["--entry 'nocolon': expected MODULE:FUNCTION"],
        marks=needs_torch, id="verify-entry-malformed",
    ),
    pytest.param(
        ["verify", "--impl", "nope", "--no-store"],
        ["--impl 'nope': no built-in implementation has that name; known: ", "torch"],
        marks=needs_torch, id="verify-impl-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "rmsnorm", "--impl", "flashinfer", "--no-store"],
        ["--impl 'flashinfer': no built-in implementation of rmsnorm has that name; known: torch"],
        marks=needs_torch, id="verify-impl-not-of-feature",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "expected"), VERIFY_ERRORS)
def test_verify_mistakes_exit_2(
    argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """verify refuses what would crash (a bad --device or --guard) or pass in silence (an
    --entry that cannot be imported, an --impl that selects nothing): one line, exit 2."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    for part in expected:
        assert part in lines[0]
    assert captured.out == ""


@needs_torch
@pytest.mark.skipif(_cuda(), reason="this machine has a GPU")
def test_verify_device_cuda_as_a_process() -> None:
    """The AssertionError traceback of `verify --device cuda` on CPU torch is one line now."""
    done = kernelpolicy("verify", "--device", "cuda", "--feature", "sampler.greedy", "--no-store")
    assert done.returncode == 2
    assert "--device cuda: torch" in _one_line(done)


def test_overrides_error_names_the_overrides_variable() -> None:
    """A bad KERNELPOLICY_OVERRIDES entry is not reported as a KERNELPOLICY_FORCE_* variable."""
    done = kernelpolicy(
        "explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"mhc": "nope"}'
    )
    assert "KERNELPOLICY_FORCE" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["matrix", "--platform", "a100.json"], id="matrix-platform-for-platforms"),
        pytest.param(["explain", "--plat", CPU], id="explain-prefix-of-platform"),
        pytest.param(["check", "--js"], id="check-prefix-of-json"),
        pytest.param(["probe", "--no-nv"], id="probe-prefix-of-no-nvml"),
    ],
)
def test_abbreviations_are_refused(argv: list[str]) -> None:
    """argparse abbreviations are off: a near-miss option is an error, not another option."""
    done = kernelpolicy(*argv)
    assert done.returncode == 2
    assert f"unrecognized arguments: {argv[1]}" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_parser_refuses_abbreviations() -> None:
    """allow_abbrev=False on the top parser and every sub-command, however registered."""
    parser = build_parser()
    seen = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen.extend(action.choices.values())
    assert len(seen) > 5
    assert all(p.allow_abbrev is False for p in seen)


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(["matrix", "--model-kind", "mla-sparse"], {}, "ERROR",
                     id="matrix-with-error-cells"),
        pytest.param(["matrix", "--json", "--model-kind", "mla-sparse"], {},
                     '"error_code": "no_implementation"', id="matrix-json-error-detail"),
        pytest.param(["explain", "--platform", CPU, "--env", "KERNELPOLICY_FORCE_MHC=aiter",
                      "--model-kind", "mla-sparse"], {},
                     "KERNELPOLICY_FORCE_MHC=aiter forces aiter, which is not supported here",
                     id="explain-forced-unsupported"),
    ],
)  # fmt: skip
def test_error_decisions_exit_1(argv: list[str], env: dict[str, str], expected: str) -> None:
    """A decision that is an error is a finding (exit 1), shown on stdout, for both commands,
    and each error that set the exit status is named on stderr."""
    done = kernelpolicy(*argv, env=env)
    assert done.returncode == 1, done.stderr
    assert expected in done.stdout
    assert done.stderr.splitlines()
    assert all(line.startswith("kernelpolicy: exit 1: ") for line in done.stderr.splitlines())


def test_probe_root_that_exists_is_probed(tmp_path: Path) -> None:
    """An empty but existing --root is a valid fake tree: exit 0, no GPU."""
    done = kernelpolicy("probe", "--root", str(tmp_path), "--no-nvml", "--json")
    assert done.returncode == 0, done.stderr
    assert '"vendor": "none"' in done.stdout


@needs_torch
@pytest.mark.parametrize(
    ("blocked", "missing"),
    [
        pytest.param(["scipy"], "missing here: scipy.", id="scipy"),
        pytest.param(["torch"], "missing here: torch.", id="torch"),
        pytest.param(["torch", "scipy"], "missing here: torch, scipy.", id="torch-and-scipy"),
    ],
)
def test_verify_names_every_missing_package(blocked: list[str], missing: str) -> None:
    """Without the verify extra, verify names each missing package and the extra to install."""
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from kernelpolicy.cli import main\n"
        "sys.exit(main(['verify', '--no-store']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 2
    line = _one_line(done)
    assert "kernelpolicy verify needs torch, scipy, numpy; " + missing in line
    assert "pip install 'kernelpolicy[verify]'" in line


def _raise(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        pytest.param(KernelPolicyError("bad input"), 2, "kernelpolicy: error: bad input",
                     id="kernelpolicy-error"),
        pytest.param(FileNotFoundError(2, "No such file or directory", "/x/y"), 2,
                     "kernelpolicy: error: FileNotFoundError (/x/y): No such file or directory",
                     id="os-error-with-file"),
        pytest.param(PermissionError(13, "Permission denied"), 2,
                     "kernelpolicy: error: PermissionError: Permission denied", id="os-error"),
        pytest.param(ValueError("x" * 5000), 2, "kernelpolicy: error: ValueError: xxx",
                     id="value-error-cut"),
        pytest.param(RecursionError("deep"), 2, "kernelpolicy: error: RecursionError: deep",
                     id="recursion-error"),
        pytest.param(RuntimeError("bug"), 2,
                     "kernelpolicy: error: internal error, please report it: RuntimeError: bug",
                     id="any-other-exception"),
    ],
)  # fmt: skip
def test_boundary_is_total(
    exc: BaseException, code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever a command raises becomes an exit code and at most one line on stderr."""
    assert run_guarded(argparse.Namespace(run=_raise(exc))) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(message)
    assert len(err) < 600


def test_closed_pipe_is_not_an_error() -> None:
    """`kernelpolicy explain --json | true` (the reader is gone first): no traceback."""
    script = (
        f"{sys.executable} -m kernelpolicy explain --platform {CPU} --json | true; "
        "echo ${PIPESTATUS[0]}"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.stdout.strip() == "0"
    assert "Traceback" not in done.stderr
    assert "BrokenPipe" not in done.stderr


def test_unreadable_version_is_worded_once(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable library version reads "found unreadable version 'banana'", not "cannot
    read unreadable version"."""
    from tests.helpers import resolve_on, with_libraries

    platform = with_libraries("mi325x", amd_aiter="banana")
    decision = resolve_on(platform, VLLM_ROCM_USE_AITER="1").decision("sampler.top_k_top_p")
    aiter = next(c for c in decision.candidates if c.impl == "aiter")
    message = aiter.failures[0].message
    assert "but found unreadable version 'banana' (expected PEP 440" in message
    assert "cannot read unreadable" not in message


CEL_POLICY = """schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy"
fallback = "torch"
context = {{ tokens = "int", ratio = "double" }}
[[features."sampler.greedy".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:greedy"
when = '{when}'
[[features."sampler.greedy".candidates]]
impl = "torch"
"""


@pytest.mark.parametrize(
    ("when", "operands"),
    [
        pytest.param('tokens + "x" > 0', 'operands: tokens (int), "x" (string), 0 (int)',
                     id="int-plus-string"),
        pytest.param("tokens + ratio > 1", "operands: tokens (int), ratio (double), 1 (int)",
                     id="int-versus-double"),
        pytest.param("arch * 2 > 1", "operands: arch (string), 2 (int), 1 (int)",
                     id="string-times-int"),
    ],
)  # fmt: skip
def test_cel_type_error_names_the_operands(
    when: str, operands: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CEL type error names each operand with its type, so the wrong one shows."""
    policy = tmp_path / "p.toml"
    policy.write_text(CEL_POLICY.format(when=when))
    assert main(["check", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "CEL expression does not type-check: " in out
    assert operands in out
    assert "convert explicitly with int(x), uint(x), double(x) or string(x)" in out


def _call_text(text: str, start: int) -> str:
    """The argument text of the call whose "(" ends at ``start``, brackets balanced."""
    depth = 1
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    return text[start:]


def test_no_parser_in_the_repository_allows_abbreviations() -> None:
    """Every ArgumentParser in the package, scripts and benchmarks is built with
    allow_abbrev=False (sub-commands get it from disable_abbreviations, checked above)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
        for folder in ("kernelpolicy", "scripts", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for text in [path.read_text()]
        for match in re.finditer(r"ArgumentParser\(", text)
        if "allow_abbrev=False" not in _call_text(text, match.end())
    ]
    assert offenders == []
