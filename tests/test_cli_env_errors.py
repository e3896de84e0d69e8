"""env and exec's error report: each error once, with its hints, however many features share it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.env_cmd import report_errors
from tests.helpers import FIXTURES

BAD = "X='on?' is not a boolean: expected 1/0"


def _resolution(**hints: tuple[str, ...]) -> SimpleNamespace:
    """A stand-in with a decision per feature that is an error with these hints."""
    return SimpleNamespace(
        decisions={n: SimpleNamespace(error="bad", hints=h) for n, h in hints.items()}
    )


@pytest.mark.parametrize(
    ("errors", "hints", "expected"),
    [
        pytest.param((f"a: {BAD}",), {}, [f"kernelpolicy: error: a: {BAD}"], id="one-feature"),
        pytest.param(
            (f"a: {BAD}", f"b.c: {BAD}", f"d: {BAD}"), {},
            [f"kernelpolicy: error: {BAD}; for 3 features: a, b.c, d"], id="shared-said-once",
        ),
        pytest.param(
            (f"a: {BAD}", "b: needs Y=1, but a needs Y=0", f"c: {BAD}"), {},
            [f"kernelpolicy: error: {BAD}; for 2 features: a, c",
             "kernelpolicy: error: b: needs Y=1, but a needs Y=0"],
            id="shared-and-another",
        ),
        pytest.param(
            (f"a: {BAD}", f"b: {BAD}"), {"a": ("set X=1",), "b": ("set X=1", "or X=0")},
            [f"kernelpolicy: error: {BAD}; for 2 features: a, b", "  hint: set X=1",
             "  hint: or X=0"],
            id="hints-once-each",
        ),
        pytest.param(("no feature named",), {}, ["kernelpolicy: error: no feature named"],
                     id="no-feature-prefix"),
    ],
)  # fmt: skip
def test_report_errors(
    errors: tuple[str, ...],
    hints: dict[str, tuple[str, ...]],
    expected: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One line per distinct error, naming the features it is the error of; hints follow it,
    each once."""
    report_errors(_resolution(**hints), errors)
    assert capsys.readouterr().err.splitlines() == expected


def test_a_bad_switch_value_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`env --env VLLM_ROCM_USE_AITER=enabled`: the many aiter features it switches share one
    error line (it was one line per feature), exit 1."""
    mi300x = str(FIXTURES / "mi300x.json")
    argv = ["env", "--engine", "vllm", "--platform", mi300x, "--env", "VLLM_ROCM_USE_AITER=enabled"]
    assert main(argv) == 1
    errors = [
        e for e in capsys.readouterr().err.splitlines() if e.startswith("kernelpolicy: error")
    ]
    assert len(errors) == 1
    assert errors[0].startswith(
        "kernelpolicy: error: VLLM_ROCM_USE_AITER='enabled' is not a boolean: expected 1/0"
    )
    assert " features: " in errors[0]
    assert "sampler.top_k_top_p" in errors[0].split(" features: ")[1].split(", ")


EXPECTED_VERSION = "expected the engine's release, PEP 440 (0.12.0, 0.11.1rc2, 0.10.1.1+cu128)"


@pytest.mark.parametrize(
    ("command", "version"),
    [
        pytest.param(["env"], "banana", id="env-word"),
        pytest.param(["env"], "", id="env-empty"),
        pytest.param(["env"], "0.12.0 nightly", id="env-trailing-word"),
        pytest.param(["exec"], "banana", id="exec-word"),
        pytest.param(["exec"], "v0.12..0", id="exec-double-dot"),
    ],
)
def test_engine_version_typed_must_be_a_version(
    command: list[str], version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An --engine-version that is no version is a usage error naming the form expected (it was
    a warning, 'unreadable: matched as ...; pass --engine-version to choose', and exit 0); exec
    refuses it before looking up or starting anything."""
    h100 = str(FIXTURES / "h100-sxm.json")
    argv = [*command, "--engine", "vllm", "--engine-version", version, "--platform", h100]
    with pytest.raises(SystemExit) as exited:
        # a command not found: were the version taken, exec would end with 127, not replace
        # this process
        main([*argv, *(["--", "kernelpolicy-no-such-command"] if command == ["exec"] else [])])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == (
        f"kernelpolicy: error: argument --engine-version: {version!r} is not a version; "
        f"{EXPECTED_VERSION}"
    )


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("0.12.0", id="release"),
        pytest.param("0.11.1rc2", id="pre-release"),
        pytest.param("0.10.1.1+cu128", id="local-build"),
    ],
)
def test_engine_version_typed_as_pep_440_is_taken(
    version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PEP 440 version is the one the settings are for (their header names it)."""
    h100 = str(FIXTURES / "h100-sxm.json")
    argv = ["env", "--engine", "vllm", "--engine-version", version, "--platform", h100]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(f"settings for vllm {version}")
