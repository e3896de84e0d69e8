"""What env says where telling the engine goes wrong: two decisions that need different values
of one variable (an error: the engine is not started), a chosen implementation the policy does
not say how to tell, a rule that matches no release, a decision in error that no policy tells
this engine about (found untested by a coverage review). Real TOML, the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.cli import main

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
