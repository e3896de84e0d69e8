"""Every CLI mistake is one line on stderr with exit 2, never a traceback or a silent success;
a decision that is an error is exit 1; the lines name what was wrong (the verify command's
mistakes: tests/test_cli_errors_verify.py; abbreviations and the error boundary: their own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.cli import main
from tests.cli_error_helpers import CPU, kernelpolicy, one_line
from tests.helpers import ROOT

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
    line = one_line(done)
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


def test_overrides_error_names_the_overrides_variable() -> None:
    """A bad KERNELPOLICY_OVERRIDES entry is not reported as a KERNELPOLICY_FORCE_* variable."""
    done = kernelpolicy(
        "explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"mhc": "nope"}'
    )
    assert "KERNELPOLICY_FORCE" not in done.stderr


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
