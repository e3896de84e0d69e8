"""Usage mistakes of every sub-command: exit 2 with a hint, never a traceback (argparse level)."""

from __future__ import annotations

import argparse

import pytest

from kernelpolicy.cli import build_parser, main

REQUIRED = {
    "env": ["--engine", "vllm"],
    "exec": ["--engine", "vllm"],
    "diff": ["--against", "NEW/"],
    "completion": ["bash"],
}
"""What each sub-command needs before an unknown option is the only mistake left."""
PRINTS = "exec prints no settings; kernelpolicy env --engine ENGINE does"


def _subcommands() -> list[str]:
    parser = build_parser()
    return [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv)'s exit status, stdout and stderr; a traceback fails the test."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", [pytest.param(c, id=c) for c in _subcommands()])
def test_every_subcommand_refuses_an_unknown_option(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown option of any sub-command is exit 2 naming it: no sub-command's own argument
    may take the slot main() reads the sub-command's name from (exec's COMMAND once did)."""
    code, out, err = _usage_error([command, *REQUIRED.get(command, []), "--no-such-option"], capsys)
    assert code == 2
    assert out == ""
    assert err.splitlines()[-1] == "kernelpolicy: error: unrecognized arguments: --no-such-option"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        pytest.param(["exec", "--engine", "vllm", "--env", "X=1", "--", "true"],
                     "--env (--env: exec reads its own environment: VAR=VALUE kernelpolicy exec "
                     "--engine ...)",
                     id="exec-env"),
        pytest.param(["exec", "--engine", "vllm", "--json", "--", "true"],
                     f"--json (--json: {PRINTS})", id="exec-json"),
        pytest.param(["exec", "--engine", "vllm", "--format", "dotenv", "--", "true"],
                     f"--format (--format: {PRINTS})", id="exec-format"),
        pytest.param(["exec", "--engine", "vllm", "--bogus", "--", "true"], "--bogus",
                     id="exec-bogus"),
        pytest.param(["exec", "--engine", "vllm", "--engin", "x", "--", "true"],
                     "--engin (--engin: did you mean --engine or --engine-version?)",
                     id="exec-close-option"),
        pytest.param(["exec", "--engine", "vllm", "--address", "x", "--", "true"],
                     "--address (--address: not an option of exec; explain, status take it)",
                     id="option-of-other-commands"),
    ],
)  # fmt: skip
def test_exec_usage_mistakes_name_the_option(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """exec's options mistaken for env's or explain's: exit 2, the option, what to do instead."""
    code, out, err = _usage_error(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("usage: kernelpolicy exec ")
    assert err.splitlines()[-1] == f"kernelpolicy: error: unrecognized arguments: {hint}"


@pytest.mark.parametrize(
    ("argv", "code", "stdout_has", "stderr_has"),
    [
        pytest.param([], 2, [], ["usage: kernelpolicy ", "\ncommands:\n", "  explain ",
                                 "kernelpolicy: error: no command given; 'kernelpolicy --help'"],
                     id="no-command"),
        pytest.param(["--help"], 0, ["usage: kernelpolicy ", "examples:"], [], id="help"),
    ],
)  # fmt: skip
def test_no_command(
    argv: list[str],
    code: int,
    stdout_has: list[str],
    stderr_has: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bare `kernelpolicy` is a usage mistake (exit 2, nothing on stdout, the commands on
    stderr); `--help` is the asked-for help on stdout, exit 0."""
    got, out, err = _usage_error(argv, capsys)
    assert got == code
    assert all(part in out for part in stdout_has)
    assert all(part in err for part in stderr_has)
    assert bool(out) == bool(stdout_has)
    assert bool(err) == bool(stderr_has)
    if err:
        assert err.splitlines()[-1].startswith("kernelpolicy: error: ")


def test_check_names_its_path_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """`check --policies X` (the option of the other commands) says check takes PATH, and
    check's help names the +DIR form."""
    code, out, err = _usage_error(["check", "--policies", "x"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        "kernelpolicy: error: unrecognized arguments: --policies (--policies: check takes the "
        "policy paths as arguments: kernelpolicy check PATH..., +DIR adding DIR to the bundled "
        "pack)"
    )
    code, out, err = _usage_error(["check", "--help"], capsys)
    assert code == 0
    assert "+DIR adds DIR to the bundled pack" in " ".join(out.split())
    assert "  kernelpolicy check +policies.d/ incident.toml" in out.splitlines()
