"""A ``KERNELPOLICY_FORCE_<FEATURE>`` naming an implementation its feature does not have is a
mistake of the input, as the same mistake in ``KERNELPOLICY_OVERRIDES`` is: ``resolve()`` raises
a SettingsError and the CLI exits 2, whatever kind of model the feature serves (``mhc`` is for
sparse-MLA models only, and its decision error was a note with exit 0). A valid implementation
that cannot run here stays a decision's error."""

from __future__ import annotations

import pytest

import kernelpolicy
from kernelpolicy.cli import main
from kernelpolicy.engine.forces import check_forces
from kernelpolicy.errors import KernelPolicyError, SettingsError
from kernelpolicy.limits import MAX_ENV_VALUE_CHARS
from tests.helpers import FIXTURES, bundled, fixture

CPU = str(FIXTURES / "cpu.json")
OFF = {"KERNELPOLICY_LOG_FORMAT": "off"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"KERNELPOLICY_FORCE_MHC": "aitr"},
            "KERNELPOLICY_FORCE_MHC='aitr' is not an implementation of mhc; did you mean "
            "'aiter'?; expected one of aiter, torch",
            id="misspelt-for-a-model-kind",
        ),
        pytest.param(
            {"KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P": "flashinfr"},
            "KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P='flashinfr' is not an implementation of "
            "sampler.top_k_top_p; did you mean 'flashinfer'?; expected one of flashinfer,",
            id="misspelt-for-every-model",
        ),
        pytest.param(
            {"KERNELPOLICY_FORCE_MHC": "Torch"},
            "KERNELPOLICY_FORCE_MHC='Torch' is not an implementation of mhc; did you mean 'torch'?",
            id="names-are-case-sensitive",
        ),
        pytest.param(
            {"KERNELPOLICY_FORCE_MHC": " zzz "},
            "KERNELPOLICY_FORCE_MHC='zzz' is not an implementation of mhc; expected one of "
            "aiter, torch",
            id="nothing-close",
        ),
        pytest.param(
            {"KERNELPOLICY_FORCE_MHC": "t" * (MAX_ENV_VALUE_CHARS + 1)},
            f"KERNELPOLICY_FORCE_MHC: a value of {MAX_ENV_VALUE_CHARS + 1} characters is over "
            f"MAX_ENV_VALUE_CHARS ({MAX_ENV_VALUE_CHARS}) and was not read; expected one of "
            "aiter, torch",
            id="over-the-limit",
        ),
        pytest.param(
            {"KERNELPOLICY_FORCE_MHC": "torch", "KERNELPOLICY_FORCE_SAMPLER_GREEDY": "aitr"},
            "KERNELPOLICY_FORCE_SAMPLER_GREEDY='aitr' is not an implementation of "
            "sampler.greedy; did you mean 'aiter'?",
            id="one-bad-among-good",
        ),
    ],
)
def test_a_force_of_no_implementation_is_refused(env: dict[str, str], message: str) -> None:
    """check_forces and resolve() raise a SettingsError naming the variable, the value, the
    feature, its implementations and the closest one."""
    with pytest.raises(SettingsError) as error:
        check_forces(bundled(), env, {})
    assert message in str(error.value)
    with pytest.raises(KernelPolicyError) as error:
        kernelpolicy.resolve(fixture("cpu"), {**env, **OFF})
    assert isinstance(error.value, SettingsError)
    assert message in str(error.value)
    assert "t" * 100 not in str(error.value)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"KERNELPOLICY_FORCE_MHC": "torch"}, id="an-implementation"),
        pytest.param({"KERNELPOLICY_FORCE_MHC": " torch\n"}, id="padded-as-the-engine-reads"),
        pytest.param({"KERNELPOLICY_FORCE_MHC": ""}, id="empty-is-unset"),
        pytest.param({"KERNELPOLICY_FORCE_MHC": "  "}, id="blank-is-unset"),
        pytest.param({"KERNELPOLICY_FORCE_MHC": "aiter"}, id="one-that-cannot-run-here"),
    ],
)
def test_a_force_of_an_implementation_is_accepted(env: dict[str, str]) -> None:
    """What names an implementation (or is unset) passes; whether it runs here is the
    decision's business."""
    check_forces(bundled(), env, {})
    decision = kernelpolicy.resolve(fixture("cpu"), {**env, **OFF}).decision("mhc")
    expected = "required_unsupported" if env["KERNELPOLICY_FORCE_MHC"] == "aiter" else None
    assert (decision.error_code and decision.error_code.value) == expected
    assert decision.impl == (None if expected else "torch")


@pytest.mark.parametrize(
    ("argv", "shell", "code", "said"),
    [
        pytest.param(
            ["explain", "mhc"], {"KERNELPOLICY_FORCE_MHC": "aitr"}, 2,
            "kernelpolicy: error: KERNELPOLICY_FORCE_MHC='aitr' is not an implementation of "
            "mhc; did you mean 'aiter'?", id="shell-force",
        ),
        pytest.param(
            ["explain", "--platform", CPU, "--env", "KERNELPOLICY_FORCE_MHC=aitr", "mhc"], {}, 2,
            "kernelpolicy: error: KERNELPOLICY_FORCE_MHC='aitr' is not an implementation of "
            "mhc; did you mean 'aiter'?", id="env-option",
        ),
        pytest.param(
            ["explain", "--platform", CPU, "--env", 'KERNELPOLICY_OVERRIDES={"mhc": "aitr"}',
             "mhc"], {}, 2,
            "kernelpolicy: error: KERNELPOLICY_OVERRIDES['mhc'] = 'aitr' is not an "
            "implementation of mhc; did you mean 'aiter'?", id="override-the-same",
        ),
        pytest.param(
            ["explain", "--platform", CPU, "--env", "KERNELPOLICY_FORCE_MHC=aiter", "mhc"], {}, 0,
            "kernelpolicy: note: mhc is an error for mla-sparse models only",
            id="unsupported-here-is-a-finding",
        ),
    ],
)  # fmt: skip
def test_the_cli_exits_2_for_a_force_of_no_implementation(
    argv: list[str],
    shell: dict[str, str],
    code: int,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2 and one error line, as for KERNELPOLICY_OVERRIDES; nothing on stdout."""
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == code
    captured = capsys.readouterr()
    assert said in captured.err
    assert (captured.out == "") == (code == 2)
