"""Each output format's encoder, fed arbitrary names' values, flags and versions, and read back
by the format's real consumer: what is read equals what was meant, nothing runs, and what a
format cannot carry is an :class:`EncodingError` (issue 24, "encoders by construction")."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelpolicy.bridge import EngineSettings
from kernelpolicy.bridge.formats import FORMATS, EncodingError, render
from kernelpolicy.encoding import escaped, yaml_quoted
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.labels import PREFIX, label_name, label_value, nfd_comment, render_nfd
from tests.consumers import (
    BAIT,
    bash_read,
    dotenv_read,
    json_read,
    kubernetes_expand,
    nfd_read,
    yaml_read,
)

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

HOSTILE = [
    f"$(touch {BAIT})", f"`touch {BAIT}`", f"\ntouch {BAIT}\n", f"'; touch {BAIT}; '",
    f'"; touch {BAIT}; "', "${HOME}", "x${PATH:-/}y", "\\", "\\\\", "a\\'b", "\r\n", "\x00",
    "\udcff", "\u00e9\u2028\u2029\x85\x0b\x0c\x1c", "#", " # c", "\ufeff\u202e", "ON", "",
    "\U0001f600", "- name: EVIL",
]  # fmt: skip
CHARS = "$`'\"\\{}()\n\r\t #;&|<>!*?~=:-a\u00e9\u2028\x85\x00\udcff\U0001f600"
TEXT = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.sampled_from(CHARS), max_size=12),
    st.text(max_size=10),
)
NAMES = st.from_regex(r"KP_[A-Za-z0-9_]{1,6}", fullmatch=True)
ENV = st.dictionaries(NAMES, TEXT, max_size=3)
PROPERTY = settings(max_examples=60, derandomize=True, deadline=None)


def settings_of(env: dict[str, str], flags: list[str], version: str | None) -> EngineSettings:
    return EngineSettings(
        engine="vllm", version=version, fingerprint="0123456789abcdef", model_kind="default",
        env=env, flags=tuple(flags), decisions={},
    )  # fmt: skip


def unholdable(text: str) -> bool:
    """No environment or command line holds it: a NUL, or text that is not UTF-8."""
    return "\0" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def dotenv_refuses(text: str) -> bool:
    """What python-dotenv and a shell cannot both read exactly (and only that)."""
    return (
        re.search(r"\$\{[^}]*\}", text) is not None
        or "\r" in text
        or text.endswith("\\")
        or (("'" in text or "\\\\" in text) and ("$" in text or "`" in text))
    )


def rendered(env: dict[str, str], flags: list[str], version: str | None, fmt: str) -> str | None:
    """The output, or None where the encoder refused: exactly where the format cannot carry
    a value, with a one-line KernelPolicyError."""
    refuses = any(map(unholdable, [*env.values(), *flags]))
    if fmt == "dotenv":
        refuses = refuses or any(map(dotenv_refuses, env.values()))
    if not refuses:
        return render(settings_of(env, flags, version), fmt)
    with pytest.raises(EncodingError) as info:
        render(settings_of(env, flags, version), fmt)
    assert isinstance(info.value, KernelPolicyError)
    assert "\n" not in str(info.value)
    return None


@needs_bash
@PROPERTY
@given(env=ENV, flags=st.lists(TEXT, max_size=2), version=st.none() | TEXT)
def test_shell_eval_and_source_read_back_exactly(
    env: dict[str, str], flags: list[str], version: str | None
) -> None:
    """``eval "$(...)"`` and ``set -a; .`` read every value back and run nothing."""
    text = rendered(env, flags, version, "shell")
    if text is None:
        return
    for how in ("eval", "source"):
        read = bash_read(text, [*env, "EVIL"], how)
        assert (read.created, read.stderr, read.returncode) == ([], "", 0), how
        assert read.values == {**env, "EVIL": None}


@needs_bash
@PROPERTY
@given(env=ENV, flags=st.lists(TEXT, max_size=2), version=st.none() | TEXT)
def test_dotenv_reads_the_same_in_python_dotenv_and_bash(
    env: dict[str, str], flags: list[str], version: str | None
) -> None:
    """python-dotenv and ``set -a; .`` both read exactly the values; the shell runs nothing."""
    text = rendered(env, flags, version, "dotenv")
    if text is None:
        return
    assert dotenv_read(text) == env
    read = bash_read(text, [*env, "EVIL"], "source")
    assert (read.created, read.stderr, read.returncode) == ([], "", 0)
    assert read.values == {**env, "EVIL": None}


@PROPERTY
@given(env=ENV, flags=st.lists(TEXT, max_size=3), version=st.none() | TEXT)
def test_k8s_yaml_reads_back_exactly(
    env: dict[str, str], flags: list[str], version: str | None
) -> None:
    """PyYAML reads the env list, and the kubelet's expansion gives each value exactly; the
    flags' comment lines hold each flag as a YAML scalar; no line is anything but a comment or
    the list's own."""
    text = rendered(env, flags, version, "k8s")
    if text is None:
        return
    document = yaml_read(text)
    assert document.keys() == {"env"}
    assert [(e["name"], kubernetes_expand(e["value"], {})) for e in document["env"]] == list(
        env.items()
    )
    shapes = ("# ", "env:", "- name: ", "  value: ")
    assert all(line.startswith(shapes) for line in text.split("\n")[:-1])
    assert len(text.splitlines()) == len(text.split("\n")) - 1
    commented = [yaml_read(line[4:]) for line in text.splitlines() if line.startswith("# - ")]
    assert [kubernetes_expand(flag, {}) for flag in commented] == flags


