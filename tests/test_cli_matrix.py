"""kernelpolicy matrix: a narrow default that fits a terminal, -o wide|json, column choice."""

from __future__ import annotations

import json

import pytest

from kernelpolicy.cli import main
from kernelpolicy.policy.loader import load_policies
from tests.helpers import ROOT

FEATURES = list(load_policies([ROOT / "policies"]).features)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["matrix", *argv]) == 0
    return capsys.readouterr().out


def test_default_fits_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """The default table and the line under it fit 120 columns; the features left out are
    named under the table."""
    out = _run([], capsys)
    assert max(len(line) for line in out.splitlines()) <= 120
    header = out.splitlines()[0].split()
    assert "sampler.top_k_top_p" in header
    assert "rocm.aiter.rmsnorm" not in header  # native everywhere
    assert "alike on every platform" in out
    assert "rocm.aiter.rmsnorm native" in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "columns"),
    [
        pytest.param(["-o", "wide"], FEATURES, id="wide-every-feature"),
        pytest.param(["attention.mla", "mhc"], ["attention.mla", "mhc"], id="chosen-columns"),
        pytest.param(["-o", "wide", "mhc"], ["mhc"], id="wide-chosen"),
    ],
)
def test_columns(argv: list[str], columns: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """-o wide shows every feature; FEATURE arguments choose the columns, in that order."""
    out = _run(argv, capsys)
    assert out.splitlines()[0].split() == ["platform", *columns]


@pytest.mark.parametrize("argv", [["-o", "json"], ["--json"]], ids=["o-json", "json-flag"])
def test_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """-o json (and --json) print every cell with its model kind."""
    document = json.loads(_run([*argv, "mhc", "sampler.greedy"], capsys))
    assert set(document["mi300x"]) == {"mhc", "sampler.greedy"}
    assert document["mi300x"]["mhc"]["model_kind"] == "mla-sparse"
    assert document["t4"]["sampler.greedy"]["impl"] == "torch"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["top_k_top_p"], "did you mean 'sampler.top_k_top_p'", id="feature"),
        pytest.param(["-o", "wdie"], "did you mean 'wide'", id="output"),
    ],
)
def test_mistakes_name_the_close_name(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped feature or output format: exit 2, nothing on stdout, the close name said."""
    try:
        code = main(["matrix", *argv])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert message in captured.err
