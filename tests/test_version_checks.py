"""A candidate's driver, CUDA, ROCm and torch ranges against the platform's versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.engine import resolve_policies
from kernelpolicy.policy import load_policies
from tests.helpers import fixture

POLICY = """schema = "kernelpolicy.policy/v1"

[features."f"]
description = "a kernel that needs a range of {key}"
fallback = "slow"

[[features."f".candidates]]
impl = "fast"
entry = "kernelpolicy.kernels.torch_impl:greedy"
{key} = "{spec}"

[[features."f".candidates]]
impl = "slow"
entry = "kernelpolicy.kernels.torch_impl:greedy"
"""


@pytest.mark.parametrize(
    ("key", "spec", "impl", "said"),
    [
        pytest.param("driver", ">=550", "fast", None, id="driver-in-range"),
        pytest.param("driver", ">=999", "slow", "needs driver >=999", id="driver-too-old"),
        pytest.param("cuda", ">=12.0", "fast", None, id="cuda-in-range"),
        pytest.param("cuda", ">=13", "slow", "needs CUDA driver version >=13, found 12.8",
                     id="cuda-too-old"),
        pytest.param("rocm", ">=6", "slow", "unknown on this platform", id="rocm-on-nvidia"),
    ],
)  # fmt: skip
def test_version_ranges(tmp_path: Path, key: str, spec: str, impl: str, said: str | None) -> None:
    """h100-sxm has driver 570.133.20 and CUDA 12.8 (a driver range used to end in an
    AttributeError: the check read DriverInfo.driver, which does not exist)."""
    path = tmp_path / "p.toml"
    path.write_text(POLICY.format(key=key, spec=spec))
    decision = resolve_policies(fixture("h100-sxm"), {}, load_policies([path])).decisions["f"]
    assert decision.impl == impl
    failures = [str(f) for c in decision.candidates for f in c.failures]
    assert (said is None) == (not failures)
    if said is not None:
        assert any(said in failure for failure in failures), failures
