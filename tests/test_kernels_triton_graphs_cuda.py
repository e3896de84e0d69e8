"""The Triton sampler's CUDA graphs on a real GPU (skipped here; the GPU visit runs this file:
docs/gpu.md). Every call draws from the same even grid of uniforms, so a replay must return
exactly the tokens of the eager path on the same inputs: a replay that read k, p or the logits
at a stale address, or stale values, gives other tokens. The sequences follow what a serving
loop does: k and p kept in persistent GPU buffers and rewritten every step, buffers that move,
a host k whose values repeat, and sightings forgotten while a graph is cached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip(
        "CUDA graphs need a CUDA GPU: the GPU visit runs this file (docs/gpu.md)",
        allow_module_level=True,
    )
pytest.importorskip("triton")

from kernelpolicy.kernels.sampling_triton import Draws, Sampler, Tuning, graphs

VOCAB = 128256
LARGE = 256  # 131 MB of float32 logits: read in place, two graphs (group pass first)
SMALL = 8  # 4 MB: copied into a graph's own buffer until their address repeats


def _grid(n: int, device: torch.device) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float32, device=device) + 0.5) / n


_CURRENT: list[Sampler] = []  # the test's sampler (fixed sets it)


def sampler() -> Sampler:
    return _CURRENT[-1]


def _draws(proposals: int) -> Draws:
    """Even uniforms on every path."""

    def proposal_uniforms(
        batch: int, count: int, device: torch.device, generators: object
    ) -> torch.Tensor:
        return _grid(batch * count, device).view(batch, count)

    def graph_uniforms(uq: torch.Tensor) -> None:  # the draws, then the proposals (replay.py)
        batch = uq.numel() // (1 + proposals) if uq.numel() % (1 + proposals) == 0 else uq.numel()
        uq[:batch].copy_(_grid(batch, uq.device))
        uq[batch:].copy_(_grid(uq.numel() - batch, uq.device))

    return Draws(
        uniform=lambda batch, device, generators: _grid(batch, device),
        proposals=proposal_uniforms,
        graph=graph_uniforms,
    )


@pytest.fixture
def fixed() -> Iterator[None]:
    """A sampler of the test's own (an empty graph cache), with even uniforms."""
    _CURRENT.append(Sampler(draws=_draws(Tuning().proposals)))
    yield
    torch.cuda.synchronize()
    _CURRENT.pop()


def _eager(
    logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor, k_max: int | None
) -> torch.Tensor:
    """The same call with no graph: a sampler of its own, no logits small enough to copy into
    a graph, and no address ever counted as repeated."""
    saved = graphs.POINTER_SIGHTINGS, graphs.COPY_BYTES
    graphs.POINTER_SIGHTINGS, graphs.COPY_BYTES = 1 << 30, -1
    try:
        return Sampler(draws=_draws(Tuning().proposals))(logits, k, p, k_max=k_max)
    finally:
        graphs.POINTER_SIGHTINGS, graphs.COPY_BYTES = saved


def _check(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor, step: int) -> None:
    """Write this step's values into the caller's tensors, call, and compare with eager."""
    gen = torch.Generator(device="cuda").manual_seed(step)
    logits.copy_(torch.randn(logits.shape, device="cuda", generator=gen) * 3)
    k.fill_(40 - step)
    p.copy_(torch.linspace(0.5, 0.95, p.numel()) - 0.01 * step)
    got = sampler()(logits, k, p, k_max=50)
    assert torch.equal(got, _eager(logits, k, p, 50)), f"step {step}: a replay drew other tokens"


def _graph() -> object:
    (graph,) = sampler().graphs._graphs.items.values()
    return graph


def _pair(device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(LARGE, dtype=torch.int64, device=device), torch.zeros(LARGE, device=device)


@pytest.mark.usefixtures("fixed")
def test_k_and_p_in_persistent_buffers_are_read_in_place_then_copied_once_they_move() -> None:
    logits = torch.empty(LARGE, VOCAB, device="cuda")
    first, moved = _pair(), _pair()
    for step in range(3):  # eager, capture with k and p in place, replay
        _check(logits, *first, step)
    assert _graph().params == (first[0].data_ptr(), first[1].data_ptr())  # type: ignore[attr-defined]
    for step in range(3, 5):  # moved: replaced by a graph that copies them, then replayed
        _check(logits, *moved, step)
    assert _graph().params == (0, 0)  # type: ignore[attr-defined]
    sampler().graphs._seen.items.clear()  # forgotten: the copying graph still serves
    for step in range(5, 8):
        _check(logits, *first, step)
    assert _graph().params == (0, 0)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("fixed")
def test_a_host_k_is_copied_when_its_values_change() -> None:
    logits = torch.empty(SMALL, VOCAB, device="cuda")
    p = torch.full((SMALL,), 0.9, device="cuda")
    for step in range(4):
        k = torch.full((SMALL,), 30 - 10 * (step // 2))  # on the host; new values every 2 steps
        gen = torch.Generator(device="cuda").manual_seed(step)
        logits.copy_(torch.randn(logits.shape, device="cuda", generator=gen) * 3)
        got = sampler()(logits, k, p)
        assert torch.equal(got, _eager(logits, k, p, None)), f"step {step}"
    # eager, then a graph reading the logits where they are (their address repeats), replayed
    assert len(sampler().graphs) == 1


@pytest.mark.usefixtures("fixed")
def test_small_logits_at_a_repeated_address_are_read_in_place() -> None:
    """Small logits: the first call runs eagerly, the second (same address) captures a graph
    reading the logits, k and p where they are, replayed for new values; logits elsewhere take
    the shape's copying graph, then, seen again, a graph of their own."""
    logits, other = (torch.empty(SMALL, VOCAB, device="cuda") for _ in range(2))
    k = torch.zeros(SMALL, dtype=torch.int64, device="cuda")
    p = torch.zeros(SMALL, device="cuda")
    for step in range(4):
        _check(logits, k, p, step)
    (in_place,) = sampler().graphs._graphs.items.values()
    assert in_place.x is None  # no buffer of its own: it reads the caller's logits
    assert in_place.params == (k.data_ptr(), p.data_ptr())
    _check(other, k, p, 4)
    assert len(sampler().graphs) == 2
    _check(other, k, p, 5)
    assert len(sampler().graphs) == 3


@pytest.mark.usefixtures("fixed")
def test_p_moving_onto_the_gpu_keeps_the_graph_that_copies_it() -> None:
    """k in a persistent GPU buffer, p first on the host (copied), then in a GPU buffer: the
    graph captured with p on the host keeps serving (k read in place, p copied), no capture
    per call and every draw the eager path's."""
    logits = torch.empty(LARGE, VOCAB, device="cuda")
    k, p_gpu = _pair()
    p_host = torch.zeros(LARGE)
    for step in range(3):
        _check(logits, k, p_host, step)
    captured = (k.data_ptr(), 0)
    assert _graph().params == captured  # type: ignore[attr-defined]
    for step in range(3, 6):
        _check(logits, k, p_gpu, step)
    assert _graph().params == captured  # type: ignore[attr-defined]
    sampler().graphs._seen.items.clear()  # forgotten: the same graph still serves
    for step in range(6, 8):
        _check(logits, k, p_gpu, step)
    assert _graph().params == captured  # type: ignore[attr-defined]
