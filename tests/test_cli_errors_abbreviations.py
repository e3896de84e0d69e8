"""argparse abbreviations are off everywhere: a near-miss option is an error, not another
option, on every parser of the CLI and every ArgumentParser in the repository."""

from __future__ import annotations

import argparse
import re

import pytest

from kernelpolicy.cli import build_parser
from tests.cli_error_helpers import CPU, kernelpolicy
from tests.helpers import ROOT


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
