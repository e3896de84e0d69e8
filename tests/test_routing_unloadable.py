"""Per-call routing when a routed implementation cannot be loaded: only the calls routed to it
move (to the next candidate of their row, the fallback last), and runtime_fallbacks, the
decision's warnings and explain say so; the decision's own choice failing hands the choice to
the next of its order, and only with nothing but the fallback left does the whole feature
switch."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.engine.dispatch import Routed
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

FEATURE = "demo.sampler"
TORCH = "kernelpolicy.kernels.torch_impl:top_k_top_p"
MISSING = "kernelpolicy_no_such_kernel_library.sampling:top_k_top_p"
CONTEXT = {"seeded": False}


def policy(broken: tuple[str, ...]) -> str:
    """``first`` is the policy's choice; the rows prefer ``small`` up to batch 32 and
    ``large`` above; each name in ``broken`` has an entry that cannot be imported."""
    candidates = "".join(
        f'[[features."{FEATURE}".candidates]]\nimpl = "{impl}"\n'
        f'entry = "{MISSING if impl in broken else TORCH}"\n'
        for impl in ("first", "small", "large", "torch")
    )
    return f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "kernels that win at different batch sizes"
fallback = "torch"
context = {{ seeded = "bool" }}
dtypes = ["float32", "bfloat16"]
{candidates}
[[features."{FEATURE}".by_batch]]
max = 32
prefer = ["small", "large"]
[[features."{FEATURE}".by_batch]]
min = 33
prefer = ["large"]
"""


def resolve(broken: tuple[str, ...]) -> Resolution:
    return resolve_policies(fixture("cpu"), {}, load_policy_text(policy(broken)))


def call(sampler: Routed, rows: int) -> None:
    logits = torch.randn(rows, 300)
    ids = sampler(logits, torch.full((rows,), 5), None)
    assert ids.shape == (rows,)
    assert bool(((ids >= 0) & (ids < 300)).all())


@pytest.mark.parametrize(
    ("broken", "small_batch", "large_batch", "chosen"),
    [
        pytest.param((), "small", "large", "first", id="all-load"),
        pytest.param(("small",), "large", "large", "first", id="small-rows-next-of-their-row"),
        pytest.param(("large",), "small", "first", "first", id="large-rows-next-of-their-row"),
        pytest.param(("small", "large"), "first", "first", "first", id="both-rows-unloadable"),
    ],
)  # fmt: skip
def test_an_unloadable_routed_kernel_costs_only_its_calls(
    broken: tuple[str, ...], small_batch: str, large_batch: str, chosen: str
) -> None:
    """Each row's calls go to the first of its order that loads; the decision keeps its
    choice; select() agrees with the callable; each failure is recorded once, as a note in
    runtime_fallbacks, the warnings and explain that names the next candidate."""
    resolution = resolve(broken)
    sampler = resolution.impl(FEATURE)
    assert isinstance(sampler, Routed)
    for _ in range(2):  # the second round answers from the table: nothing fails again
        call(sampler, 4)
        call(sampler, 64)
    assert [sampler.choice(4, torch.float32), sampler.choice(64, torch.bfloat16)] == [
        small_batch,
        large_batch,
    ]
    for batch, expected in ((4, small_batch), (64, large_batch)):
        assert resolution.select(FEATURE, batch=batch, dtype="float32", **CONTEXT) == expected
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.reason) == (chosen, Reason.PREFERRED)
    notes = resolution.runtime_fallbacks.get(FEATURE, "")
    for impl in ("small", "large"):
        expected_note = f"{impl} cannot be loaded ("
        assert notes.count(expected_note) == (impl in broken)
        document = resolution.to_dict()["decisions"][FEATURE]
        assert all(impl not in route["order"] for route in document["routes"]) is (impl in broken)
    assert len(decision.warnings) == len(broken)
    for note in decision.warnings:
        assert note in notes
        assert note.endswith("the calls routed to it go to the next candidate")
        assert "cannot load kernelpolicy_no_such_kernel_library" in note
    assert f"serves batch 1-32: {small_batch} for float32, bfloat16" in decision.reasons
    assert sum(line.startswith("serves batch 1-32") for line in decision.reasons) == 1


def test_the_chosen_kernel_unloadable_hands_the_choice_to_the_next() -> None:
    """The decision's own choice cannot be loaded: it leaves the order like any routed kernel,
    the next of the order becomes the choice, and each row's calls go to the first of its
    order that loads (not the whole feature to the fallback)."""
    resolution = resolve(("first",))
    sampler = resolution.impl(FEATURE)
    assert isinstance(sampler, Routed)
    call(sampler, 4)
    call(sampler, 64)
    assert [sampler.choice(4, torch.float32), sampler.choice(64, torch.float32)] == [
        "small",
        "large",
    ]
    decision = resolution.decision(FEATURE)
    assert decision.impl == "small"
    assert "first" not in decision.order
    note = resolution.runtime_fallbacks[FEATURE]
    assert note.startswith("first cannot be loaded (")
    assert note.endswith("the calls routed to it go to the next candidate")
    for batch, expected in ((4, "small"), (64, "large")):
        assert resolution.select(FEATURE, batch=batch, dtype="float32", **CONTEXT) == expected


def test_the_chosen_kernel_unloadable_with_only_the_fallback_left() -> None:
    """Every routed kernel but the fallback is unloadable: the feature falls back as a
    whole, as impl() of an unrouted feature does."""
    resolution = resolve(("first", "small", "large"))
    resolution.impl(FEATURE)
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.reason) == ("torch", Reason.FALLBACK)
    assert "using torch in this process" in resolution.runtime_fallbacks[FEATURE]
    assert resolution.select(FEATURE, batch=4, dtype="float32", **CONTEXT) == "torch"
