"""Which hints a rejected candidate offers: those that, followed, can make it run."""

from __future__ import annotations

import pytest

from kernelpolicy.engine.model import CandidateResult, Check, CheckKind

INSTALL = Check(CheckKind.LIBRARY_MISSING, "needs fastlib (not installed)", "pip install 'fastlib'")


def fared(*failures: Check) -> CandidateResult:
    return CandidateResult("fast", "auto", None, failures)


@pytest.mark.parametrize(
    ("failures", "hints"),
    [
        pytest.param((INSTALL,), ("pip install 'fastlib'",), id="the-install-is-all-it-lacks"),
        pytest.param((Check(CheckKind.CAPABILITY, "needs >=8.0, found 7.5"), INSTALL), (),
                     id="a-device-check-no-install-fixes"),
        pytest.param((Check(CheckKind.VENDOR, "for another vendor's GPU"), INSTALL), (),
                     id="another-vendor"),
        pytest.param((Check(CheckKind.SWITCH_OFF, "VLLM_USE_FLASHINFER_SAMPLER=0"), INSTALL),
                     ("pip install 'fastlib'",), id="a-forced-candidate-switched-off"),
        pytest.param((Check(CheckKind.ROLLOUT, "out of the 0% cohort"), INSTALL),
                     ("pip install 'fastlib'",), id="a-requested-candidate-out-of-its-rollout"),
        pytest.param((Check(CheckKind.TORCH, "needs torch >=9.0"), INSTALL),
                     ("pip install 'fastlib'",), id="an-upgrade-without-a-hint-of-its-own"),
    ],
)  # fmt: skip
def test_hints_that_can_help(failures: tuple[Check, ...], hints: tuple[str, ...]) -> None:
    """No hint where a check of the device itself fails (a T4 is not told to install
    FlashInfer); the others' hints stay, also beside a switch, a rollout or a version."""
    assert fared(*failures).hints == hints
