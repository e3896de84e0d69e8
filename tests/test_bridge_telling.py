"""What env says where telling the engine goes wrong: two decisions that need different values
of one variable (an error: the engine is not started), a chosen implementation the policy does
not say how to tell, a rule that matches no release, a decision in error that no policy tells
this engine about (found untested by a coverage review). Real TOML, the real CLI. What exec
logs of a decision no rule tells the engine about."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status, engine_settings
from kernelpolicy.cli import main
from tests.helpers import resolve_on

FIXTURE = Path(__file__).resolve().parent.parent / "kernelpolicy/fixtures/platforms/h100-sxm.json"
HEAD = 'schema = "kernelpolicy.policy/v1"\n'


def feature(name: str, *candidates: str, extra: str = "") -> str:
    text = f'\n[features."{name}"]\ndescription = "{name}"\nin_process = false\n{extra}'
    for candidate in candidates:
        text += f'\n[[features."{name}".candidates]]\n{candidate}\n'
    return text


CASES = {
    "two-decisions-one-variable": (
        feature("a.one", 'impl = "x"\nengines.vllm = [{ env = { VLLM_USE_DEEP_GEMM = "1" } }]',
                extra='fallback = "x"\n')
        + feature("b.two", 'impl = "y"\nengines.vllm = [{ env = { VLLM_USE_DEEP_GEMM = "0" } }]',
                  extra='fallback = "y"\n'),
        1, "b.two: needs VLLM_USE_DEEP_GEMM=0, but a.one needs VLLM_USE_DEEP_GEMM=1",
    ),
    "chosen-without-a-rule": (
        feature("a.one", 'impl = "x"',
                'impl = "y"\nengines.vllm = [{ env = { VLLM_USE_DEEP_GEMM = "0" } }]',
                extra='fallback = "y"\n'),
        0, "a.one: the policy does not say how to tell vllm to run x",
    ),
    "no-rule-matches-the-release": (
        feature("a.one", 'impl = "x"\nengines.vllm = [{ versions = "<0.10", env = '
                '{ VLLM_USE_DEEP_GEMM = "1" } }]', extra='fallback = "x"\n'),
        0, "a.one: no vllm rule for x matches this platform and version",
    ),
    "an-error-no-policy-tells-this-engine": (
        feature("a.one", 'impl = "x"\nvendor = "amd"', extra='required = { hint = "get one" }\n')
        + feature("b.two", 'impl = "y"\nengines.vllm = [{ env = { VLLM_USE_DEEP_GEMM = "0" } }]',
                  extra='fallback = "y"\n'),
        0, "a.one is an error (",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("policy", "code", "said"), list(CASES.values()), ids=list(CASES))
def test_what_env_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, code: int, said: str
) -> None:
    (tmp_path / "p.toml").write_text(HEAD + policy)
    tmp_path.chmod(0o755)
    argv = ["env", "--engine", "vllm", "--engine-version", "0.32.0", "--platform", str(FIXTURE),
            "--policies", str(tmp_path / "p.toml")]  # fmt: skip
    assert main(argv) == code
    err = capsys.readouterr().err
    assert said in err, err


OUTCOMES = {
    # sparse_attn_indexer has only AMD implementations and no SGLang rule: on an H100 nothing
    # applies, which is no error (exec's start event said "ERROR (not told to the engine)")
    "h100-nothing-applies-is-no-error": (
        "h100-sxm", "(no implementation applies; not told to the engine)",
    ),
    # on ROCm without aiter the indexer's requirement makes the decision an error; SGLang is
    # told nothing of it, so it does not block, but the word stays
    "mi300x-an-error-not-told-stays-error": ("mi300x", "ERROR (not told to the engine)"),
}  # fmt: skip


@pytest.mark.parametrize(("fixture", "shown"), list(OUTCOMES.values()), ids=list(OUTCOMES))
def test_a_decision_not_told_says_error_only_when_it_is_one(fixture: str, shown: str) -> None:
    """What exec logs for a feature no rule tells SGLang about says ERROR only where the
    decision is an error (operators alert on the word)."""
    settings = engine_settings(resolve_on(fixture), "sglang", {}, engine_version="0.5.23")
    told = settings.decisions["sparse_attn_indexer"]
    assert (told.status, told.outcome()) == (Status.NOT_FOR_ENGINE, shown)
    assert settings.errors == ()