@PROPERTY
@given(env=ENV, flags=st.lists(TEXT, max_size=3), version=st.none() | TEXT)
def test_json_formats_read_back_exactly(
    env: dict[str, str], flags: list[str], version: str | None
) -> None:
    """json and k8s-json: the JSON reader gets every value, flag and the version exactly."""
    text = rendered(env, flags, version, "json")
    if text is None:
        return
    document: dict[str, Any] = json_read(text)
    assert (document["env"], document["flags"], document["version"]) == (env, flags, version)
    fragment = json_read(render(settings_of(env, flags, version), "k8s-json"))
    assert fragment.keys() == {"env", "args"}
    assert [(e["name"], kubernetes_expand(e["value"], {})) for e in fragment["env"]] == list(
        env.items()
    )
    assert [kubernetes_expand(word, {}) for word in fragment["args"]] == flags
    assert text.isascii()


@PROPERTY
@given(text=TEXT)
def test_comments_and_yaml_scalars_are_one_line(text: str) -> None:
    """A comment or a YAML scalar never holds a line break of any reader."""
    for line in (f"# {escaped(text)}", nfd_comment(text), yaml_quoted(text)):
        assert len(f"{line}\n".splitlines()) == 1
        assert line.isprintable()
    assert yaml_read(f"v: {yaml_quoted(text)}") == {"v": text}


@PROPERTY
@given(comment=TEXT, facts=st.dictionaries(TEXT, TEXT, max_size=4))
def test_nfd_file_holds_only_its_comments_and_labels(comment: str, facts: dict[str, str]) -> None:
    """nfd-worker reads back exactly the labels: a comment never becomes a label or a
    ``# +`` directive, whatever its text."""
    labels = {f"{PREFIX}/{label_name(name)}": label_value(value) for name, value in facts.items()}
    text = render_nfd(labels, comment=comment)
    assert nfd_read(text) == (labels, [])
    assert len(text.splitlines()) == len(text.split("\n")) - 1


@pytest.mark.parametrize(
    ("env", "flags", "match"),
    [
        pytest.param({"KP_X\n": "1"}, [], "not an environment variable name", id="name-newline"),
        pytest.param({"1KP": "1"}, [], "not an environment variable name", id="name-digit"),
        pytest.param({"KP X": "1"}, [], "not an environment variable name", id="name-space"),
        pytest.param({"": "1"}, [], "not an environment variable name", id="name-empty"),
        pytest.param({"KP_X": "a\x00b"}, [], "value of KP_X holds a NUL", id="value-nul"),
        pytest.param({"KP_X": "\udcff"}, [], "not valid UTF-8", id="value-not-utf8"),
        pytest.param({}, ["--x=\x00"], "holds a NUL", id="flag-nul"),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_refuses_what_no_environment_holds(
    fmt: str, env: dict[str, str], flags: list[str], match: str
) -> None:
    """Names that are not variable names, NULs and non-UTF-8 text: refused, one line."""
    with pytest.raises(EncodingError, match=match) as info:
        render(settings_of(env, flags, None), fmt)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "written"),
    [
        pytest.param("1", "KP_X=1", id="bare"),
        pytest.param("", "KP_X=", id="empty"),
        pytest.param("a b", "KP_X='a b'", id="space-single"),
        pytest.param("$(id)", "KP_X='$(id)'", id="dollar-single"),
        pytest.param("a\\b", "KP_X='a\\b'", id="lone-backslash-single"),
        pytest.param("it's", 'KP_X="it\'s"', id="quote-double"),
        pytest.param('a\\\\"b', 'KP_X="a\\\\\\\\\\"b"', id="backslashes-double"),
    ],
)
def test_dotenv_quoting_boundaries(value: str, written: str) -> None:
    """Bare, single or double quotes: the first that both readers read as the value."""
    text = render(settings_of({"KP_X": value}, [], None), "dotenv")
    assert text.splitlines()[1] == written
    assert dotenv_read(text) == {"KP_X": value}


@pytest.mark.parametrize(
    ("comment", "lines"),
    [
        pytest.param(
            "+expiry-time=2030-01-01T00:00:00Z",
            ["# \\x2bexpiry-time=2030-01-01T00:00:00Z"],
            id="directive",
        ),
        pytest.param("a\nb=c", ["# a", "# b=c"], id="two-lines"),
        pytest.param("v\x85x=1\u2028y=2", ["# v", "# x=1", "# y=2"], id="unicode-breaks-split"),
        pytest.param("v\x1bx", ["# v\\x1bx"], id="escape-escaped"),
        pytest.param("x\u202e", ["# x\\u202e"], id="bidi-escaped"),
    ],
)
def test_nfd_comment_lines(comment: str, lines: list[str]) -> None:
    """Comment lines of a feature file: split where Python splits lines, each escaped."""
    text = render_nfd({f"{PREFIX}/a": "b"}, comment=comment)
    assert text.split("\n")[:-2] == lines
    assert nfd_read(text) == ({f"{PREFIX}/a": "b"}, [])


def test_label_error_message_is_one_line() -> None:
    """A label that is not valid is named escaped, on one line."""
    with pytest.raises(KernelPolicyError, match="not a valid Kubernetes label") as info:
        render_nfd({f"{PREFIX}/a\nb": "c\nd"})
    assert "\n" not in str(info.value)
