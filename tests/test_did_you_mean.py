"""The "did you mean" hints: commands, options, choices, features and gates (error paths)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import ResolutionError
from kernelpolicy.suggest import close_names, did_you_mean
from tests.helpers import FIXTURES, resolve_on


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        pytest.param("explian", ["explain", "env", "exec"], ["explain"], id="transposed"),
        pytest.param("top_k_top_p", ["sampler.top_k_top_p", "mhc"], ["sampler.top_k_top_p"],
                     id="suffix"),
        pytest.param("flashinfr", ["flashinfer", "triton", "torch"], ["flashinfer"], id="typo"),
        pytest.param("zzz", ["explain", "probe"], [], id="nothing-close"),
        pytest.param("probe", ["probe", "explain"], [], id="the-name-itself-is-no-suggestion"),
    ],
)  # fmt: skip
def test_close_names(word: str, choices: list[str], expected: list[str]) -> None:
    """The close names, best first; none when nothing is close."""
    assert close_names(word, choices) == expected
    assert bool(did_you_mean(word, choices)) == bool(expected)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["explian"], "did you mean 'explain'?", id="command"),
        pytest.param(["explain", "--jsn"], "--jsn: did you mean --json?", id="option"),
        pytest.param(["matrix", "--platfrms", "x"], "did you mean --platforms?",
                     id="option-of-the-command"),
        pytest.param(["env", "--engine", "vllm", "--format", "shel"], "did you mean 'shell'?",
                     id="choice"),
        pytest.param(["explain", "samplr.greedy", "--platform", str(FIXTURES / "cpu.json")],
                     "did you mean 'sampler.greedy'?", id="feature"),
        pytest.param(["env", "--engine", "vlm", "--platform", str(FIXTURES / "cpu.json")],
                     "--engine 'vlm': no policy tells that engine anything; did you mean 'vllm'?",
                     id="engine"),
        pytest.param(["env", "--engine", "VLLM", "--platform", str(FIXTURES / "cpu.json")],
                     "did you mean 'vllm'?", id="engine-in-capitals"),
        pytest.param(["exec", "--engine", "sglan", "--platform", str(FIXTURES / "cpu.json"),
                      "--", "true"], "did you mean 'sglang'?", id="exec-engine"),
        # the required option mistyped: argparse says "required" before "unrecognized"
        pytest.param(["env", "--engines", "vllm"],
                     "required: --engine (--engines: did you mean --engine or --engine-version?)",
                     id="required-option-mistyped"),
        pytest.param(["diff", "--againts", "x"], "required: --against (--againts: did you mean "
                     "--against?)", id="required-option-of-diff"),
        # after a command, the top-level --version is no alternative
        pytest.param(["explain", "--engine-version", "0.12.0"],
                     "--engine-version: not an option of explain; env, exec take it",
                     id="no-top-level-option-after-a-command"),
    ],
)  # fmt: skip
def test_cli_names_the_close_alternative(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped command, option, choice or feature: exit 2, nothing on stdout, and the close
    name on stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert message in captured.err


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda r: r.decision("sampler.topk_top_p"),
                     "did you mean 'sampler.top_k_top_p'?", id="decision"),
        pytest.param(lambda r: r.select("samplr.greedy", vocab_size=8),
                     "did you mean 'sampler.greedy'?", id="select"),
        pytest.param(lambda r: r.gate("allreduce_rmsnorm.onestage"),
                     "did you mean 'allreduce_rmsnorm.one_stage'?", id="gate"),
        pytest.param(lambda r: r.decision("zzz"), "the policies define:", id="nothing-close"),
    ],
)  # fmt: skip
def test_resolution_errors_name_the_close_feature(
    call: Callable[[Resolution], object], message: str
) -> None:
    """decision(), select() and gate() errors for an unknown name suggest the close one."""
    with pytest.raises(ResolutionError, match="unknown") as info:
        call(resolve_on("cpu"))
    assert message in str(info.value)
    if "zzz" in str(info.value):
        assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"KERNELPOLICY_FORCE_SAMPLER_GREEDDY": "torch"},
                     "did you mean 'KERNELPOLICY_FORCE_SAMPLER_GREEDY'?", id="force-variable"),
        pytest.param({"KERNELPOLICY_OVERRIDES": '{"samplr.greedy": "torch"}'},
                     "did you mean 'sampler.greedy'?", id="override-feature"),
        pytest.param({"KERNELPOLICY_OVERRIDES": '{"mhc": "aitr"}'},
                     "is not an implementation of mhc; did you mean 'aiter'?",
                     id="override-implementation"),
        pytest.param({"KERNELPOLICY_OVERRIDES": '{"mhc": "zzz"}'}, "expected one of aiter, torch",
                     id="override-nothing-close"),
    ],
)  # fmt: skip
def test_force_and_override_errors_name_the_close_name(
    env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped force variable, overridden feature or implementation: exit 2, nothing on
    stdout, the close name on stderr (none offered when nothing is close)."""
    argv = ["explain", "--platform", str(FIXTURES / "cpu.json")]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert ("did you mean" in captured.err) == ("zzz" not in message and "zzz" not in str(env))


def test_forced_implementation_error_names_the_close_one() -> None:
    """KERNELPOLICY_FORCE_<FEATURE> with a mistyped implementation: the decision's error
    suggests the close implementation."""
    decision = resolve_on("h100-sxm", KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P="flashinfr").decision(
        "sampler.top_k_top_p"
    )
    assert decision.error is not None
    assert "is not an implementation of sampler.top_k_top_p; did you mean 'flashinfer'?" in (
        decision.error
    )
