"""``kernelpolicy env``'s output read back by its real consumers (issue 24, findings 1-3):
hostile versions and values stay data in bash, python-dotenv, YAML and JSON; what a format
cannot carry exactly is one error line and exit 2, never a bent value or a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelpolicy.cli import main
from kernelpolicy.platform.fixtures import fixture_dir
from tests.consumers import BAIT, bash_read, dotenv_read, json_read, kubernetes_expand, yaml_read

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

H100 = str(fixture_dir() / "platforms" / "h100-sxm.json")
NAME = "KP_TEST_VALUE"
POLICY = f"""schema = "kernelpolicy.policy/v1"
[features."attention.backend"]
description = "Attention backend"
fallback = "engine_default"
in_process = false
[[features."attention.backend".candidates]]
impl = "flash_attn"
vendor = "nvidia"
[[features."attention.backend".candidates.engines.vllm]]
env = {{ {NAME} = "policy", KP_TEST_PLAIN = "1" }}
flags = ["--attention-backend", "FLASH_ATTN"]
[[features."attention.backend".candidates]]
impl = "engine_default"
engines.vllm = [{{}}]
"""


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("policy") / "p.toml"
    path.write_text(POLICY)
    return str(path)


def env_cli(*args: str) -> tuple[int, str, str]:
    """``kernelpolicy env --engine vllm ARGS`` in-process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["env", "--engine", "vllm", *args])
    return code, out.getvalue(), err.getvalue()


def told(policy: str, value: str, fmt: str) -> tuple[int, str, str]:
    """The output when the user set ``KP_TEST_VALUE=value`` (kept, never overwritten)."""
    return env_cli(
        "--platform", H100, "--policies", policy, "--env", f"{NAME}={value}", "--format", fmt
    )


def read_back(fmt: str, text: str) -> dict[str, str | None]:
    """The variables ``text`` sets, as the format's consumer reads them; a shell also must
    run nothing and complain about nothing."""
    if fmt in ("shell", "dotenv"):
        ways = ("eval", "source") if fmt == "shell" else ("source",)
        reads = [bash_read(text, [NAME, "KP_TEST_PLAIN", "EVIL"], how) for how in ways]
        for read in reads:
            assert (read.created, read.stderr, read.returncode) == ([], "", 0)
        assert all(read.values == reads[0].values for read in reads)
        values = {k: v for k, v in reads[0].values.items() if v is not None}
        if fmt == "dotenv":
            assert dotenv_read(text) == values
        return values
    document = yaml_read(text) if fmt == "k8s" else json_read(text)
    env = document["env"]
    if not isinstance(env, list):
        return dict(env)
    container: dict[str, str | None] = {}  # what the kubelet gives the container
    for entry in env:
        defined = {k: v for k, v in container.items() if v is not None}
        container[entry["name"]] = kubernetes_expand(entry["value"], defined)
    return container


def one_error_line(err: str) -> str:
    """The error of a refused output: the last line of stderr, one line, no traceback."""
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("kernelpolicy: error: ")
    assert err.endswith(last + "\n")
    return last


# Finding 1: a version from a snapshot (or --engine-version) went unescaped into the header.
INJECTED_VERSIONS = [
    pytest.param("shell", f"0.12.0\ntouch {BAIT}\n#", id="shell-newline-command"),
    pytest.param("shell", f"0.12.0\ntouch {BAIT}\r", id="shell-newline-then-cr"),
    pytest.param("dotenv", f"0.12.0\ntouch {BAIT}\nEVIL=1", id="dotenv-foreign-line"),
    pytest.param("dotenv", "0.12.0\u2028EVIL=1\nEVIL=2", id="dotenv-line-separator"),
    pytest.param("k8s", '0.12.0\n- name: EVIL\n  value: "1"', id="k8s-foreign-entry"),
    pytest.param("k8s", "0.12.0\x85- name: EVIL", id="k8s-yaml-next-line"),
]


