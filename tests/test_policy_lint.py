"""kernelpolicy check's deeper findings: never-chosen candidates and liftable workarounds."""

from __future__ import annotations

import pytest

from kernelpolicy.check import lint
from kernelpolicy.policy import load_policy_text
from tests.helpers import bundled, fixture, with_libraries

HEAD = 'schema = "kernelpolicy.policy/v1"\n[features.mhc]\ndescription = "d"\nfallback = "torch"\n'


def candidate(body: str, impl: str = "aiter") -> str:
    return f'[[features.mhc.candidates]]\nimpl = "{impl}"\n{body}\n'


TORCH = candidate("", "torch")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            HEAD + TORCH + candidate('vendor = "amd"'),
            "'aiter' can never be chosen: 'torch' before it is always available",
            id="after-unconditional",
        ),
        pytest.param(
            HEAD + candidate('vendor = "nvidia"\narch = ["gfx942"]') + TORCH,
            "arch gfx942 never occurs on vendor nvidia",
            id="vendor-arch",
        ),
        pytest.param(
            HEAD + candidate('arch = ["gfx942"]\nexclude_arch = ["gfx942"]') + TORCH,
            "every arch it allows is also excluded",
            id="arch-excluded",
        ),
        pytest.param(
            HEAD + candidate('vendor = "nvidia"\ncapability = ">=13.5"') + TORCH,
            "capability >=13.5 matches no real device of nvidia",
            id="capability-empty",
        ),
        pytest.param(
            HEAD
            + candidate('switches = [{ env = "X", unset = "off", true = "off", false = "off" }]')
            + TORCH,
            "switch X is off in every case",
            id="switch-always-off",
        ),
        pytest.param(
            HEAD + candidate('entry = "no_such_pkg.kernels:mhc"\nvendor = "amd"', "mine") + TORCH,
            "entry cannot be imported here: no module named 'no_such_pkg'",
            id="entry-not-importable",
        ),
        pytest.param(
            HEAD
            + candidate('entry = "kernelpolicy.kernels.no_such:mhc"\nvendor = "amd"', "mine")
            + TORCH,
            "no module named 'kernelpolicy.kernels.no_such'",
            id="entry-submodule-missing",
        ),
    ],
)
def test_never_chosen(text: str, message: str) -> None:
    """Candidates that can never be chosen are reported."""
    issues = lint(load_policy_text(text))
    assert len(issues) == 1
    assert message in issues[0].message


LIFT = (
    HEAD
    + candidate(
        'vendor = "amd"\n[[features.mhc.candidates.workarounds]]\nreason = "inaccurate"\n'
        'until = "aiter with b639cb6"\nlift_when = { libraries = { "amd-aiter" = ">=0.1.14" } }'
    )
    + TORCH
)


@pytest.mark.parametrize(
    ("aiter", "liftable"),
    [
        pytest.param("0.1.13", False, id="not-yet"),
        pytest.param("0.1.14", True, id="met"),
        pytest.param(None, False, id="not-installed"),
    ],
)
def test_liftable_workaround(aiter: str | None, liftable: bool) -> None:
    """A workaround whose lift condition holds on the given platform is reported."""
    issues = lint(load_policy_text(LIFT), [("node", with_libraries("mi300x", amd_aiter=aiter))])
    assert bool(issues) is liftable
    if liftable:
        assert "can be lifted on node: its condition is met (amd-aiter 0.1.14)" in issues[0].message


def test_lifted_workaround_no_longer_disables() -> None:
    """The engine stops applying a workaround once its lift condition holds, and says so."""
    from kernelpolicy.engine import resolve_policies

    platform = with_libraries("mi300x", amd_aiter="0.1.14")
    decision = resolve_policies(platform, {}, load_policy_text(LIFT)).decision("mhc")
    assert decision.impl == "aiter"
    assert any("workaround lifted" in line for line in decision.reasons)


def test_bundled_pack_is_clean_on_every_fixture() -> None:
    """The shipped pack has no unreachable candidate and no liftable workaround."""
    names = ["h100-sxm", "mi300x", "mi325x", "mi355x", "cpu"]
    assert lint(bundled(), [(n, fixture(n)) for n in names]) == []
