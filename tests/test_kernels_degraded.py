"""Degradations (kernelpolicy/kernels/degraded.py): a kernel that keeps serving, slower, after
part of it failed at run time is reported by every Resolution that loaded it, in
runtime_fallbacks, the decision's warnings and explain, as a degradation, not a switch."""

from __future__ import annotations

import gc
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.kernels import sampling_triton
from kernelpolicy.kernels.degraded import Degradations, Degraded
from kernelpolicy.policy import load_policy_text
from kernelpolicy.render import explain_table
from tests.helpers import fixture

FEATURE = "sampler.top_k_top_p"
POLICY = f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "the Triton sampler, run here by Triton's interpreter"
fallback = "torch"
[[features."{FEATURE}".candidates]]
impl = "triton"
entry = "kernelpolicy.kernels.sampling_triton:top_k_top_p"
[[features."{FEATURE}".candidates]]
impl = "torch"
"""
RECORDS = ("UPCAST", "WIDE_FAILED", "REJECT_FAILED", "CAPTURE_FAILED")


class Listener:
    def __init__(self) -> None:
        self.heard: list[tuple[str, str]] = []

    def hear(self, source: str, note: str) -> None:
        self.heard.append((source, note))


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> Degradations:
    """The sampler's records, empty and on a channel of their own for this test."""
    channel = Degradations()
    monkeypatch.setattr(sampling_triton, "DEGRADATIONS", channel)
    for name in RECORDS:
        old: Degraded[torch.dtype] = getattr(sampling_triton, name)
        monkeypatch.setattr(sampling_triton, name, channel.record(old.what, old.effect))
    return channel


def loaded() -> tuple[Resolution, object]:
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(POLICY))
    return resolution, resolution.impl(FEATURE)


@pytest.mark.parametrize(
    ("write", "tells"),
    [
        pytest.param(lambda r: r.__setitem__("a", "why"), True, id="item-assignment"),
        pytest.param(lambda r: r.setdefault("a", "why"), True, id="setdefault"),
        pytest.param(lambda r: r.update({"a": "why"}), True, id="update"),
        pytest.param(lambda r: r.update(a="why"), True, id="update-keywords"),
        pytest.param(lambda r: r.__setitem__("old", "again"), False, id="overwrite"),
        pytest.param(lambda r: r.setdefault("old", "again"), False, id="setdefault-held"),
    ],
)
def test_a_new_key_tells_the_listeners_once(write: object, tells: bool) -> None:
    """Every way of storing a new key is heard, with the record's words; a held key is not."""
    channel = Degradations()
    record: Degraded[str] = channel.record("{key} broke", "{key} goes the slow way")
    record["old"] = "first"
    listener = Listener()
    channel.listen(listener.hear, "src")
    assert listener.heard == [("src", "old broke (first); old goes the slow way")]
    write(record)  # type: ignore[operator]
    assert listener.heard[1:] == ([("src", "a broke (why); a goes the slow way")] if tells else [])


def test_a_dropped_listener_is_not_kept_alive() -> None:
    """Listeners are held weakly: a Resolution that is dropped is freed, and not called."""
    channel = Degradations()
    record: Degraded[str] = channel.record("{key}", "{key}")
    listener = Listener()
    channel.listen(listener.hear, "src")
    del listener
    gc.collect()
    record["x"] = "why"  # would raise on a dead listener
    assert channel._listeners == []
    with pytest.raises(TypeError):
        channel.listen(print, "src")  # not a bound method: it could not be held weakly


def test_a_listener_that_raises_does_not_fail_the_kernel() -> None:
    """The record is written inside the kernel's call: a failing listener is skipped, the key
    is stored, and the other listeners still hear."""

    class Broken:
        def hear(self, source: str, note: str) -> None:
            raise RuntimeError("a logging handler failed (planted)")

    channel = Degradations()
    record: Degraded[str] = channel.record("{key}", "{key}")
    broken, listener = Broken(), Listener()
    channel.listen(broken.hear, "a")
    channel.listen(listener.hear, "b")
    record["x"] = "why"
    assert record == {"x": "why"}
    assert listener.heard == [("b", "x (why); x")]


@pytest.mark.parametrize(
    ("name", "dtype", "words"),
    [
        pytest.param(
            "UPCAST", torch.bfloat16,
            "the kernels failed to compile for bfloat16 (planted); bfloat16 logits are "
            "converted to float32 first", id="upcast",
        ),
        pytest.param(
            "WIDE_FAILED", torch.float32,
            "the wide-nucleus kernels failed to build for float32 (planted); wide top-p rows "
            "of float32 logits go to the exact per-row kernel", id="wide-failed",
        ),
        pytest.param(
            "REJECT_FAILED", torch.float16,
            "the proposal kernels failed to build for float16 (planted); wide top-p rows of "
            "float16 logits go straight to the exact wide kernels", id="reject-failed",
        ),
        pytest.param(
            "CAPTURE_FAILED", torch.float32,
            "CUDA-graph capture failed for a float32 call shape (planted); a float32 call "
            "shape whose capture fails launches eagerly", id="capture-failed",
        ),
    ],
)  # fmt: skip
def test_each_record_reaches_the_resolution_as_a_degradation(
    records: Degradations, name: str, dtype: torch.dtype, words: str
) -> None:
    """A record written while a Resolution serves the sampler: one note, the same in
    runtime_fallbacks, the warnings, explain --json and the explain table; the decision still
    chooses triton; writing the key again adds nothing."""
    resolution, _ = loaded()
    record: Degraded[torch.dtype] = getattr(sampling_triton, name)
    record[dtype] = "planted"
    record[dtype] = "planted again"
    note = resolution.runtime_fallbacks[FEATURE]
    assert note.startswith("triton degraded at run time: " + words)
    assert note.endswith("; still triton, correct but slower")
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.reason) == ("triton", Reason.PREFERRED)
    assert decision.warnings == (note,)
    assert f"degraded: {note}" in decision.reasons
    assert resolution.to_dict()["decisions"][FEATURE]["warnings"] == [note]
    assert f"warning: {note}" in explain_table(resolution, [FEATURE])


def test_what_degraded_before_a_resolution_loaded_the_sampler_is_reported(
    records: Degradations,
) -> None:
    """The records are the process's: a Resolution that loads the sampler later reports what
    is already there, and every Resolution hears of a new one."""
    sampling_triton.UPCAST[torch.float16] = "planted earlier"
    first, _ = loaded()
    second, _ = loaded()
    sampling_triton.WIDE_FAILED[torch.float32] = "planted later"
    for resolution in (first, second):
        warnings = resolution.decision(FEATURE).warnings
        assert len(warnings) == 2
        assert "to compile for float16 (planted earlier)" in warnings[0]
        assert "to build for float32 (planted later)" in warnings[1]


def test_a_resolution_that_fell_back_ignores_the_sampler(records: Degradations) -> None:
    """Once the feature runs its fallback, the sampler degrading says nothing about it."""
    resolution, _ = loaded()
    resolution.fallbacks.switch(FEATURE, "planted")
    sampling_triton.UPCAST[torch.bfloat16] = "planted"
    assert "degraded" not in resolution.runtime_fallbacks[FEATURE]
    assert len(resolution.decision(FEATURE).warnings) == 1
