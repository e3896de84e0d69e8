"""CUDA graphs of the Triton sampler (kernelpolicy.kernels.sampling_triton.graphs), their pure
parts: which calls may replay a graph (the plan), the bounded cache of graphs, failures and
sightings, and which parameters a graph may read in place and which graph serves them."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import graphs
from kernelpolicy.kernels.sampling_triton.graphs import GraphCache, Mode

BASE = {
    "device_type": "cuda",
    "interpreted": False,
    "capturing": False,
    "seeded": False,
    "rows": 8,
    "nbytes": 1 << 20,
    "dense": True,
    "sightings": 1,
    "shape_sightings": graphs.POINTER_SIGHTINGS,
}


@pytest.mark.parametrize(
    ("change", "mode"),
    [
        pytest.param({}, Mode.COPY, id="small-logits-copied"),
        pytest.param({"shape_sightings": 1}, Mode.EAGER, id="small-shape-first-call"),
        pytest.param(
            {"shape_sightings": 1, "sightings": graphs.POINTER_SIGHTINGS},
            Mode.IN_PLACE,
            id="small-address-seen-again-shape-forgotten",
        ),
        pytest.param({"dense": False}, Mode.COPY, id="small-strided-copied"),
        pytest.param({"device_type": "cpu"}, Mode.EAGER, id="cpu"),
        pytest.param({"interpreted": True}, Mode.EAGER, id="interpreter"),
        pytest.param({"capturing": True}, Mode.EAGER, id="caller-is-capturing"),
        pytest.param({"seeded": True}, Mode.EAGER, id="per-row-generators"),
        pytest.param({"rows": graphs.GRAPH_MAX_ROWS}, Mode.COPY, id="rows-at-limit"),
        pytest.param({"rows": graphs.GRAPH_MAX_ROWS + 1}, Mode.EAGER, id="rows-past-limit"),
        pytest.param({"nbytes": graphs.COPY_BYTES}, Mode.COPY, id="copy-at-limit"),
        pytest.param(
            {"sightings": graphs.POINTER_SIGHTINGS}, Mode.IN_PLACE, id="small-address-seen-again"
        ),
        pytest.param(
            {"sightings": 9, "dense": False}, Mode.COPY, id="small-strided-address-seen-again"
        ),
        pytest.param({"nbytes": graphs.COPY_BYTES + 1}, Mode.EAGER, id="large-first-sight"),
        pytest.param(
            {"nbytes": graphs.COPY_BYTES + 1, "sightings": graphs.POINTER_SIGHTINGS},
            Mode.IN_PLACE,
            id="large-address-seen-again",
        ),
        pytest.param(
            {"nbytes": graphs.COPY_BYTES + 1, "sightings": 9, "dense": False},
            Mode.EAGER,
            id="large-strided",
        ),
    ],
)
def test_plan(change: dict[str, object], mode: Mode) -> None:
    assert graphs.plan(**{**BASE, **change}) is mode  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1, 3])
def test_the_cache_keeps_the_most_recently_used_graphs(limit: int) -> None:
    cache: GraphCache[str] = GraphCache(entries=limit)
    displaced = [cache.put(i, f"graph {i}") for i in range(limit)]
    assert displaced == [[]] * limit
    assert len(cache) == limit
    assert cache.get(0) == "graph 0"  # used: now the newest
    gone = 1 if limit > 1 else 0
    assert cache.put(limit, "one more") == [f"graph {gone}"]  # the least recently used goes
    assert len(cache) == limit
    assert cache.get(limit) == "one more"
    assert cache.get(gone) is None
    assert cache.put(limit, "its successor") == ["one more"]  # replaced at its key
    assert len(cache) == limit


def test_a_failed_capture_takes_the_graph_at_its_key_out_of_the_cache() -> None:
    cache: GraphCache[str] = GraphCache()
    cache.put("k", "graph")
    assert cache.fail("k", "why") == "graph"
    assert cache.get("k") is None
    assert cache.fail("other", "why") is None


def test_failures_and_sightings_are_bounded() -> None:
    cache: GraphCache[str] = GraphCache(failed=2, seen=2)
    assert [cache.sighting("a"), cache.sighting("a"), cache.sighting("b")] == [1, 2, 1]
    cache.sighting("c")  # limit + 1: "a" is forgotten
    assert cache.sighting("a") == 1
    cache.fail("x", "why x")
    cache.fail("y", "why y")
    assert cache.failure("x") == "why x"
    cache.fail("z", "why z")
    assert cache.failure("y") is None  # "x" was read last, so "y" was the oldest
    assert cache.failure("z") == "why z"
    cache.clear()
    assert cache.failure("z") is None
    assert cache.sighting("a") == 1


@pytest.mark.parametrize(
    ("k", "p", "expected"),
    [
        pytest.param(None, None, (False, False), id="absent"),
        pytest.param(torch.full((4,), 5), torch.full((4,), 0.5), (True, True), id="both"),
        pytest.param(torch.full((4,), 5, dtype=torch.int32), None, (True, False), id="k-int32"),
        pytest.param(None, torch.full((4,), 0.5, dtype=torch.float64), (False, False), id="p-f64"),
        pytest.param(None, torch.full((8,), 0.5)[::2], (False, False), id="p-strided"),
        pytest.param(None, torch.full((5,), 0.5), (False, False), id="p-other-batch"),
        pytest.param(None, torch.full((4, 1), 0.5), (False, False), id="p-2d"),
        pytest.param(torch.full((4,), 5, device="meta"), None, (False, False), id="k-other-device"),
    ],
)
def test_which_parameters_a_graph_may_read_in_place(
    k: torch.Tensor | None, p: torch.Tensor | None, expected: tuple[bool, bool]
) -> None:
    x = torch.zeros(4, 16)
    addresses = graphs.params_in_place(x, (k, None), (p, torch.float32))
    assert tuple(bool(a) for a in addresses) == expected
    for t, address in zip((k, p), addresses, strict=True):
        assert address == (t.data_ptr() if address else 0)


@pytest.mark.parametrize(
    ("captured", "now", "serves"),
    [
        pytest.param((0, 0), (0, 0), True, id="copies-both"),
        pytest.param((0, 0), (11, 22), True, id="copies-both-wherever-they-are"),
        pytest.param((11, 22), (11, 22), True, id="both-in-place-unmoved"),
        pytest.param((11, 0), (11, 22), True, id="p-readable-now-still-copied"),
        pytest.param((11, 22), (33, 22), False, id="k-moved"),
        pytest.param((11, 22), (11, 44), False, id="p-moved"),
        pytest.param((11, 22), (11, 0), False, id="p-no-longer-readable-in-place"),
    ],
)
def test_which_graph_serves_which_parameters(
    captured: tuple[int, int], now: tuple[int, int], serves: bool
) -> None:
    assert graphs.serves(captured, now) is serves
