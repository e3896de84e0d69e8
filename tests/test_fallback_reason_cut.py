"""Why an implementation stops serving is cut to SHOWN_FALLBACK_REASON_CHARS by the one owner
of run-time changes (``Fallbacks``), whoever reports it: an error at load or at call, of a
feature with one route or routed per call."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from kernelpolicy.engine import resolve_policies
from kernelpolicy.limits import SHOWN_FALLBACK_REASON_CHARS
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

FEATURE = "demo.sampler"
MODULE = "kp_test_long_errors"
LONG = 10_000
POLICY = f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "a kernel whose error is long"
fallback = "torch"
{{routing}}
[[features."{FEATURE}".candidates]]
impl = "planted"
entry = "{MODULE}:{{entry}}"
[[features."{FEATURE}".candidates]]
impl = "torch"
entry = "kernelpolicy.kernels.torch_impl:top_k_top_p"
"""
ROUTED = f"""dtypes = ["float32"]
[[features."{FEATURE}".by_batch]]
prefer = ["planted", "torch"]
"""
# What a note holds beside the cut reason: the implementations' names, the fixed words and the
# cut's mark.
WORDS = 200


def _module() -> types.ModuleType:
    """A module whose ``fails_at_load`` raises a long error when looked up (at load), and whose
    ``fails_when_called`` raises one (at call)."""
    module = types.ModuleType(MODULE)

    def fails_when_called(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("call failed: " + "x" * LONG)

    def missing(name: str) -> Any:
        if name == "fails_at_load":
            raise ImportError("load failed: " + "y" * LONG)
        raise AttributeError(name)

    module.fails_when_called = fails_when_called  # type: ignore[attr-defined]
    module.__getattr__ = missing  # type: ignore[method-assign]
    return module


@pytest.mark.parametrize(
    ("entry", "routing"),
    [
        pytest.param("fails_at_load", "", id="at-load"),
        pytest.param("fails_when_called", "", id="at-call"),
        pytest.param("fails_at_load", ROUTED, id="at-load-routed"),
        pytest.param("fails_when_called", ROUTED, id="at-call-routed"),
    ],
)
def test_a_long_error_is_cut_in_the_notes(
    monkeypatch: pytest.MonkeyPatch, entry: str, routing: str
) -> None:
    """A 10,000-character error hands the calls to torch; the note, the decision's reasons and
    its warnings keep SHOWN_FALLBACK_REASON_CHARS of it (before, an error at load went in
    whole)."""
    monkeypatch.setitem(sys.modules, MODULE, _module())
    policies = load_policy_text(POLICY.format(entry=entry, routing=routing))
    resolution = resolve_policies(fixture("cpu"), {}, policies)
    kernel = resolution.impl(FEATURE)
    logits = torch.randn(2, 50)
    assert kernel(logits, torch.full((2,), 5), None).shape == (2,)
    note = resolution.runtime_fallbacks[FEATURE]
    assert "(cut, " in note, note
    decision = resolution.decision(FEATURE)
    for text in (note, *decision.reasons, *decision.warnings):
        assert len(text) <= SHOWN_FALLBACK_REASON_CHARS + WORDS, text
