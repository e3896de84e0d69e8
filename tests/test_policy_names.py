"""Names match whole strings (issue 24, finding 4): ``$`` also matches before a final newline,
so a ``re.match('^...$')`` let ``"evil\\n"`` through; every name pattern is now whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policy_text
from kernelpolicy.policy.schema.conditions import DISTRIBUTION, ENV_NAME, IDENT

SCHEMA = 'schema = "kernelpolicy.policy/v1"\n'


def document(
    feature: str = "attention.backend", impl: str = "flash_attn", env: str = "VLLM_X"
) -> str:
    """A one-feature policy whose names are given as TOML basic strings' contents."""
    return (
        f'{SCHEMA}[features."{feature}"]\ndescription = "d"\nfallback = "engine_default"\n'
        f'in_process = false\n[[features."{feature}".candidates]]\nimpl = "{impl}"\n'
        f'vendor = "nvidia"\n[[features."{feature}".candidates.engines.vllm]]\n'
        f'env = {{ "{env}" = "1" }}\n[[features."{feature}".candidates]]\n'
        'impl = "engine_default"\nengines.vllm = [{}]\n'
    )


# The three cases, and their neighbours at the pattern's end.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(document(feature="evil\\n"), "name 'evil\\n'", id="feature-newline"),
        pytest.param(document(impl="mine\\n"), "name 'mine\\n'", id="impl-newline"),
        pytest.param(document(env="VLLM_X\\n"), "'VLLM_X\\n' is not an env", id="env-newline"),
        pytest.param(document(feature="evil\\r"), "name 'evil\\r'", id="feature-cr"),
        pytest.param(document(impl="mine "), "name 'mine '", id="impl-trailing-space"),
        pytest.param(document(env="\\nVLLM_X"), "is not an environment", id="env-leading"),
        pytest.param(document(feature="a.b\\n"), "name 'a.b\\n'", id="dotted-newline"),
    ],
)
def test_check_refuses_a_name_with_a_final_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    """``check`` exits 1 naming the name; the loader raises a located PolicyError."""
    path = tmp_path / "p.toml"
    path.write_text(text)
    assert main(["check", str(path)]) == 1
    assert message in capsys.readouterr().out
    with pytest.raises(PolicyError):
        load_policy_text(text, "p.toml")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(document(), id="plain"),
        pytest.param(document(feature="a", impl="x", env="_"), id="shortest"),
        pytest.param(document(feature="a_1.b_2.c", impl="a_1", env="A_1"), id="digits"),
    ],
)
def test_whole_names_still_load(text: str) -> None:
    """The boundary's other side: valid names of every shape still load."""
    assert load_policy_text(text, "p.toml").features


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        pytest.param(IDENT, "mine", id="ident"),
        pytest.param(ENV_NAME, "VLLM_X", id="env-name"),
        pytest.param(DISTRIBUTION, "flashinfer-python", id="distribution"),
    ],
)
@pytest.mark.parametrize("tail", ["\n", "\r", " ", "\n\n", "x\n"])
def test_name_patterns_are_whole_even_through_match(
    pattern: re.Pattern[str], name: str, tail: str
) -> None:
    """Code that calls ``.match()`` on the shared patterns (engine rules do) gets whole
    names too: the pattern ends in ``\\Z``, never ``$``."""
    assert pattern.match(name)
    assert pattern.fullmatch(name)
    assert pattern.match(name + tail) is None
    assert pattern.fullmatch(name + tail) is None


def test_env_with_a_newline_name_never_reaches_the_output(tmp_path: Path) -> None:
    """The issue's symptom: `env` printed ``export VLLM_X`` and ``=1`` on two lines; now the
    policy is refused before anything is printed."""
    path = tmp_path / "p.toml"
    path.write_text(document(env="VLLM_X\\n"))
    platform = str(Path(__file__).parent.parent / "kernelpolicy/fixtures/platforms/h100-sxm.json")
    assert main(["env", "--engine", "vllm", "--policies", str(path), "--platform", platform]) == 2


@pytest.mark.parametrize(
    "arch",
    [
        pytest.param("sm_90\\n", id="newline"),
        pytest.param("sm_\u0669\u0660", id="arabic-indic-digits"),
        pytest.param("gfx942 ", id="trailing-space"),
    ],
)
def test_arch_names_are_whole_and_ascii(arch: str) -> None:
    """``arch = ["sm_90\\n"]`` and digits of other scripts are no architecture."""
    text = document().replace('vendor = "nvidia"', f'arch = ["{arch}"]')
    with pytest.raises(PolicyError, match="expected sm_90 style"):
        load_policy_text(text, "p.toml")


def test_library_name_with_a_newline_is_refused() -> None:
    """``libraries = {"torch\\n" = ">=2"}``: not a distribution name."""
    text = document().replace('vendor = "nvidia"', 'libraries = { "torch\\n" = ">=2" }')
    with pytest.raises(PolicyError, match="is not a distribution name"):
        load_policy_text(text, "p.toml")
