"""CUDA graphs of the Triton sampler (kernelpolicy.kernels.sampling_triton.graphs): when a call
shape is captured and replayed (copying its logits, or reading them in place once their address
repeats), how a failed capture leaves a shape eager and is reported, and what each replay draws.
CUDA graphs cannot run here, so the capture is the fake of tests/triton_graph_helpers.py, which
replays the launch in Triton's interpreter reading only the graph's own buffers and the captured
address, as a real graph does: a value baked in by mistake shows as a wrong draw."""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.kernels.sampling_triton import Draws, graphs
from kernelpolicy.kernels.sampling_triton.draws import graph_uniforms
from kernelpolicy.kernels.sampling_triton.graphs import Mode
from kernelpolicy.policy import load_policy_text
from tests import triton_graph_helpers as shared
from tests.helpers import TritonSampler, fixture
from tests.triton_graph_helpers import BATCH, FakeGraphs, assert_exact, distinct, rows

fake, sample = shared.fake, shared.sample  # the shared fixtures, found here by their names


@pytest.mark.parametrize(
    ("k", "p"), [(20, None), (None, 0.8), (20, 0.8), (None, None)], ids=["k", "p", "kp", "none"]
)
def test_a_copy_graph_replays_new_logits_k_and_p(
    fake: FakeGraphs, k: int | None, p: float | None, sample: TritonSampler
) -> None:
    """The first call runs eagerly; then one capture serves every call of the shape: new
    logits, k and p go through its buffers."""
    batches = distinct(rows(seed) for seed in range(4))
    for call, (logits, scale) in enumerate(zip(batches, [1.0, 1.0, 0.5, 0.8], strict=True)):
        kk = None if k is None else torch.full((BATCH,), k - 5 * call)
        pp = None if p is None else torch.full((BATCH,), p * scale)
        ids = sample(logits, kk, pp)
        assert_exact(
            ids, logits, None if k is None else k - 5 * call, None if p is None else p * scale
        )
    assert len(fake.captures) == 1
    assert fake.replays == 2


def test_strided_logits_are_copied_into_the_graph(fake: FakeGraphs, sample: TritonSampler) -> None:
    wide = torch.cat([rows(3), rows(4)], dim=1)
    logits = wide[:, ::2]
    for _ in range(3):  # eager, capture, replay
        ids = sample(logits, torch.full((BATCH,), 7), None)
        assert_exact(ids, logits.contiguous(), 7, None)
    assert fake.replays == 1


