"""``warm --help`` shows its defaults as a value one could type (``32000,128256,151936``, which
``--vocab`` takes), not a Python tuple, and says the device it builds for by default."""

from __future__ import annotations

import pytest

from kernelpolicy.cli import build_parser, main
from kernelpolicy.limits import MAX_VOCAB_SIZE, MAX_WARM_VOCABS, shown
from kernelpolicy.warming import DEFAULT_VOCABS
from tests.helpers import FIXTURES


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "200")  # one line per option: the phrases are not wrapped
    with pytest.raises(SystemExit):
        main(["warm", "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("shown", "absent"),
    [
        pytest.param("default 32000,128256,151936)", "(32000, 128256, 151936)", id="vocab"),
        pytest.param("(default cuda:0: the first GPU this process sees)", None, id="device"),
    ],
)
def test_help_shows_the_defaults_as_values(
    shown: str,
    absent: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _help(capsys, monkeypatch)
    assert shown in text
    assert absent is None or absent not in text


@pytest.mark.parametrize(
    ("argv", "vocabs"),
    [
        pytest.param([], None, id="none-given"),
        pytest.param(["--vocab", "128256"], [128256], id="one"),
        pytest.param(["--vocab", "32000,128256"], [32000, 128256], id="comma-separated"),
        pytest.param(["--vocab", "1", "--vocab", "2,3"], [1, 2, 3], id="repeated-and-commas"),
        pytest.param(
            ["--vocab", ",".join(map(str, DEFAULT_VOCABS))], list(DEFAULT_VOCABS),
            id="the-default-as-shown",
        ),
    ],
)  # fmt: skip
def test_vocab_takes_sizes(argv: list[str], vocabs: list[int] | None) -> None:
    assert build_parser().parse_args(["warm", *argv]).vocab == vocabs


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("12x", id="not-a-number"),
        pytest.param("0", id="zero"),
        pytest.param("1,,2", id="empty-item"),
        pytest.param("", id="empty"),
        pytest.param(str(MAX_VOCAB_SIZE + 1), id="past-the-largest"),
        pytest.param(",".join(["32000"] * (MAX_WARM_VOCABS + 1)), id="too-many"),
    ],
)
def test_a_bad_vocab_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["warm", "--vocab", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"error: argument --vocab: {shown(value, 64)!r}: expected up to {MAX_WARM_VOCABS} "
        f"vocabulary sizes from 1 to {MAX_VOCAB_SIZE}, such as 128256 or 32000,128256\n"
    )


def test_a_vocabulary_given_twice_builds_once() -> None:
    """warm (and serve --warm) build one task per vocabulary, however often it is given."""
    import kernelpolicy
    from kernelpolicy.warming import tasks_for

    h100 = kernelpolicy.load_platform(FIXTURES / "h100-sxm.json")
    resolution = kernelpolicy.resolve(h100, {"KERNELPOLICY_LOG_FORMAT": "off"})
    assert tasks_for(resolution, [32000, 32000]) == tasks_for(resolution, [32000])


@pytest.mark.parametrize(
    ("argv", "vocabs"),
    [
        pytest.param(["--warm"], None, id="none-given"),
        pytest.param(["--warm", "--warm-vocab", "32000,128256"], [32000, 128256], id="comma"),
        pytest.param(
            ["--warm", "--warm-vocab", "1", "--warm-vocab", "2,3"], [1, 2, 3], id="repeated"
        ),
    ],
)
def test_serve_warm_vocab_takes_what_warm_vocab_takes(
    argv: list[str], vocabs: list[int] | None
) -> None:
    """serve --warm's --warm-vocab reads sizes as warm's --vocab does (it took only one
    integer per option and showed its default as "32000, 128256, 151936")."""
    assert build_parser().parse_args(["serve", *argv]).warm_vocab == vocabs
