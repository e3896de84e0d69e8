"""``Resolution.impl()`` of an implementation whose library is not installed names the extra
that installs it (``pip install 'kernelpolicy[torch]'``), as ``verify`` names its own, where
it used to end at Python's "No module named 'torch'"."""

from __future__ import annotations

import sys

import pytest

from kernelpolicy.errors import ResolutionError
from tests.helpers import resolve_on

ENTRY = "kernelpolicy.kernels.torch_impl"


@pytest.mark.parametrize(
    ("missing", "ending"),
    [
        pytest.param(
            "torch",
            "(kernelpolicy's kernels run on torch, an optional extra: pip install "
            "'kernelpolicy[torch]', or the torch build for your GPU first)",
            id="torch-names-its-extra",
        ),
        pytest.param(ENTRY, "halted; None in sys.modules", id="no-extra-no-hint"),
    ],
)
def test_a_missing_library_names_its_extra(
    missing: str, ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch missing (the T4's sampler is the torch one): the error names the extra; a module
    no extra installs gets no hint."""
    resolution = resolve_on("t4")
    assert resolution.decision("sampler.top_k_top_p").impl == "torch"
    monkeypatch.delitem(sys.modules, ENTRY, raising=False)  # imported again, and fails
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ModuleNotFoundError
    with pytest.raises(ResolutionError) as error:
        resolution.impl("sampler.top_k_top_p")
    message = str(error.value)
    assert message.startswith(f"sampler.top_k_top_p/torch: cannot load {ENTRY}:top_k_top_p: ")
    assert message.endswith(ending)
