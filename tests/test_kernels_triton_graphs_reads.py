"""CUDA graphs of the Triton sampler (kernelpolicy.kernels.sampling_triton.graphs): what a
replay reads. Large logits replay the group pass first, then the copies of k and p and the draw
of the uniforms, then the rest; k and p are read where the caller keeps them once they repeat,
copied when they move (or only when their values change), and a graph never replays reading them
at an old address. The capture is the fake of tests/triton_graph_helpers.py."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import Draws, graphs, replay
from tests import triton_graph_helpers as shared
from tests.helpers import TritonSampler
from tests.triton_graph_helpers import BATCH, FakeGraphs, assert_exact, distinct, rows

fake, sample = shared.fake, shared.sample  # the shared fixtures, found here by their names


@pytest.fixture
def groups_first(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> FakeGraphs:
    """Every shape replays its group pass as a graph of its own (as large logits do on CUDA);
    the copies of k and p and the draw of the uniforms are logged beside the replays."""
    sample.tuning["groups_first_bytes"] = 0
    real_copy = replay.transfer.copy_into

    def logged_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        fake.events.append("copy")
        real_copy(dst, src)

    monkeypatch.setattr(replay.transfer, "copy_into", logged_copy)
    draw = sample.draws.graph

    def logged_draw(uq: torch.Tensor) -> None:
        fake.events.append("uniforms")
        draw(uq)

    sample.draws = Draws(uniform=sample.draws.uniform, graph=logged_draw)
    return fake


@pytest.mark.parametrize(("k", "p"), [(20, None), (None, 0.8), (20, 0.8)], ids=["k", "p", "kp"])
def test_the_group_pass_replays_first_then_the_inputs_then_the_rest(
    groups_first: FakeGraphs, k: int | None, p: float | None, sample: TritonSampler
) -> None:
    """Large logits: two graphs a shape. Each replay starts the group pass before the host
    copies k and p and draws the uniforms (they overlap the full read), and every draw is
    still exact for new logits, k and p."""
    batches = distinct(rows(seed) for seed in range(4))
    for call, (logits, scale) in enumerate(zip(batches, [1.0, 1.0, 0.5, 0.8], strict=True)):
        kk = None if k is None else torch.full((BATCH,), k - 5 * call)
        pp = None if p is None else torch.full((BATCH,), p * scale)
        groups_first.events.clear()
        ids = sample(logits, kk, pp)
        assert_exact(
            ids, logits, None if k is None else k - 5 * call, None if p is None else p * scale
        )
    assert groups_first.parts == ["groups_pass", "after_groups"]
    copies = ["copy"] * ((k is not None) + (p is not None))
    assert groups_first.events == [
        "replay groups_pass",
        *copies,
        "uniforms",
        "replay after_groups",
    ]
    assert groups_first.replays == 4


def test_small_logits_keep_one_graph(fake: FakeGraphs, sample: TritonSampler) -> None:
    for logits in distinct(rows(seed) for seed in range(2)):
        ids = sample(logits, torch.full((BATCH,), 9), None)
        assert_exact(ids, logits, 9, None)
    assert fake.parts == ["launch"]


def test_a_failed_second_capture_leaves_the_shape_eager(
    groups_first: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """The group pass captured, the rest not: the shape runs eagerly from then on, never
    replaying half a call."""
    failing = FakeGraphs(fail_at=1)
    sample.options["capture"] = failing
    for logits in distinct(rows(seed) for seed in range(3)):
        ids = sample(logits, None, torch.full((BATCH,), 0.8))
        assert_exact(ids, logits, None, 0.8)
    assert failing.parts == ["groups_pass"]
    assert failing.replays == 0
    (why,) = sample.sampler.graphs._failed.items.values()
    assert "planted" in why
    assert len(sample.sampler.graphs) == 0


@pytest.fixture
def in_place(groups_first: FakeGraphs, monkeypatch: pytest.MonkeyPatch) -> FakeGraphs:
    """Large logits (read in place), with the copies of k and p logged."""
    monkeypatch.setattr(graphs, "COPY_BYTES", 0)
    return groups_first


def _calls(
    logits: torch.Tensor, params: list[tuple[torch.Tensor, torch.Tensor]], fake: FakeGraphs
) -> list[int]:
    """Call once per (k, p), each time with new values written into the tensors given; returns
    the copies each call made. Every draw is checked against the values of its own call."""
    copies = []
    for call, (k, p) in enumerate(params):
        k.fill_(20 - 3 * call)
        p.fill_(0.9 - 0.1 * call)
        logits.copy_(rows(call))
        fake.events.clear()
        assert fake.sample is not None
        ids = fake.sample(logits, k, p)
        assert_exact(ids, logits, 20 - 3 * call, 0.9 - 0.1 * call)
        copies.append(fake.events.count("copy"))
    return copies


def _params(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n (k, p) pairs at distinct addresses (all kept alive, so none is reused)."""
    return [(torch.zeros(BATCH, dtype=torch.int64), torch.zeros(BATCH)) for _ in range(n)]


