"""exec's console line writes what the engine is told as bash reads it back (review: the
console renderer printed the quoted variables and flags with Python's own quotes and escapes,
``flags='--ir-op-priority \\'{"rms_norm": ...}\\''``, which no shell reads back, and a newline
in a value would have split the line)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kernelpolicy.bridge.model import EngineSettings
from kernelpolicy.cli.exec_cmd import log_exec

PLANTED = "PLANTED"  # in a word: the path that a substitution which ran would make


def _printed(words: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """exec's console line for a command ``words[0]`` told ``words`` as its flags and
    ``V<i>=words[i]`` as its variables."""
    settings = EngineSettings(
        engine="vllm", version="0.32.0", fingerprint="f00d", model_kind="dense",
        env={f"V{i}": word for i, word in enumerate(words)}, flags=tuple(words), decisions={},
    )  # fmt: skip
    log_exec("console", settings, [words[0], "serve", *words], [])
    (line,) = capsys.readouterr().err.splitlines()
    return line


def _read_by_bash(line: str) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The command, variables and flags bash reads from the line's fields (from ``command=``
    on, each ``key=value`` an assignment)."""
    script = line[line.index("command=") :] + (
        '\nprintf "%s\\0" "$command" "${#env[@]}" "${env[@]}" "${#flags[@]}" "${flags[@]}"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, timeout=60)
    command, count, *rest = out.stdout.split(b"\0")[:-1]
    env, (flag_count, *flags) = rest[: int(count)], rest[int(count) :]
    assert int(flag_count) == len(flags)
    return [command], env, flags


@pytest.mark.parametrize(
    "words",
    [
        pytest.param(["vllm", "--seed", "0"], id="plain"),
        pytest.param(["/opt/my env/bin/vllm", "a b  c", " lead", "trail "], id="spaces"),
        pytest.param(["it's", "'", "''"], id="single-quotes"),
        pytest.param(['say "hi"', '"'], id="double-quotes"),
        pytest.param(
            ["--ir-op-priority", "{\"rms_norm\": ['kernelpolicy']}"], id="json-both-quotes"
        ),
        pytest.param(["vllm", f"$(touch {PLANTED})", "${HOME}", "$HOME"], id="substitution"),
        pytest.param(["vllm", f"`touch {PLANTED}`"], id="backticks"),
        pytest.param(["vllm", "a\nb", "\n", "end\n"], id="newlines"),
        pytest.param(["vllm", "a\tb", "\x1b[31mred", "\r", "\x7f"], id="control-characters"),
        pytest.param(["vllm", os.fsdecode(b"mod\xe8le"), os.fsdecode(b"\xff\xfe")], id="non-utf-8"),
        pytest.param(["vllm", "naïve ✓", "\u00a0nbsp", "\u2028"], id="unicode"),
        pytest.param(["-n", "-e", "--", "-"], id="leading-dashes"),
        pytest.param(["vllm", "", "", "x"], id="empty-strings"),
        pytest.param(["vllm", "a\\b", "end\\", "\\'", "\\x41"], id="backslashes"),
        pytest.param(["vllm", "*", "?", "[a]", "~root", "{a,b}"], id="globs-and-expansions"),
        pytest.param(["vllm", f"x; touch {PLANTED} | cat & !!", "a=b", ")", "("], id="operators"),
    ],
)
def test_the_console_line_gives_bash_back_exactly_what_the_engine_is_told(
    words: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The command, the variables (``env=(NAME=value ...)``) and the flags (``flags=(...)``)
    of the one printed line, read by bash, are exactly the words exec runs with, byte for byte
    (an argument that is not UTF-8 included), and nothing in them runs."""
    planted = tmp_path / "ran"
    words = [word.replace(PLANTED, str(planted)) for word in words]
    line = _printed(words, capsys)
    command, env, flags = _read_by_bash(line)
    assert command == [os.fsencode(words[0])]
    assert env == [os.fsencode(f"V{i}={word}") for i, word in enumerate(words)]
    assert flags == [os.fsencode(word) for word in words]
    assert not planted.exists()
    assert line.isprintable()


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("0.11.0", id="plain"),
        pytest.param(f"0.11'$(touch {PLANTED})'", id="single-quote-then-substitution"),
        pytest.param(f'0.11"$(touch {PLANTED})"', id="double-quote-then-substitution"),
        pytest.param(f"0.11 `touch {PLANTED}`", id="backticks"),
        pytest.param(f"0.11; touch {PLANTED}", id="operator"),
        pytest.param("0.11\x1b]0;x\x07", id="control-characters"),
    ],
)
def test_every_string_field_is_one_bash_word(
    version: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The engine's version is what its installed dist-info says (anyone who can install a
    package writes it): pasted into bash, the line runs nothing and gives the version back
    exactly, as it does the other strings. Before, ``engine=`` and ``engine_version=`` were
    printed with Python's quotes: ``"0.11'$(touch X)'"`` ran ``touch X``."""
    planted = tmp_path / "ran"
    version = version.replace(PLANTED, str(planted))
    settings = EngineSettings(
        engine="vllm", version=version, fingerprint="f00d", model_kind="dense",
        env={}, flags=(), decisions={},
    )  # fmt: skip
    log_exec("console", settings, ["vllm"], [])
    (line,) = capsys.readouterr().err.splitlines()
    script = line[line.index("command=") :] + (
        '\nprintf "%s\\0" "$command" "$engine" "$engine_version" "$fingerprint" "$told"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, timeout=60)
    assert out.stdout.split(b"\0")[:-1] == [b"vllm", b"vllm", version.encode(), b"f00d", b"none"]
    assert not planted.exists()