@pytest.mark.parametrize(("fmt", "version"), INJECTED_VERSIONS)
def test_an_engine_version_with_line_breaks_prints_nothing(
    policy: str, fmt: str, version: str
) -> None:
    """A --engine-version with line breaks is no version: refused before anything is printed
    (it was one comment line of the header before --engine-version had to be a version), so
    no consumer reads a line of it."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["--platform", H100, "--policies", policy, "--engine-version", version, "--format", fmt]
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exited,  # a usage error, as argparse ends one
    ):
        main(["env", "--engine", "vllm", *argv])
    assert exited.value.code == 2
    assert out.getvalue() == ""
    last = err.getvalue().splitlines()[-1]  # the value shown as repr: one line, escaped
    assert "is not a version" in last
    assert "\\n" in last or "\\x85" in last or "\\u2028" in last or "\\r" in last


@pytest.mark.parametrize(
    ("where", "key"),
    [
        pytest.param(("libraries", "vllm"), "libraries.vllm", id="library-version"),
        pytest.param(("driver", "version"), "driver.version", id="driver-version"),
        pytest.param(("torch", "version"), "torch.version", id="torch-version"),
        pytest.param(("devices", "name"), "devices.0.name", id="device-name"),
    ],
)
def test_snapshot_string_with_a_newline_is_refused_at_load(
    tmp_path: Path, where: tuple[str, str], key: str
) -> None:
    """The issue's snapshot (``"vllm": "0.12.0\\ntouch /tmp/X\\n#"``) is refused, naming the
    key; nothing is printed for a shell to run."""
    snapshot = json.loads(Path(H100).read_text())
    part, field = where
    target = snapshot[part][0] if part == "devices" else snapshot[part]
    target[field] = f"0.12.0\ntouch {tmp_path / 'X'}\n#"
    path = tmp_path / "node.json"
    path.write_text(json.dumps(snapshot))
    code, out, err = env_cli("--platform", str(path), "--format", "shell")
    assert (code, out) == (2, "")
    assert f"{key}: holds the control character U+000A" in err
    assert not (tmp_path / "X").exists()


# Finding 2: the dotenv format ran backticks when a shell sourced it.
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(f"x`touch {BAIT}`", id="backticks"),
        pytest.param(f"`touch {BAIT}`\n", id="backticks-newline"),
        pytest.param(f'"`touch {BAIT}`"', id="backticks-in-quotes"),
        pytest.param(f"a\\`touch {BAIT}`", id="escaped-backtick"),
    ],
)
def test_dotenv_sourced_by_a_shell_runs_nothing(policy: str, value: str) -> None:
    """``set -a; . file`` reads the value back exactly and creates no file."""
    code, out, err = told(policy, value, "dotenv")
    assert code == 0, err
    assert read_back("dotenv", out)[NAME] == value


# Finding 3: the dotenv escapes were not python-dotenv's (``\\$`` read back as ``\\$``).
@pytest.mark.parametrize("fmt", ["k8s", "k8s-json"])
@pytest.mark.parametrize(
    "value",
    [
        pytest.param("$(KP_TEST_PLAIN)", id="reference-to-an-earlier-variable"),
        pytest.param("$(HOME)", id="reference-to-nothing"),
        pytest.param("a$$b", id="escaped-dollar"),
        pytest.param("price $5 and $", id="plain-dollars"),
        pytest.param("$(unclosed", id="unclosed-reference"),
    ],
)
def test_kubernetes_gives_the_container_the_exact_value(policy: str, value: str, fmt: str) -> None:
    """The kubelet expands $(NAME) and reads $$ as $ in env values and args: each $ is doubled,
    so the container gets the value itself (a $(...) used to be expanded, a $$ halved)."""
    code, out, err = told(policy, value, fmt)
    assert code == 0, err
    assert read_back(fmt, out)[NAME] == value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("$HOME", id="dollar-name"),
        pytest.param("price $5", id="dollar-digit"),
        pytest.param("a$b\\c", id="dollar-backslash"),
        pytest.param("$(id)", id="dollar-parens"),
        # The boundary: values the old escaping carried too, and still do.
        pytest.param("a\\\\b", id="two-backslashes"),
        pytest.param('it\'s "quoted"', id="both-quotes"),
        pytest.param("line one\nline two", id="newline"),
    ],
)
def test_dotenv_reads_back_exactly_in_python_dotenv_and_bash(policy: str, value: str) -> None:
    """python-dotenv and bash both read the value the user set, unchanged."""
    code, out, err = told(policy, value, "dotenv")
    assert code == 0, err
    assert read_back("dotenv", out)[NAME] == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param("x${HOME}y", "expands ${...}", id="brace-reference"),
        pytest.param("${PATH:-/bin}", "expands ${...}", id="brace-default"),
        pytest.param("it's $5", "needs single quotes", id="quote-and-dollar"),
        pytest.param("C:\\", "final backslash", id="final-backslash"),
        pytest.param("a\rb", "carriage return", id="carriage-return"),
    ],
)
def test_dotenv_refuses_what_it_cannot_carry(policy: str, value: str, why: str) -> None:
    """A value python-dotenv and a shell cannot both read exactly: one line, exit 2."""
    code, out, err = told(policy, value, "dotenv")
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert f"cannot carry the value of {NAME}" in line
    assert why in line


CHARS = "$`'\"\\{}()\n\r\t #;&|<>!*~=a\u00e9\u2028\x85\x00"
VALUES = st.one_of(
    st.text(alphabet=st.sampled_from(CHARS), max_size=10),
    st.text(max_size=8),
    st.sampled_from([f"$(touch {BAIT})", f"`touch {BAIT}`", f"';touch {BAIT};'", "\udcff"]),
)
FORMATS = ("shell", "dotenv", "k8s", "k8s-json", "json")


def refused(fmt: str, value: str) -> bool:
    """What a format may refuse: what no environment holds (a NUL, text that is not UTF-8),
    and for dotenv what python-dotenv and a shell cannot both read exactly."""
    if "\0" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return True
    return fmt == "dotenv" and (
        re.search(r"\$\{[^}]*\}", value) is not None
        or "\r" in value
        or value.endswith("\\")
        or (("'" in value or "\\\\" in value) and ("$" in value or "`" in value))
    )


@settings(
    max_examples=25, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # fmt: skip
@given(value=VALUES)
def test_any_value_set_on_the_command_line_is_exact_or_refused(policy: str, value: str) -> None:
    """Through the CLI, every format either carries the user's value exactly to its consumer
    or exits 2 with one error line."""
    meant = value if value.strip() and value != "policy" else "policy"
    for fmt in FORMATS:
        code, out, err = told(policy, value, fmt)
        assert (code == 2) == refused(fmt, meant), (fmt, code, err)
        if code == 2:
            assert out == ""
            one_error_line(err)
            continue
        assert code == 0, err
        assert read_back(fmt, out) == {NAME: meant, "KP_TEST_PLAIN": "1"}
