"""The loader's error boundary: whatever a policy file holds, the loader answers PolicyError (or
UntrustedFileError), located; CEL limits are checked before the CEL library sees the text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.errors import PolicyError
from kernelpolicy.limits import (
    MAX_CEL_DEPTH,
    MAX_CEL_NODES,
    MAX_CEL_SOURCE_CHARS,
    MAX_NESTING_DEPTH,
    MAX_POLICY_FILE_BYTES,
    MAX_POLICY_FILES,
)
from kernelpolicy.policy import load_policies, load_policy_sources, load_policy_text
from kernelpolicy.policy.cel import CelFailure, _binding, compile_expression
from kernelpolicy.policy.celscan import measure

SCHEMA = 'schema = "kernelpolicy.policy/v1"\n'


def feature_doc(when: str, context: str = '{ tokens = "int" }', name: str = "mhc") -> str:
    """A one-feature document whose first candidate has ``when``."""
    when_toml = when.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'{SCHEMA}\n[features.{name}]\ndescription = "x"\nfallback = "torch"\n'
        f'context = {context}\n\n[[features.{name}.candidates]]\nimpl = "aiter"\n'
        f'when = "{when_toml}"\n\n[[features.{name}.candidates]]\nimpl = "torch"\n'
    )


def single_issue(text: str) -> Any:
    with pytest.raises(PolicyError) as info:
        load_policy_text(text, "p.toml")
    (issue,) = info.value.issues
    assert issue.file == "p.toml"
    return issue


# Finding 1: trial evaluation errors at load time are located PolicyErrors.
@pytest.mark.parametrize(
    ("when", "expected"),
    [
        pytest.param("4096 / tokens > 8", "ZeroDivisionError", id="division-by-zero"),
        pytest.param("4096 % tokens > 8", "ZeroDivisionError", id="modulo-by-zero"),
        pytest.param("tokens + 9223372036854775807 + 1 > 0", "OverflowError", id="overflow-add"),
        pytest.param("-9223372036854775807 - 2 < tokens", "OverflowError", id="overflow-sub"),
    ],
)
def test_trial_evaluation_errors_are_located(when: str, expected: str) -> None:
    """A `when` that fails on the sample context is an issue at its line, naming the error."""
    issue = single_issue(feature_doc(when))
    assert (issue.line, issue.feature, issue.key) == (10, "mhc", "candidates.0.when")
    assert expected in issue.message
    assert "tokens=0" in issue.message


class FakePanic(BaseException):
    """Stands for pyo3's PanicException, which derives from BaseException."""


