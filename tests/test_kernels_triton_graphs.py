"""CUDA graphs of the Triton sampler (kernelpolicy.kernels.sampling_triton.graphs): which calls
may replay a graph, the bounded cache, and what a replay reads. CUDA graphs cannot run here, so
the end-to-end cases replace the capture by a fake that records the launch and replays it in
Triton's interpreter: the replay reads only the graph's own buffers and the captured address,
as a real graph does, so a value baked in by mistake shows as a wrong draw."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.engine import Reason, resolve_policies
from kernelpolicy.kernels.sampling_triton import Draws, graphs, replay
from kernelpolicy.kernels.sampling_triton.draws import graph_uniforms
from kernelpolicy.kernels.sampling_triton.graphs import GraphCache, Mode
from kernelpolicy.policy import load_policy_text
from kernelpolicy.verify.reference import filtered_probs
from tests.helpers import TritonSampler, fixture

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


class FakeGraphs:
    """Stands in for CUDA graph capture: records each capture and replays the launch."""

    def __init__(self, fail: bool = False, fail_at: int | None = None) -> None:
        self.sample: TritonSampler | None = None  # the sampler whose graphs these are
        self.fail = fail
        self.fail_at = fail_at  # fail only the capture attempt with this index
        self.attempts = 0
        self.captures: list[int] = []  # the address each successful capture reads
        self.parts: list[str] = []  # what each capture held (the Graph method's name)
        self.events: list[str] = []  # replays, and what tests log beside them
        self.replays = 0

    def __call__(
        self, launch: Callable[[torch.Tensor], None], x: torch.Tensor, device: torch.device
    ) -> Callable[..., None]:
        self.attempts += 1
        if self.fail or self.fail_at == self.attempts - 1:
            raise RuntimeError("operation not permitted when stream is capturing (planted)")
        address = x.data_ptr()
        self.captures.append(address)
        part = getattr(launch, "__name__", "?")
        self.parts.append(part)
        graph = getattr(launch, "__self__", None)  # the replay.Graph captured
        params = (graph.k.data_ptr(), graph.p.data_ptr()) if graph is not None else None

        def replay(source: torch.Tensor) -> None:
            assert source.data_ptr() == address, "a graph read another address"
            if graph is not None:  # a real graph reads k and p where they were at capture
                now = (graph.k.data_ptr(), graph.p.data_ptr())
                assert now == params, "a graph read k or p at another address"
            self.replays += 1
            self.events.append(f"replay {part}")
            launch(source)

        return replay


@pytest.fixture
def sample() -> TritonSampler:
    """The test's own sampler, with small kernels (cheap in the interpreter)."""
    return TritonSampler(small=True)


@pytest.fixture
def fake(sample: TritonSampler, monkeypatch: pytest.MonkeyPatch) -> FakeGraphs:
    """Every call planned as if on CUDA, and the fake capture; even uniforms, so each draw
    checks the exact filtered distribution."""
    if torch.cuda.is_available():
        pytest.skip("the fake capture stands in for CUDA graphs on CPU only")
    real_plan = graphs.plan

    def as_on_cuda(**kwargs: object) -> Mode:
        return real_plan(**{**kwargs, "device_type": "cuda", "interpreted": False})  # type: ignore[arg-type]

    monkeypatch.setattr(graphs, "plan", as_on_cuda)

    def grid(batch: int, device: torch.device, generators: object) -> torch.Tensor:
        return (torch.arange(batch, dtype=torch.float32, device=device) + 0.5) / batch

    sample.draws = Draws(  # a graph draws its uniforms into one buffer (no proposals here)
        uniform=grid, graph=lambda uq: uq.copy_(grid(uq.numel(), uq.device, None))
    )
    sample.tuning["proposals"] = 0  # the wide rows by the exact path
    capture = FakeGraphs()
    capture.sample = sample
    sample.options["capture"] = capture
    return capture


def rows(seed: int, batch: int = 20, vocab: int = 200) -> torch.Tensor:
    row = torch.randn(1, vocab, generator=torch.Generator().manual_seed(seed)) * 2.0
    return row.expand(batch, -1).contiguous()


