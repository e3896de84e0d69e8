"""A ``KERNELPOLICY_*`` variable kernelpolicy does not know (``KERNELPOLICY_SOCKETT``) is said
once per process, with the known name closest to it, where it was ignored in silence (a
misspelled force was already an error): a warning of the library through the ``kernelpolicy``
logger (a host that configured no logging sees nothing, tests/test_logs_host.py), which the CLI
shows on stderr. The known names are one list: the settings' variables and ``NOT_SETTINGS``,
kept equal to the literals of the code that reads them."""

from __future__ import annotations

import ast
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import kernelpolicy.settings as settings_module
from kernelpolicy import SettingsError
from kernelpolicy.cli import main
from kernelpolicy.limits import MAX_UNKNOWN_VARIABLES_SAID as MAX_SAID
from kernelpolicy.logs import warnings_on_stderr
from kernelpolicy.settings import (
    NOT_SETTINGS,
    VARIABLES,
    Settings,
    settings_from,
    unknown_variables,
)
from tests.helpers import FIXTURES
from tests.log_helpers import Collect, host_logging

ROOT = Path(__file__).resolve().parent.parent
LITERAL = re.compile(r"KERNELPOLICY_[A-Z0-9_]*")
UNKNOWN = "unknown variable {} (no setting of kernelpolicy's; ignored unless a policy reads it)"


@pytest.fixture(autouse=True)
def nothing_said_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts in a process that has said nothing (the memory is per process)."""
    monkeypatch.setattr(settings_module, "_SAID", set())


class Said(Collect):
    """What a host's handler on the ``kernelpolicy`` logger receives."""

    def messages(self) -> list[str]:
        """The unknown-variable warnings' messages, in order."""
        return [
            r.kernelpolicy["message"]  # type: ignore[attr-defined]
            for r in self.records
            if r.kernelpolicy["event"] == "kernelpolicy.unknown_variable"  # type: ignore[attr-defined]
        ]

    def names(self) -> list[str]:
        return [m.split()[2] for m in self.messages()]


@pytest.fixture
def host() -> Iterator[Said]:
    """A host that configured the ``kernelpolicy`` logger (its own handler, nothing above)."""
    with host_logging(Said()) as handler:
        yield handler


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
    env: dict[str, str], lines: list[str], host: Said, capsys: pytest.CaptureFixture[str]
) -> None:
    """settings_from says each unknown variable in one warning of the kernelpolicy logger;
    known ones say nothing; nothing is printed."""
    settings_from(env)
    assert host.messages() == lines
    assert all(r.levelname == "WARNING" for r in host.records)
    assert capsys.readouterr().err == ""


def test_said_once_per_process(monkeypatch: pytest.MonkeyPatch, host: Said) -> None:
    """However often settings are read (Settings(), settings_from: the CLI reads them several
    times per command), each unknown variable is said once."""
    monkeypatch.setenv("KERNELPOLICY_SOCKETT", "unix:/x")
    Settings()
    Settings()
    settings_from({"KERNELPOLICY_SOCKETT": "unix:/y", "KERNELPOLICY_REPROT": "0"})
    assert host.names() == ["KERNELPOLICY_SOCKETT", "KERNELPOLICY_REPROT"]


def test_said_even_where_a_value_is_refused(host: Said) -> None:
    """The unknown variable is said before the settings are validated: a refused value of
    another setting does not hide it."""
    with pytest.raises(SettingsError, match="KERNELPOLICY_LOG_FORMAT"):
        settings_from({"KERNELPOLICY_SOCKETT": "unix:/x", "KERNELPOLICY_LOG_FORMAT": "loud"})
    assert host.names() == ["KERNELPOLICY_SOCKETT"]


def test_at_most_max_said_per_process(host: Said) -> None:
    """Environments handed in a loop cannot make a process say more than MAX_SAID lines."""
    for batch in range(3):
        settings_from({f"KERNELPOLICY_SOCKET{batch}{i:02}": "1" for i in range(MAX_SAID)})
    assert len(host.messages()) == MAX_SAID


@pytest.mark.parametrize(
    ("log_format", "rendered"),
    [
        pytest.param(None, "event='kernelpolicy.unknown_variable' message=", id="console"),
        pytest.param("console", "event='kernelpolicy.unknown_variable' message=", id="console-set"),
        pytest.param("json", '{"event": "kernelpolicy.unknown_variable", "message": ', id="json"),
        pytest.param("off", None, id="off"),
    ],
)  # fmt: skip
def test_said_in_the_log_format_of_the_environment(
    log_format: str | None, rendered: str | None, host: Said
) -> None:
    """The warning is rendered as KERNELPOLICY_LOG_FORMAT of the environment read says (none
    at all with off), its fields on the record."""
    env = {"KERNELPOLICY_LOG_FROMAT": "json"}
    if log_format is not None:
        env["KERNELPOLICY_LOG_FORMAT"] = log_format
    settings_from(env)
    if rendered is None:
        assert host.records == []
        return
    (record,) = host.records
    assert record.getMessage().startswith(rendered)
    assert record.kernelpolicy["variable"] == "KERNELPOLICY_LOG_FROMAT"  # type: ignore[attr-defined]
    assert record.kernelpolicy["message"].endswith("did you mean KERNELPOLICY_LOG_FORMAT?")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("log_format", "line"),
    [
        pytest.param(
            "console",
            "kernelpolicy: warning: " + UNKNOWN.format("KERNELPOLICY_SOCKETT")
            + "; did you mean KERNELPOLICY_SOCKET?", id="console",
        ),
        pytest.param("json", '{"event": "kernelpolicy.unknown_variable", ', id="json"),
    ],
)  # fmt: skip
def test_a_process_that_owns_stderr_shows_it(log_format: str, line: str) -> None:
    """Within warnings_on_stderr (how the CLI runs a command), the warning is a line on
    stderr: the CLI's own form, or the JSON event; none once the block has ended."""
    stream = io.StringIO()
    env = {"KERNELPOLICY_SOCKETT": "unix:/x", "KERNELPOLICY_LOG_FORMAT": log_format}
    with warnings_on_stderr(stream):
        settings_from(env)
    (shown,) = stream.getvalue().splitlines()
    assert shown.startswith(line)
    if log_format == "json":
        assert json.loads(shown)["variable"] == "KERNELPOLICY_SOCKETT"
    settings_from({"KERNELPOLICY_SOCKETX": "1"})
    assert stream.getvalue().count("\n") == 1


def test_a_process_without_unknown_variables_computes_no_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an unknown variable no suggestion is made (difflib is never imported for it)."""
    monkeypatch.setattr(settings_module, "unknown_message", pytest.fail)
    settings_from({"HOME": "/h", "KERNELPOLICY_LOG_FORMAT": "off", "KERNELPOLICY_FORCE_X": "t"})


@pytest.mark.parametrize(
    "log_format",
    [
        pytest.param(None, id="default"),
        pytest.param("console", id="console"),
        pytest.param("off", id="off: the decision log's format, not the CLI's warnings"),
    ],
)
def test_the_cli_says_it_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], log_format: str | None
) -> None:
    """explain reads its settings more than once (its own, the answer's overrides): one line,
    whatever the log format (the line was lost with KERNELPOLICY_LOG_FORMAT=off once the
    library logged it)."""
    monkeypatch.setenv("KERNELPOLICY_SOCKETT", "unix:/x")
    if log_format is not None:
        monkeypatch.setenv("KERNELPOLICY_LOG_FORMAT", log_format)
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