@pytest.mark.parametrize(
    ("target", "error"),
    [
        pytest.param("kernelpolicy.policy.loader.check_names", ZeroDivisionError, id="zero-div"),
        pytest.param("kernelpolicy.policy.loader.compile_candidate", OverflowError, id="overflow"),
        pytest.param("kernelpolicy.policy.loader.parse_toml", RecursionError, id="recursion"),
        pytest.param("kernelpolicy.policy.loader.locate", MemoryError, id="memory"),
        pytest.param("kernelpolicy.policy.loader.compile_expression", FakePanic, id="panic"),
    ],
)
def test_any_unexpected_failure_becomes_one_policy_error(
    target: str, error: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection at every stage: the one translation point turns any exception into a
    PolicyError naming the file and the exception; nothing else escapes."""

    def broken(*args: object, **kwargs: object) -> None:
        raise error("injected")

    monkeypatch.setattr(target, broken)
    issue = single_issue(feature_doc("tokens > 1"))
    assert error.__name__ in issue.message
    assert "injected" in issue.message


def test_interpreter_exits_pass_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt is not translated: Ctrl-C still stops a load."""

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kernelpolicy.policy.loader.check_names", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_policy_text(feature_doc("tokens > 1"))


@pytest.mark.parametrize(
    ("raised", "translated"),
    [
        pytest.param(FakePanic("boom"), CelFailure, id="panic-is-cel-failure"),
        pytest.param(ZeroDivisionError("x"), CelFailure, id="zero-division-is-cel-failure"),
        pytest.param(ValueError("x"), ValueError, id="cel-value-error-kept"),
        pytest.param(KeyboardInterrupt(), KeyboardInterrupt, id="keyboard-interrupt-passes"),
        pytest.param(SystemExit(3), SystemExit, id="system-exit-passes"),
    ],
)
def test_binding_call_site_translation(raised: BaseException, translated: type) -> None:
    """The one call site into the CEL extension: BaseExceptions other than interpreter exits
    become CelFailure (a RuntimeError)."""

    def call() -> None:
        raise raised

    with pytest.raises(translated):
        _binding(call)


# Finding 2: CEL limits, before the CEL library.
def long_string(chars: int) -> str:
    """A valid expression of exactly ``chars`` characters."""
    source = 'tokens > 0 || "' + "x" * (chars - 22) + '" == ""'
    assert len(source) == chars
    return source


def chain(terms: int) -> str:
    """``terms`` operands, ``terms - 1`` plus signs, ``>`` and ``0``: 2 * terms + 1 nodes."""
    return " + ".join(["tokens"] * terms) + " > 0"


@pytest.mark.parametrize(
    ("source", "constant"),
    [
        pytest.param(long_string(MAX_CEL_SOURCE_CHARS), None, id="chars-at-limit"),
        pytest.param(
            long_string(MAX_CEL_SOURCE_CHARS + 1), "MAX_CEL_SOURCE_CHARS", id="chars-over-limit"
        ),
        pytest.param(
            "(" * MAX_CEL_DEPTH + "tokens" + ")" * MAX_CEL_DEPTH + " > 0", None, id="depth-at-limit"
        ),
        pytest.param(
            "(" * (MAX_CEL_DEPTH + 1) + "tokens" + ")" * (MAX_CEL_DEPTH + 1) + " > 0",
            "MAX_CEL_DEPTH",
            id="depth-over-limit",
        ),
        pytest.param("!" * MAX_CEL_DEPTH + "(tokens > 0)", "MAX_CEL_DEPTH", id="unary-and-paren"),
        pytest.param("!" * (MAX_CEL_DEPTH - 1) + "(tokens > 0)", None, id="unary-at-limit"),
        pytest.param("!(" + chain(MAX_CEL_NODES // 2 - 1) + ")", None, id="nodes-at-limit"),
        pytest.param(chain(MAX_CEL_NODES // 2), "MAX_CEL_NODES", id="nodes-over-limit"),
        pytest.param(
            '"' + "(" * 100 + '" != "" && tokens > 0', None, id="brackets-in-strings-ignored"
        ),
    ],
)
def test_cel_limits(source: str, constant: str | None) -> None:
    """Each CEL limit at the limit (loads) and one past it (an error naming the constant)."""
    if constant is None:
        compile_expression(source, {"tokens": "int"})
    else:
        with pytest.raises(ValueError, match=constant):
            compile_expression(source, {"tokens": "int"})


def test_measure_counts_what_the_docs_say() -> None:
    """Nodes are operands and operators; depth counts brackets and unary operators."""
    size = measure('!(a + -b) && "(((" == c')
    assert (size.depth, size.nodes) == (3, 9)


@pytest.mark.parametrize(
    ("when", "constant"),
    [
        pytest.param(" + ".join(["tokens"] * 20000) + " > 0", "MAX_CEL_SOURCE_CHARS", id="segv"),
        pytest.param(
            "(" * 70000 + "tokens" + ")" * 70000 + " > 0", "MAX_CEL_SOURCE_CHARS", id="panic"
        ),
        pytest.param("!" * 300 + "true", "MAX_CEL_DEPTH", id="300-not"),
        pytest.param("!" * 1000 + "true", "MAX_CEL_DEPTH", id="1000-not"),
        pytest.param(" + ".join(["1"] * 1000) + " > tokens", "MAX_CEL_NODES", id="1000-terms"),
    ],
)
def test_crashing_expressions_are_policy_errors(when: str, constant: str) -> None:
    """The expressions that crashed the CEL library (SIGSEGV, PanicException) or the Python
    translation are now located PolicyErrors naming the limit."""
    issue = single_issue(feature_doc(when))
    assert constant in issue.message
    assert issue.key == "candidates.0.when"


def test_the_unguarded_library_does_crash() -> None:
    """Why the limits exist: the CEL library itself dies on a 20,000-term chain (in a child
    process, so this suite survives it)."""
    code = (
        "from kernelpolicy.policy.cel import cel_module\n"
        "cel = cel_module()\n"
        "program = cel.compile(' + '.join(['tokens'] * 20000) + ' > 0')\n"
        "program.execute(cel.Context({'tokens': 1}, {}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=60, check=False
    )
    assert result.returncode != 0


# Finding 4: files are read bounded; TOML is parsed with a depth limit.
def test_deep_toml_is_a_policy_error() -> None:
    """1,000 nested arrays (tomllib's RecursionError) are refused before tomllib sees them."""
    issue = single_issue(SCHEMA + "x = " + "[" * 1000 + "]" * 1000 + "\n")
    assert "MAX_NESTING_DEPTH" in issue.message


@pytest.mark.parametrize(
    ("levels", "refused"),
    [
        pytest.param(MAX_NESTING_DEPTH, False, id="at-limit"),
        pytest.param(MAX_NESTING_DEPTH + 1, True, id="over-limit"),
    ],
)
def test_toml_depth_limit(levels: int, refused: bool) -> None:
    """The document nests ``levels`` deep (the top table is one level)."""
    arrays = levels - 1
    issue = single_issue(SCHEMA + "x = " + "[" * arrays + "]" * arrays + "\n")
    assert ("MAX_NESTING_DEPTH" in issue.message) is refused  # else: unknown key 'x'


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return path


def bad_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_bytes(SCHEMA.encode() + b"# \xff\xfe\n")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(fifo, "not a regular file (a FIFO)", id="fifo-never-hangs"),
        pytest.param(lambda _: Path("/dev/zero"), "a character device", id="dev-zero"),
        pytest.param(bad_utf8, "not UTF-8", id="bad-utf8"),
        pytest.param(lambda t: t / "missing.toml", "no such policy file", id="missing"),
    ],
)
def test_unreadable_files(make: Any, message: str, tmp_path: Path) -> None:
    """Anything but a regular UTF-8 file is one issue naming the file; nothing hangs."""
    path = make(tmp_path)
    with pytest.raises(PolicyError) as info:
        load_policies([path], allow_untrusted=path == Path("/dev/zero"))
    (issue,) = info.value.issues
    assert issue.file == str(path)
    assert message in issue.message


@pytest.mark.parametrize(
    ("size", "refused"),
    [
        pytest.param(MAX_POLICY_FILE_BYTES, False, id="at-limit"),
        pytest.param(MAX_POLICY_FILE_BYTES + 1, True, id="over-limit"),
    ],
)
def test_policy_file_size_limit(size: int, refused: bool, tmp_path: Path) -> None:
    """A file of MAX_POLICY_FILE_BYTES loads; one byte more is refused before parsing."""
    path = tmp_path / "big.toml"
    path.write_text(SCHEMA + "#" + "x" * (size - len(SCHEMA) - 2) + "\n")
    assert path.stat().st_size == size
    if refused:
        with pytest.raises(PolicyError, match="MAX_POLICY_FILE_BYTES"):
            load_policies([path])
        with pytest.raises(PolicyError, match="MAX_POLICY_FILE_BYTES"):
            load_policy_sources([("big.toml", path.read_text())])
    else:
        assert load_policies([path]).features == {}


@pytest.mark.parametrize(
    ("count", "refused"),
    [
        pytest.param(MAX_POLICY_FILES, False, id="at-limit"),
        pytest.param(MAX_POLICY_FILES + 1, True, id="over-limit"),
    ],
)
def test_policy_file_count_limit(count: int, refused: bool, tmp_path: Path) -> None:
    """A directory of MAX_POLICY_FILES files loads; one more is refused, as are that many
    documents handed over as text."""
    for index in range(count):
        (tmp_path / f"{index:05d}.toml").write_text(SCHEMA)
    if refused:
        with pytest.raises(PolicyError, match="MAX_POLICY_FILES"):
            load_policies([tmp_path])
        with pytest.raises(PolicyError, match="MAX_POLICY_FILES"):
            load_policy_sources([(f"{i}.toml", SCHEMA) for i in range(count)])
    else:
        assert len(load_policies([tmp_path]).files) == count


# Finding 13: locating is linear (the text is indexed once); locations stay exact.
@pytest.mark.parametrize(
    ("mistake", "key"),
    [
        pytest.param('impl = "torch"\nspeed = 1', "candidates.1.speed", id="unknown-key"),
        pytest.param('impl = "torch"\nentry = 5', "candidates.1.entry", id="wrong-type"),
    ],
)
def test_mistake_in_the_last_of_2000_features_is_located(mistake: str, key: str) -> None:
    """A large file is indexed once, and the mistake's line is still the exact one."""
    text = SCHEMA + "".join(
        feature_doc("tokens > 1", name=f"f{i:04d}").removeprefix(SCHEMA) for i in range(2000)
    )
    cut = text.rindex('impl = "torch"')
    broken = text[:cut] + mistake + "\n"
    line = broken.count("\n", 0, broken.rindex(mistake.splitlines()[-1])) + 1
    issue = single_issue(broken)
    assert (issue.line, issue.feature, issue.key) == (line, "f1999", key)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("", "an empty policy path", id="empty"),
        pytest.param("  ", "an empty policy path", id="blank"),
        pytest.param("/tmp/a\x00b.toml", "NUL", id="nul-byte"),
    ],
)
def test_odd_paths_are_policy_errors(path: str, message: str) -> None:
    """Paths that are not paths are PolicyErrors, through resolve() as well (its cache stamps
    files before loading them)."""
    import kernelpolicy
    from kernelpolicy.platform.fixtures import fixture_dir

    platform = kernelpolicy.load_platform(fixture_dir() / "platforms" / "cpu.json")
    with pytest.raises(PolicyError, match=message):
        kernelpolicy.resolve(platform, {}, [path])
    with pytest.raises(PolicyError, match=message):
        load_policies([path])
