"""What the CUDA-graph tests of the Triton sampler share (tests/test_kernels_triton_graphs_*.py):
a fake capture that records each launch and replays it in Triton's interpreter, the sampler and
fake fixtures, and the rows they draw from. Imported by those files after they set
TRITON_INTERPRET (before the kernels are defined) and skipped without Triton."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch

from kernelpolicy.kernels.sampling_triton import Draws, graphs
from kernelpolicy.kernels.sampling_triton.graphs import Mode
from kernelpolicy.verify.reference import filtered_probs
from tests.helpers import TritonSampler


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


BATCH = 8
"""Rows of a call: copies of one row, drawn at an even grid of uniforms (``fake``), so that
:func:`assert_exact` checks the whole filtered distribution. Each row is every kernel's program
once more in the interpreter; 8 rows show a replay that read stale logits, k, p or uniforms
where the values differ enough (a p of 0.5 against one left at 1.0, not 0.8)."""


def rows(seed: int, batch: int = BATCH, vocab: int = 200) -> torch.Tensor:
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