def test_a_graph_reads_k_and_p_where_the_caller_keeps_them(
    in_place: FakeGraphs, sample: TritonSampler
) -> None:
    """vLLM keeps k and p in persistent buffers: once they repeat with the logits, the graph
    reads them there (no copy per call) and sees each call's new values."""
    (pair,) = _params(1)
    logits = rows(0)
    assert _calls(logits, [pair] * 4, in_place) == [0, 0, 0, 0]  # eager, capture, replays
    assert len(in_place.captures) == 2  # the group pass and the rest, once
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (pair[0].data_ptr(), pair[1].data_ptr())


def test_k_and_p_that_move_are_copied(in_place: FakeGraphs, sample: TritonSampler) -> None:
    logits = rows(0)
    assert _calls(logits, _params(4), in_place)[1:] == [2, 2, 2]
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (0, 0)
    assert len(in_place.captures) == 2


@pytest.mark.parametrize("moved", ["k", "p", "both"])
def test_a_graph_whose_k_or_p_moved_is_replaced_once_by_one_that_copies(
    in_place: FakeGraphs, moved: str, sample: TritonSampler
) -> None:
    first, *others = _params(4)

    def move(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, p = others[i]
        return (k if moved != "p" else first[0]), (p if moved != "k" else first[1])

    logits = rows(0)
    copies = _calls(logits, [first, first, move(0), first, move(1), move(2)], in_place)
    assert copies == [0, 0, 2, 2, 2, 2]
    assert len(in_place.captures) == 4  # in place, then copying: two graphs of two parts
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (0, 0)


@pytest.mark.parametrize("skip", [True, False], ids=["skipped", "always-copied"])
def test_a_host_parameter_is_copied_only_when_its_values_change(
    groups_first: FakeGraphs, monkeypatch: pytest.MonkeyPatch, skip: bool, sample: TritonSampler
) -> None:
    """Small logits (copied into the graph): k and p from the host are copied again only when
    their values differ from those copied last, a new tensor of the same values included."""
    sample.tuning["skip_unchanged"] = skip
    settings = [(20, 0.8), (20, 0.8), (20, 0.5), (20, 0.5), (9, 0.5), (9, 0.5)]
    copies = []
    batches = distinct(rows(call) for call in range(7))
    sample(batches.pop(), torch.full((BATCH,), 20), torch.full((BATCH,), 0.8))
    for (k, p), logits in zip(settings, batches, strict=True):  # the shape's first call was eager
        groups_first.events.clear()
        ids = sample(logits, torch.full((BATCH,), k), torch.full((BATCH,), p))
        assert_exact(ids, logits, k, p)
        copies.append(groups_first.events.count("copy"))
    assert copies == ([2, 0, 1, 0, 1, 0] if skip else [2] * 6)


@pytest.mark.parametrize("moved", ["k", "p", "both"])
def test_a_graph_is_not_replayed_with_k_or_p_elsewhere_once_sightings_are_forgotten(
    in_place: FakeGraphs, moved: str, sample: TritonSampler
) -> None:
    """The sightings are a bounded cache of their own: once they forget a logits address, new
    k or p addresses can count as repeated while the graph captured with the old ones is still
    cached. It must not replay (it would read them at the old addresses): a graph that copies
    them takes its place, at once (the logits' address has a graph, so it is not counted anew)."""
    first, other = _params(2)
    now = (other[0] if moved != "p" else first[0], other[1] if moved != "k" else first[1])
    logits = rows(0)
    assert _calls(logits, [first, first], in_place) == [0, 0]  # captured in place
    sample.sampler.graphs._seen.items.clear()
    assert _calls(logits, [now, now, now], in_place) == [2, 2, 2]
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (0, 0)


def test_an_in_place_graph_outlives_the_sightings_of_its_parameters(
    in_place: FakeGraphs, sample: TritonSampler
) -> None:
    """The sightings of k and p share a bounded cache with the logits'. Where it forgets
    theirs but the logits' survive, k and p are still where the graph reads them: it keeps
    serving in place (it was replaced for good by one that copies them)."""
    (pair,) = _params(1)
    logits = rows(0)
    assert _calls(logits, [pair] * 2, in_place) == [0, 0]  # eager, then captured in place
    seen = sample.sampler.graphs._seen.items
    for key in [key for key in seen if len(key) > min(len(k) for k in seen)]:
        del seen[key]  # the parameters' sightings alone
    assert _calls(logits, [pair] * 3, in_place) == [0, 0, 0]
    assert len(in_place.captures) == 2
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (pair[0].data_ptr(), pair[1].data_ptr())


def test_a_graph_copying_p_keeps_serving_once_p_could_be_read_in_place(
    in_place: FakeGraphs,
    sample: TritonSampler,
) -> None:
    """A graph captured while p could not be read in place (here float64, as a p on the host
    cannot) reads k in place and copies p. When p then comes where it could be read in place,
    the graph still serves: p is copied as before, k stays read in place, nothing is captured
    again (it was replaced by one that copies both)."""
    k = torch.zeros(BATCH, dtype=torch.int64)
    p64, p32 = torch.zeros(BATCH, dtype=torch.float64), torch.zeros(BATCH)
    logits = rows(0)
    assert _calls(logits, [(k, p64)] * 3, in_place) == [0, 1, 1]  # eager, capture, replay
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (k.data_ptr(), 0)
    assert _calls(logits, [(k, p32)] * 3, in_place) == [1, 1, 1]
    assert len(in_place.captures) == 2
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (k.data_ptr(), 0)
