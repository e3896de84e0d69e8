"""``--help`` fits the terminal: prose wraps to its width, examples stay as written."""

from __future__ import annotations

import argparse
import json

import pytest

from kernelpolicy.cli import build_parser, main
from kernelpolicy.cli.common import HelpFormatter, counted
from tests.helpers import ROOT

COLUMNS = 80

EXAMPLES = {  # each command's help, and one example line of it that must print as written
    "": "  kernelpolicy probe --json > node.json   the same as a platform snapshot",
    "probe": None,
    "explain": "  kernelpolicy explain sampler.top_k_top_p --platform node.json --json",
    "check": "  kernelpolicy check my-policies/ --platform node.json",
    "env": '  s=$(kernelpolicy env --engine vllm --format shell) || exit; eval "$s"',
    "exec": "      vllm serve meta-llama/Llama-3.1-8B-Instruct",
    "matrix": "  kernelpolicy matrix -o wide --env VLLM_ROCM_USE_AITER=1",
    "serve": "  kernelpolicy serve --listen 127.0.0.1:0 --port-file $XDG_RUNTIME_DIR/kp.port",
    "status": None,
    "labels": "  kernelpolicy labels --format json --platform node.json",
    "verify": "  kernelpolicy verify --quick                  a smoke run, never stored",
    "diff": "  kubectl get nodes -o json > nodes.json",
    "warm": "  kernelpolicy warm --vocab 128256 --jobs 16",
    "completion": "  source <(kernelpolicy completion bash)          this shell only",
}
HELP_CASES = [
    pytest.param(command, example, id=command or "kernelpolicy")
    for command, example in EXAMPLES.items()
]


def _help(command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("command", "example"), HELP_CASES)
def test_help_fits_the_terminal(
    command: str,
    example: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No line of ``--help`` is wider than COLUMNS; an example line is printed as written."""
    lines = _help(command, monkeypatch, capsys).splitlines()
    wide = [line for line in lines if len(line) > COLUMNS]
    assert not wide, "\n".join(wide)
    if example is not None:
        assert example in lines


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:  # argparse has no public walk over sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


@pytest.mark.parametrize(
    "prog", [pytest.param(p.prog, id=p.prog) for p in _parsers(build_parser()) if p.epilog]
)
def test_examples_fit_on_one_line(
    prog: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each example of an epilog prints on one line at COLUMNS (one folded over two cannot be
    pasted); a command continued with `\\` is written so on purpose."""
    examples = [
        line
        for p in _parsers(build_parser())
        if p.prog == prog
        for line in (p.epilog or "").splitlines()
        if line[:1].isspace()
    ]
    lines = _help(prog.removeprefix("kernelpolicy").strip(), monkeypatch, capsys).splitlines()
    assert [e for e in examples if e not in lines] == []


def test_every_parser_uses_the_formatter() -> None:
    """The top-level parser and every sub-command's wrap prose with HelpFormatter."""
    parsers = _parsers(build_parser())
    assert len(parsers) > 10
    assert {p.prog for p in parsers if p.formatter_class is not HelpFormatter} == set()


FILL_CASES = [
    pytest.param(
        "one two three four five six seven eight nine ten eleven",
        "one two three four five six\nseven eight nine ten eleven\n",
        id="prose-fills-the-width",
    ),
    pytest.param(
        "a paragraph\nwritten over\nthree lines",
        "a paragraph written over three\nlines\n",
        id="prose-lines-joined",
    ),
    pytest.param(
        "first\n\nsecond", "first\n\nsecond\n", id="blank-line-between-paragraphs-kept",
    ),
    pytest.param(
        "examples:\n  cmd --a    note\n    cmd --b",
        "examples:\n  cmd --a    note\n    cmd --b\n",
        id="indented-lines-kept-as-written",
    ),
    pytest.param(
        "  cmd one\nthen prose\nthat follows",
        "  cmd one\nthen prose that follows\n",
        id="prose-after-an-example-is-its-own-paragraph",
    ),
    pytest.param(
        "  cmd --option-one --option-two --option-three",
        "  cmd --option-one --option-two\n      --option-three\n",
        id="too-wide-example-folded-under-a-deeper-indent",
    ),
    pytest.param(
        "see https://example.com/a/very/long/address/that/cannot/break",
        "see\nhttps://example.com/a/very/long/address/that/cannot/break\n",
        id="a-word-wider-than-the-width-stays-whole",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), FILL_CASES)
def test_formatter_fills_prose_and_keeps_examples(text: str, expected: str) -> None:
    """Unindented runs of lines are paragraphs filled to the width; indented lines are kept."""
    formatter = HelpFormatter(prog="x", width=32)
    formatter.add_text(text)
    assert formatter.format_help() == expected


@pytest.mark.parametrize(
    ("count", "noun", "plural", "expected"),
    [
        pytest.param(1, "gate", None, "1 gate", id="one"),
        pytest.param(0, "gate", None, "0 gates", id="zero"),
        pytest.param(2, "feature", None, "2 features", id="two"),
        pytest.param(1, "class", "classes", "1 class", id="one-irregular"),
        pytest.param(3, "class", "classes", "3 classes", id="irregular-plural"),
        pytest.param(12345, "node", None, "12,345 nodes", id="thousands"),
    ],
)  # fmt: skip
def test_counted(count: int, noun: str, plural: str | None, expected: str) -> None:
    """A count with its noun in agreement."""
    assert counted(count, noun, plural) == expected


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["labels"], id="labels"),
        pytest.param(["env", "--engine", "vllm"], id="env"),
    ],
)
def test_json_is_spelt_as_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` is `--format json` for the commands whose output has several formats, as the
    other commands spell it."""
    platform = ["--platform", str(ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json")]
    outputs = []
    for spelling in (["--json"], ["--format", "json"]):
        assert main([*argv, *platform, *spelling]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_check_help_names_the_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """The keys `check --help` promises are the keys `check --json` prints."""
    assert main(["check", str(ROOT / "policies"), "--json"]) == 0
    printed = sorted(json.loads(capsys.readouterr().out))
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    promised = " ".join(capsys.readouterr().out.split()).split("print {", 1)[1].split("}")[0]
    assert sorted(promised.split(", ")) == printed


PLUS_HELP = (
    "--policies PATH policy file or directory (repeatable; default: KERNELPOLICY_POLICY_PATHS or "
    "the bundled pack); with a leading + it is added to the bundled pack, which it replaces "
    "otherwise: +/etc/kernelpolicy/policies.d"
)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        *(pytest.param(c, PLUS_HELP, id=c)
          for c in ("explain", "env", "exec", "labels", "matrix", "serve", "warm")),
        pytest.param("diff", "--policies PATH the policies the fleet runs now (default: "
                     "KERNELPOLICY_POLICY_PATHS or the bundled pack); file or directory, "
                     "repeatable, +DIR adds to the bundled pack", id="diff"),
    ],
)  # fmt: skip
def test_policies_help_says_what_the_plus_does(
    command: str,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--policies' help says that a leading + adds to the bundled pack, with an example, as
    every doc example writes it (first-day review, finding 10)."""
    assert expected in " ".join(_help(command, monkeypatch, capsys).split())
