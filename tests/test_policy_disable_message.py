"""What a [[disable]] of an implementation no policy defines says: the known names, or, where
the set defines none (the override file loaded alone), that the defining file is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policies
from tests.helpers import ROOT


def _disable(tmp_path: Path, feature: str, impl: str) -> Path:
    path = tmp_path / "90-ops.toml"
    path.write_text(
        'schema = "kernelpolicy.policy/v1"\n\n[[disable]]\n'
        f'feature = "{feature}"\nimpl = "{impl}"\nreason = "incident 12"\n'
    )
    return path


@pytest.mark.parametrize(
    ("with_pack", "feature", "impl", "said", "not_said"),
    [
        pytest.param(False, "mylab.softcap", "fused",
                     "disables mylab.softcap/fused, but these policy files define no feature; "
                     "load it with the file that defines mylab.softcap (both paths, or +DIR",
                     "(known: )", id="alone-defines-nothing"),
        pytest.param(True, "mylab.softcap", "fused",
                     "disables mylab.softcap/fused, which is not defined (known: allreduce_rmsnorm",
                     "define no feature", id="feature-not-in-the-pack"),
        pytest.param(True, "sampler.greedy", "aitr",
                     "disables sampler.greedy/aitr, which is not defined (known: aiter, torch)",
                     "define no feature", id="impl-not-of-the-feature"),
    ],
)  # fmt: skip
def test_undefined_disable_says_what_is_known(
    tmp_path: Path, with_pack: bool, feature: str, impl: str, said: str, not_said: str
) -> None:
    """Never an empty "known:" list: with nothing defined, the hint to load the defining file."""
    paths = [*([ROOT / "policies"] if with_pack else []), _disable(tmp_path, feature, impl)]
    with pytest.raises(PolicyError) as raised:
        load_policies(paths)
    assert said in str(raised.value)
    assert not_said not in str(raised.value)
