"""A call never waits on an implementation's import (kernelpolicy/engine/loading.py): a call
that finds the accelerated implementation still importing on impl()'s prefetch thread is served
by the next candidate (LazyEntry raises Importing, which the engine treats as Compiling), and
the calls after the import run it. The planted module's import blocks on an Event the test
sets (tests/planted_import.py): no sleeps, no timings (a join's timeout only keeps a regression
from hanging the run)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelpolicy.engine import resolve_policies
from kernelpolicy.policy import load_policy_text, names
from tests.helpers import fixture
from tests.planted_import import IMPORT_BEGAN, IMPORT_RELEASE, join_imports, planted_import

FEATURE = "sampler.top_k_top_p"
MODULE = "kp_slow_import"
SOURCE = """\
import torch
def kernel(logits, k, p, generators=None, *, k_max=None):
    return torch.full((logits.shape[0],), -1)
"""
"""The planted module's kernel, defined once its import is released."""
KERNEL = [-1] * 4
"""What the planted kernel answers (torch, k=1, answers the argmax)."""


def policy(routed: bool, fallback: bool) -> str:
    by_batch = f'[[features."{FEATURE}".by_batch]]\nmin = 1\nprefer = ["triton"]\n'
    return f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "the planted triton, then torch"
{'fallback = "torch"' if fallback else 'required = { hint = "planted" }'}
[[features."{FEATURE}".candidates]]
impl = "triton"
[[features."{FEATURE}".candidates]]
impl = "torch"
{by_batch if routed else ""}"""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(names.BUILTIN_ENTRIES, (FEATURE, "triton"), f"{MODULE}:kernel")
    monkeypatch.setitem(names.REQUIRES, "triton", (MODULE,))
    with planted_import(tmp_path, monkeypatch, MODULE, SOURCE):
        yield


def _call_in_a_thread(kernel: Any, logits: torch.Tensor) -> tuple[threading.Event, list[Any]]:
    done, answer = threading.Event(), []

    def call() -> None:
        answer.append(kernel(logits, torch.full((4,), 1), None).tolist())
        done.set()

    threading.Thread(target=call, daemon=True).start()
    return done, answer


@pytest.mark.parametrize(
    "routed", [pytest.param(True, id="routed-by-batch"), pytest.param(False, id="one-route")]
)
def test_a_call_during_the_import_is_served_by_the_fallback(planted: None, routed: bool) -> None:
    """The first call, while the prefetch imports: torch serves it, counted and said; once
    imported, calls run the implementation."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(routed, True)))
    kernel = resolution.impl(FEATURE)
    assert IMPORT_BEGAN.wait(60)
    logits = torch.randn(4, 300)
    done, answer = _call_in_a_thread(kernel, logits)
    assert done.wait(60), "the call waited on the import"
    assert answer == [logits.argmax(-1).tolist()]
    assert resolution.compiling_calls == {FEATURE: 1}
    assert resolution.runtime_fallbacks[FEATURE] == (
        f"triton is importing {MODULE}:kernel in the background; its calls go to the next "
        "ready candidate until it is imported"
    )
    IMPORT_RELEASE.set()
    join_imports()
    assert kernel(logits, torch.full((4,), 1), None).tolist() == KERNEL
    assert f"triton imported {MODULE}:kernel" in resolution.runtime_fallbacks[FEATURE]
    assert resolution.decision(FEATURE).impl == "triton"


def test_without_a_fallback_the_call_waits_for_the_import(planted: None) -> None:
    """Nothing else may serve it: the call runs the implementation once imported."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy(False, False)))
    kernel = resolution.impl(FEATURE)
    assert IMPORT_BEGAN.wait(60)
    done, answer = _call_in_a_thread(kernel, torch.randn(4, 300))
    IMPORT_RELEASE.set()
    assert done.wait(60)
    assert answer == [KERNEL]
    assert resolution.compiling_calls == {}
