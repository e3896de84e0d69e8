"""An option two commands share is declared once and says the same thing in both: serve's
--warm-vocab, --warm-jobs and --warm-device are warm's --vocab, --jobs and --device (said to go
with --warm); --policies reads the same in every command that resolves from the policy files.
Before, each was written twice, and serve's --warm-device had lost warm's explanation."""

from __future__ import annotations

import argparse

import pytest

from kernelpolicy.cli import build_parser


def _option(command: str, flag: str) -> argparse.Action:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = commands.choices[command]
    action: argparse.Action = next(a for a in sub._actions if flag in a.option_strings)
    return action


def _said(action: argparse.Action) -> tuple[str | None, object, object, object]:
    return action.help, action.default, action.metavar, action.type


@pytest.mark.parametrize("option", ["vocab", "jobs", "device"])
def test_serves_warm_options_are_warms(option: str) -> None:
    warm, serve = _option("warm", f"--{option}"), _option("serve", f"--warm-{option}")
    assert serve.help == f"with --warm: {warm.help}"
    assert _said(serve)[1:] == _said(warm)[1:]
    assert serve.dest == f"warm_{option}"


@pytest.mark.parametrize("command", ["explain", "env", "exec", "serve", "matrix", "warm", "labels"])
def test_policies_reads_the_same_everywhere(command: str) -> None:
    assert _said(_option(command, "--policies")) == _said(_option("explain", "--policies"))


def test_matrix_says_its_env_is_set_on_every_platform() -> None:
    matrix, explain = _option("matrix", "--env"), _option("explain", "--env")
    assert matrix.help == "set on every platform (repeatable; K= unsets it)"
    assert (matrix.default, matrix.metavar) == (explain.default, explain.metavar)
