"""A ``KERNELPOLICY_*`` variable kernelpolicy does not know (``KERNELPOLICY_SOCKETT``) is said
once per process, in one line on stderr with the known name closest to it, where it was ignored
in silence (a misspelled force was already an error). The known names are one list: the
settings' variables and ``NOT_SETTINGS``, kept equal to the literals of the code that reads
them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kernelpolicy.settings as settings_module
from kernelpolicy import SettingsError
from kernelpolicy.cli import main
from kernelpolicy.limits import MAX_UNKNOWN_VARIABLES_SAID as MAX_SAID
from kernelpolicy.settings import (
    NOT_SETTINGS,
    VARIABLES,
    Settings,
    settings_from,
    unknown_variables,
)
from tests.helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
LITERAL = re.compile(r"KERNELPOLICY_[A-Z0-9_]*")
UNKNOWN = "unknown variable {} (no setting of kernelpolicy's; ignored unless a policy reads it)"


@pytest.fixture(autouse=True)
def nothing_said_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts in a process that has said nothing (the memory is per process)."""
    monkeypatch.setattr(settings_module, "_SAID", set())


def said(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kernelpolicy: warning:")]


@pytest.mark.parametrize(
    ("env", "lines"),
    [
        pytest.param(
            {"KERNELPOLICY_SOCKETT": "unix:/x"},
            [UNKNOWN.format("KERNELPOLICY_SOCKETT") + "; did you mean KERNELPOLICY_SOCKET?"],
            id="misspelled-setting",
        ),
        pytest.param(
            {"KERNELPOLICY_LOGFORMAT": "off"},
            [UNKNOWN.format("KERNELPOLICY_LOGFORMAT") + "; did you mean KERNELPOLICY_LOG_FORMAT?"],
            id="misspelled-setting-no-underscore",
        ),
        pytest.param(
            {"KERNELPOLICY_VLLM_PLUGN": "1"},
            [
                UNKNOWN.format("KERNELPOLICY_VLLM_PLUGN")
                + "; did you mean KERNELPOLICY_VLLM_PLUGIN or KERNELPOLICY_VLLM_PLUGIN_STATS "
                "or KERNELPOLICY_VLLM_PLUGIN_INPUTS?"
            ],
            id="misspelled-variable-not-a-setting",
        ),
        pytest.param({"KERNELPOLICY_QQQ": "1"}, [], id="nothing-close-is-no-misspelling"),
        pytest.param({"KERNELPOLICY_DEMO_FAST": "1"}, [], id="a-policys-own-switch"),
        pytest.param(
            {"KERNELPOLICY_SOCKET\x1b[2J": "1"},
            [UNKNOWN.format("KERNELPOLICY_SOCKET\\x1b[2J") + "; did you mean KERNELPOLICY_SOCKET?"],
            id="escaped",
        ),
        pytest.param({"KERNELPOLICY_SOCKET": "unix:/x"}, [], id="a-setting"),
        pytest.param({"KERNELPOLICY_FORCE_NO_SUCH": "torch"}, [], id="a-force-is-checked-apart"),
        pytest.param({"KERNELPOLICY_VLLM_PLUGIN_STATS": "/d"}, [], id="not-a-setting-but-known"),
        pytest.param({"kernelpolicy_sockett": "x", "HOME": "/h"}, [], id="not-the-prefix"),
    ],
)  # fmt: skip
def test_an_unknown_variable_is_said_with_the_closest_name(
    env: dict[str, str], lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """settings_from says each unknown variable in one line; known ones say nothing."""
    settings_from(env)
    assert capsys.readouterr().err.splitlines() == [f"kernelpolicy: warning: {m}" for m in lines]


def test_said_once_per_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """However often settings are read (Settings(), settings_from: the CLI reads them several
    times per command), each unknown variable is said once."""
    monkeypatch.setenv("KERNELPOLICY_SOCKETT", "unix:/x")
    Settings()
    Settings()
    settings_from({"KERNELPOLICY_SOCKETT": "unix:/y", "KERNELPOLICY_REPROT": "0"})
    assert [line.split()[4] for line in said(capsys.readouterr().err)] == [
        "KERNELPOLICY_SOCKETT",
        "KERNELPOLICY_REPROT",
    ]


def test_said_even_where_a_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The unknown variable is said before the settings are validated: a refused value of
    another setting does not hide it."""
    with pytest.raises(SettingsError, match="KERNELPOLICY_LOG_FORMAT"):
        settings_from({"KERNELPOLICY_SOCKETT": "unix:/x", "KERNELPOLICY_LOG_FORMAT": "loud"})
    assert [line.split()[4] for line in said(capsys.readouterr().err)] == ["KERNELPOLICY_SOCKETT"]


def test_at_most_max_said_per_process(capsys: pytest.CaptureFixture[str]) -> None:
    """Environments handed in a loop cannot make a process say more than MAX_SAID lines."""
    for batch in range(3):
        settings_from({f"KERNELPOLICY_SOCKET{batch}{i:02}": "1" for i in range(MAX_SAID)})
    assert len(said(capsys.readouterr().err)) == MAX_SAID


def test_a_process_without_unknown_variables_computes_no_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an unknown variable no suggestion is made (difflib is never imported for it)."""
    monkeypatch.setattr(settings_module, "unknown_message", pytest.fail)
    settings_from({"HOME": "/h", "KERNELPOLICY_LOG_FORMAT": "off", "KERNELPOLICY_FORCE_X": "t"})


def test_the_cli_says_it_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain reads its settings more than once (its own, the answer's overrides): one line."""
    monkeypatch.setenv("KERNELPOLICY_SOCKETT", "unix:/x")
    assert main(["explain", "--platform", str(FIXTURES / "cpu.json"), "sampler.greedy"]) == 0
    assert said(capsys.readouterr().err) == [
        "kernelpolicy: warning: "
        + UNKNOWN.format("KERNELPOLICY_SOCKETT")
        + "; did you mean KERNELPOLICY_SOCKET?"
    ]


def _literals(path: Path) -> set[str]:
    """The ``KERNELPOLICY_*`` names a file reads: a Python file's string constants that are
    such a name (not its ``__all__``'s, which name Python objects), a script's words."""
    if path.suffix != ".py":
        return set(LITERAL.findall(path.read_text()))
    tree = ast.parse(path.read_text())
    exported = {
        id(item)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for item in ast.walk(node.value)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and LITERAL.fullmatch(node.value)
        and id(node) not in exported
    }


def test_the_known_names_are_the_literals_of_the_code_that_reads_them() -> None:
    """Every KERNELPOLICY_* literal of the package (and of the source tree's files NOT_SETTINGS
    names) is a setting's variable, one of NOT_SETTINGS or under one of its prefixes; and each
    of NOT_SETTINGS is a literal of the file it names (no name stays known after its reader
    goes)."""
    files = {*(ROOT / "kernelpolicy").rglob("*.py"), *(ROOT / f for f in NOT_SETTINGS.values())}
    found = {name for path in files if "_generated" not in path.parts for name in _literals(path)}
    prefixes = tuple(name for name in NOT_SETTINGS if name.endswith("_"))
    names = found - {"KERNELPOLICY_"}  # the prefix itself, as the readers build names
    unknown = names - set(VARIABLES) - set(NOT_SETTINGS)
    assert sorted(n for n in unknown if not n.startswith(prefixes)) == []
    assert sorted(n for n, f in NOT_SETTINGS.items() if n not in _literals(ROOT / f)) == []
    assert unknown_variables(dict.fromkeys(names, "1")) == []