def distinct(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors, all alive at once: no two share an address, so none is read in place (a
    tensor made in a loop may land where the last one was freed)."""
    kept = list(tensors)
    assert len({t.data_ptr() for t in kept}) == len(kept)
    return kept


def assert_exact(ids: torch.Tensor, logits: torch.Tensor, k: int | None, p: float | None) -> None:
    expected = filtered_probs(logits[:1], k, p)[0].double() * ids.numel()
    counts = torch.bincount(ids, minlength=expected.numel()).double()
    assert float((counts - expected).abs().max()) <= 1.0 + 1e-3 * ids.numel()


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
        kk = None if k is None else torch.full((20,), k - 5 * call)
        pp = None if p is None else torch.full((20,), p * scale)
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
        ids = sample(logits, torch.full((20,), 7), None)
        assert_exact(ids, logits.contiguous(), 7, None)
    assert fake.replays == 1


def test_large_logits_are_read_in_place_once_their_address_repeats(
    fake: FakeGraphs, monkeypatch: pytest.MonkeyPatch, sample: TritonSampler
) -> None:
    """Above COPY_BYTES the first call at an address runs eagerly, the second captures, the
    third replays reading the caller's tensor where it is (new contents included)."""
    monkeypatch.setattr(graphs, "COPY_BYTES", 0)
    buffers = [rows(5), rows(6)]
    p = torch.full((20,), 0.9)
    for call in range(3):
        for i, logits in enumerate(buffers):
            logits.copy_(rows(10 * call + i))
            ids = sample(logits, None, p)
            assert_exact(ids, logits, None, 0.9)
    assert fake.captures == [b.data_ptr() for b in buffers]
    assert fake.replays == 2


def test_small_logits_are_read_in_place_once_their_address_repeats(
    fake: FakeGraphs, sample: TritonSampler
) -> None:
    """Small logits at one address: the first call runs eagerly, the second captures a graph
    reading them where they are, which then replays for new contents: no copying graph at
    all, so no copy into a graph's buffer."""
    logits, k = rows(0), torch.full((20,), 9)  # k stays where it is, read in place too
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
    buffers, p = distinct(rows(seed) for seed in range(4)), torch.full((20,), 0.8)
    order = [b for b in buffers for _ in range(2)] + buffers  # each twice, then each again
    for call, logits in enumerate(order):
        logits.copy_(rows(10 + call))
        assert_exact(sample(logits, None, p), logits, None, 0.8)
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
    logits, k = rows(0), torch.full((20,), 9)
    for call in range(5):
        logits.copy_(rows(call))
        assert_exact(sample(logits, k, None), logits, 9, None)
    assert len(failing.captures) == 1  # eager, failed in place, copying capture, 2 replays
    assert failing.replays == 2
    (why,) = sample.sampler.graphs._failed.items.values()
    assert "planted" in why


def test_a_cached_in_place_graph_serves_once_sightings_are_forgotten(
    fake: FakeGraphs, sample: TritonSampler
) -> None:
    logits, k = rows(0), torch.full((20,), 9)
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
    k1, k2 = distinct([torch.full((20,), 9), torch.full((20,), 9)])
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
        assert_exact(sample(logits, torch.full((20,), 9), None), logits, 9, None)
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
    shapes = [(0, 20), (1, 20), (2, 10), (3, 10)]  # each batch eager first, then its capture
    for logits in distinct(rows(seed, batch) for seed, batch in shapes):
        batch = logits.shape[0]
        assert_exact(kernel(logits, torch.full((batch,), 9), None), logits, 9, None)
    note = resolution.runtime_fallbacks["sampler.top_k_top_p"]
    assert note == (
        "triton degraded at run time: CUDA-graph capture failed for a float32 call shape "
        "(batch 20, vocab 200: RuntimeError: operation not permitted when stream is capturing "
        "(planted)); a float32 call shape whose capture fails launches eagerly, with the host "
        "time of each launch; still triton, correct but slower"
    )
    decision = resolution.decision("sampler.top_k_top_p")
    assert (decision.impl, decision.reason, decision.warnings) == (
        "triton",
        Reason.PREFERRED,
        (note,),
    )
    assert resolution.to_dict()["decisions"]["sampler.top_k_top_p"]["warnings"] == [note]
    assert len(sample.sampler.graphs._failed.items) == 2  # batch 20 and batch 10
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
    logits = torch.zeros(20, 200)  # every token equally likely
    # a copying graph's first run, an in-place graph's first run, then two replays of it
    p = torch.full((20,), 0.999)  # one p: a new one each call could land where the last was
    draws = [sample(logits, None, p) for _ in range(4)]
    assert fake.replays == 2
    assert not torch.equal(draws[2], draws[3])
    assert not torch.equal(draws[1], draws[2])
    assert not torch.equal(draws[0], draws[1])


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
        kk = None if k is None else torch.full((20,), k - 5 * call)
        pp = None if p is None else torch.full((20,), p * scale)
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
        ids = sample(logits, torch.full((20,), 9), None)
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
        ids = sample(logits, None, torch.full((20,), 0.8))
        assert_exact(ids, logits, None, 0.8)
    assert failing.parts == ["groups_pass"]
    assert failing.replays == 0
    (why,) = sample.sampler.graphs._failed.items.values()
    assert "planted" in why
    assert len(sample.sampler.graphs) == 0


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
    return [(torch.zeros(20, dtype=torch.int64), torch.zeros(20)) for _ in range(n)]


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
    sample(batches.pop(), torch.full((20,), 20), torch.full((20,), 0.8))
    for (k, p), logits in zip(settings, batches, strict=True):  # the shape's first call was eager
        groups_first.events.clear()
        ids = sample(logits, torch.full((20,), k), torch.full((20,), p))
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
    k = torch.zeros(20, dtype=torch.int64)
    p64, p32 = torch.zeros(20, dtype=torch.float64), torch.zeros(20)
    logits = rows(0)
    assert _calls(logits, [(k, p64)] * 3, in_place) == [0, 1, 1]  # eager, capture, replay
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (k.data_ptr(), 0)
    assert _calls(logits, [(k, p32)] * 3, in_place) == [1, 1, 1]
    assert len(in_place.captures) == 2
    (graph,) = sample.sampler.graphs._graphs.items.values()
    assert graph.params == (k.data_ptr(), 0)


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


@pytest.mark.parametrize(
    ("k", "p"),
    [
        pytest.param(torch.tensor([7]), None, id="k-one"),
        pytest.param(None, torch.tensor(0.8), id="p-0d"),
        pytest.param(torch.tensor([7]), torch.tensor([0.8]), id="both-one"),
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
        assert_exact(ids, logits, None if k is None else 7, None if p is None else 0.8)


@pytest.mark.parametrize(
    ("k", "p", "words"),
    [
        pytest.param(torch.full((3,), 7), None, "k must hold one value per row ([20])", id="k"),
        pytest.param(None, torch.full((20, 1), 0.8), "got shape (20, 1)", id="p-2d"),
    ],
)
def test_parameters_of_another_shape_are_refused(
    k: torch.Tensor | None, p: torch.Tensor | None, words: str, sample: TritonSampler
) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        sample(rows(0), k, p)