def test_large_logits_are_read_in_place_once_their_address_repeats(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """Above COPY_BYTES the first call at an address runs eagerly, the second captures, the
    third replays reading the caller's tensor where it is (new contents included)."""
    monkeypatch.setattr(graphs, "COPY_BYTES", 0)
    buffers = [rows(5), rows(6)]
    p = torch.ones(BATCH)  # the whole softmax: what is read where is at stake, not the nucleus
    for call in range(3):
        for i, logits in enumerate(buffers):
            logits.copy_(rows(10 * call + i))
            ids = sample(logits, None, p)
            assert_exact(ids, logits, None, 1.0)
    assert fake.captures == [b.data_ptr() for b in buffers]
    assert fake.replays == 2


def test_small_logits_are_read_in_place_once_their_address_repeats(
    fake: FakeGraphs, sample: TritonSampler
) -> None:
    """Small logits at one address: the first call runs eagerly, the second captures a graph
    reading them where they are, which then replays for new contents: no copying graph at
    all, so no copy into a graph's buffer."""
    logits, k = rows(0), torch.full((BATCH,), 9)  # k stays where it is, read in place too
    for call in range(4):
        logits.copy_(rows(call))
        ids = sample(logits, k, None)
        assert_exact(ids, logits, 9, None)
    assert fake.captures == [logits.data_ptr()]
    assert fake.replays == 2


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_a_shape_captures_at_most_its_share_of_in_place_graphs(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, limit: int, sample: TritonSampler
) -> None:
    """A caller whose small logits move among more addresses than the cap: the first
    ``IN_PLACE_CAPTURES`` repeated addresses get in-place graphs (replayed when they come
    back), the rest the shape's copying graph; one eager call, then never a capture per
    call."""
    sample.tuning["in_place_captures"] = limit
    buffers = distinct(rows(seed) for seed in range(4))
    p = torch.ones(BATCH)  # the whole softmax: which graph reads which address is at stake
    order = [b for b in buffers for _ in range(2)] + buffers  # each twice, then each again
    for call, logits in enumerate(order):
        logits.copy_(rows(10 + call))
        assert_exact(sample(logits, None, p), logits, None, 1.0)
    addresses = [b.data_ptr() for b in buffers]
    assert [c for c in fake.captures if c in addresses] == addresses[:limit]
    assert len(fake.captures) == limit + 1  # and the copying graph
    assert fake.replays == len(order) - 1 - len(fake.captures)


def test_small_logits_whose_in_place_capture_failed_take_the_copying_graph(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """The in-place capture at an address fails: calls there replay the shape's copying
    graph from then on (not eager ones), and the failure is remembered for that address."""
    failing = FakeGraphs(fail_at=0)  # eager, the in-place capture fails, then the copying one
    sample.options["capture"] = failing
    logits, k = rows(0), torch.full((BATCH,), 3)  # few tokens: a k lost on the way shows
    for call in range(5):
        logits.copy_(rows(call))
        assert_exact(sample(logits, k, None), logits, 3, None)
    assert len(failing.captures) == 1  # eager, failed in place, copying capture, 2 replays
    assert failing.replays == 2
    (why,) = sample.sampler.graphs._failed.items.values()
    assert "planted" in why


def test_a_cached_in_place_graph_serves_once_sightings_are_forgotten(
    fake: FakeGraphs, sample: TritonSampler
) -> None:
    logits, k = rows(0), torch.full((BATCH,), 9)
    for call in range(3):  # eager, capture in place, replay
        logits.copy_(rows(call))
        sample(logits, k, None)
    sample.sampler.graphs._seen.items.clear()
    logits.copy_(rows(3))
    assert_exact(sample(logits, k, None), logits, 9, None)
    assert fake.captures == [logits.data_ptr()]
    assert fake.replays == 2


def test_replacing_an_in_place_graph_whose_k_moved_spends_no_capture_of_the_shape(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """Cap 1: the in-place graph reads k in place; k moves, a graph that copies it replaces it
    at the same key (not counted), and a second address, seen twice, still finds the shape's
    share spent and replays the copying graph."""
    sample.tuning["in_place_captures"] = 1
    first, second = distinct(rows(seed) for seed in range(2))
    k1, k2 = distinct([torch.full((BATCH,), 9), torch.full((BATCH,), 9)])
    for logits, k in [(first, k1), (first, k1), (first, k2), (second, k2), (second, k2)]:
        assert_exact(sample(logits, k, None), logits, 9, None)
    in_place, replacement, copying = fake.captures
    assert in_place == replacement == first.data_ptr()
    assert copying != second.data_ptr()
    assert list(sample.sampler.graphs._in_place.items.values()) == [1]
    assert fake.replays == 1


def test_a_failed_capture_leaves_the_shape_eager(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    failing = FakeGraphs(fail=True)
    sample.options["capture"] = failing
    for logits in distinct(rows(seed) for seed in range(3)):
        assert_exact(sample(logits, torch.full((BATCH,), 9), None), logits, 9, None)
    (why,) = sample.sampler.graphs._failed.items.values()
    assert "planted" in why
    assert len(sample.sampler.graphs) == 0


ENTRY: object = None
"""The sampler a test's Resolution loads (its policy's entry point names it)."""

TRITON_FIRST = f"""
schema = "kernelpolicy.policy/v1"
[features."sampler.top_k_top_p"]
description = "the Triton sampler, run here by Triton's interpreter"
fallback = "torch"
[[features."sampler.top_k_top_p".candidates]]
impl = "triton"
entry = "{__name__}:ENTRY"
[[features."sampler.top_k_top_p".candidates]]
impl = "torch"
"""


def test_a_failed_capture_is_reported_as_a_degradation(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """Through a Resolution: every call is still exact, triton stays the choice, and
    runtime_fallbacks, the warnings and explain say once per dtype that shapes whose capture
    failed launch eagerly; each failed shape is remembered (it is not captured again)."""
    failing = FakeGraphs(fail=True)
    sample.options["capture"] = failing
    sample.options["start"] = lambda run, name: run()  # each variant built at its first call
    monkeypatch.setattr(sys.modules[__name__], "ENTRY", sample.sampler)
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(TRITON_FIRST))
    kernel = resolution.impl("sampler.top_k_top_p")
    half = BATCH // 2
    shapes = [(0, BATCH), (1, BATCH), (2, half), (3, half)]  # each batch eager, then captured
    for logits in distinct(rows(seed, batch) for seed, batch in shapes):
        batch = logits.shape[0]
        assert_exact(kernel(logits, torch.full((batch,), 9), None), logits, 9, None)
    note = resolution.runtime_fallbacks["sampler.top_k_top_p"]
    assert note == (
        "triton degraded at run time: CUDA-graph capture failed for a float32 call shape "
        f"(batch {BATCH}, vocab 200: RuntimeError: operation not permitted when stream is "
        "capturing (planted)); a float32 call shape whose capture fails launches eagerly, with "
        "the host time of each launch; still triton, correct but slower"
    )
    decision = resolution.decision("sampler.top_k_top_p")
    assert (decision.impl, decision.reason, decision.warnings) == (
        "triton",
        Reason.PREFERRED,
        (note,),
    )
    assert resolution.to_dict()["decisions"]["sampler.top_k_top_p"]["warnings"] == [note]
    assert len(sample.sampler.graphs._failed.items) == 2  # both batches
    assert fake.captures == []
    assert len(sample.sampler.graphs) == 0


def test_seeded_calls_run_eagerly(fake: FakeGraphs, sample: TritonSampler) -> None:
    logits = rows(7, batch=3)
    generators = {1: torch.Generator().manual_seed(42)}
    for _ in range(2):
        sample(logits, torch.full((3,), 20), None, generators)
    assert fake.captures == []
    assert len(sample.sampler.graphs) == 0


def test_each_replay_draws_fresh_uniforms(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """The uniforms are drawn before each replay, outside the graph: replays of the same
    logits draw new tokens (frozen uniforms would repeat the first call's draws row by row)."""
    sample.draws = Draws(uniform=sample.draws.uniform, graph=graph_uniforms)
    torch.manual_seed(0)
    logits = torch.zeros(BATCH, 200)  # every token equally likely
    # a copying graph's first run, an in-place graph's first run, then two replays of it
    p = torch.ones(BATCH)  # one p: a new one each call could land where the last was
    draws = [sample(logits, None, p) for _ in range(4)]
    assert fake.replays == 2
    assert not torch.equal(draws[2], draws[3])
    assert not torch.equal(draws[1], draws[2])
    assert not torch.equal(draws[0], draws[1])


def one_value(value: float, shape: tuple[int, ...], past: float) -> torch.Tensor:
    """``value`` alone in a tensor of ``shape`` (int64 for an int ``past``, as a k), with
    ``past`` after it in memory: a kernel that read past its end would draw with ``past`` (k 1,
    p 0.01: the top token alone), where whatever the allocator left there might pass."""
    backing = torch.full((BATCH,), past)
    backing[0] = value
    return backing[:1].reshape(shape)


@pytest.mark.parametrize(
    ("k", "p"),
    [  # k 7, p 0.5: a value lost on the way (no k, p 1.0) shows in BATCH rows
        pytest.param(one_value(7, (1,), past=1), None, id="k-one"),
        pytest.param(None, one_value(0.5, (), past=0.01), id="p-0d"),
        pytest.param(one_value(7, (1,), past=1), one_value(0.8, (1,), past=0.01), id="both-one"),
    ],
)
@pytest.mark.parametrize("eager", [False, True], ids=["graph", "eager"])
def test_one_value_for_all_rows_is_broadcast(
    fake: FakeGraphs,
    monkeypatch: pytest.MonkeyPatch,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    eager: bool,
    sample: TritonSampler,
) -> None:
    """The kernels read k[row] and p[row]: one value is broadcast, never read past its end."""
    if eager:
        monkeypatch.setattr(graphs, "plan", lambda **_: Mode.EAGER)
    # a graph: first run and capture, then replays
    for logits in distinct(rows(seed) for seed in range(3)):
        ids = sample(logits, k, p)
        assert_exact(ids, logits, None if k is None else int(k), None if p is None else float(p))


@pytest.mark.parametrize(
    ("k", "p", "words"),
    [
        pytest.param(
            torch.full((3,), 7), None, f"k must hold one value per row ([{BATCH}])", id="k"
        ),
        pytest.param(None, torch.full((BATCH, 1), 0.8), f"got shape ({BATCH}, 1)", id="p-2d"),
    ],
)
def test_parameters_of_another_shape_are_refused(
    k: torch.Tensor | None, p: torch.Tensor | None, words: str, sample: TritonSampler
) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        sample(rows(0), k, p)
