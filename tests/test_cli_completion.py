"""Shell completion generated from the parser: bash loads it and completes, in a real bash."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kernelpolicy.cli import build_parser
from kernelpolicy.cli.completion import bash_script, commands_of, zsh_script

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def _complete(script: str, words: list[str]) -> list[str]:
    """COMPREPLY of bash's completion function for ``words`` (the last is being typed)."""
    array = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}\n"
        "_kernelpolicy\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stderr == ""
    return [line for line in done.stdout.splitlines() if line]


@needs_bash
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        pytest.param(["kernelpolicy", "expl"], ["explain"], id="command"),
        pytest.param(["kernelpolicy", "e"], ["explain", "env", "exec"], id="commands"),
        pytest.param(["kernelpolicy", "matrix", "--o"], ["--output"], id="option"),
        pytest.param(["kernelpolicy", "env", "--engine", "vllm", "--format", "k8"],
                     ["k8s", "k8s-json"], id="choice-of-option"),
        pytest.param(["kernelpolicy", "completion", "z"], ["zsh"], id="positional-choice"),
        pytest.param(["kernelpolicy", "explain", "--json", "--model-kind", "m"],
                     ["mha", "mla", "mla-sparse"], id="after-another-option"),
    ],
)  # fmt: skip
def test_bash_completes(words: list[str], expected: list[str]) -> None:
    """bash sources the generated script and completes commands, options and choices."""
    script = bash_script(build_parser())
    assert sorted(_complete(script, words)) == sorted(expected)


@needs_bash
def test_bash_registers_the_completion() -> None:
    """Sourcing the script registers the function for the command (``complete -p``)."""
    script = bash_script(build_parser())
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", f"{script}\ncomplete -p kernelpolicy"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert "-F _kernelpolicy kernelpolicy" in done.stdout


def test_every_command_is_in_both_scripts() -> None:
    """Each sub-command of the parser, and each of its options, is in both scripts."""
    parser = build_parser()
    bash, zsh = bash_script(parser), zsh_script(parser)
    for command in commands_of(parser):
        assert f"        {command.name}) " in bash
        assert f"'{command.name}:" in zsh
        for option in command.options:
            assert option in bash
            assert option in zsh
    assert zsh.startswith("#compdef kernelpolicy\n")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses() -> None:
    """zsh reads the generated script without a syntax error."""
    done = subprocess.run(
        ["zsh", "-n"], input=zsh_script(build_parser()), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
