"""The Triton sampler's candidate bound (kernelpolicy.kernels.sampling_triton.bounds), run by
Triton's interpreter on group values built directly: the bound never cuts the exact answer,
leaves at most SLACK group values above the exact one, and is exact with no slack, for
spreads that float32 arithmetic would not split (the search runs over the values' bit keys)."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

from kernelpolicy.kernels import sampling_triton
from kernelpolicy.kernels.sampling_triton import common
from kernelpolicy.kernels.sampling_triton.bounds import bounds_kernel

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
G = 256  # groups per row: 2 * G group values
TG = 64


def _values(kind: str) -> torch.Tensor:
    """[G maxima, G second maxima] of one row."""
    gen = torch.Generator().manual_seed(len(kind))
    top = torch.randn(G, generator=gen) * 5
    second = top - torch.rand(G, generator=gen) * 3
    if kind == "ties":
        top, second = top.round(), second.round()  # many exact ties
    elif kind == "huge-spread":  # float32 arithmetic cannot split [-3e38, 40] into fine steps
        top[::2] = -3.0e38
        second[::2] = -3.0e38
    elif kind == "tiny-spread":
        top = 1.0 + torch.arange(G) * 2.0**-22
        second = top - 2.0**-23
    elif kind == "with-neg-inf":
        top[G // 2 :] = float("-inf")
        second[G // 4 :] = float("-inf")
    elif kind == "with-pos-inf":
        top[:3] = float("inf")
    return torch.cat([top, second])


def _run(values: torch.Tensor, k: int, p: float, slack: int) -> tuple[int, float, float, float]:
    """(mode, bound, z, m) of one row."""
    gmax = values.reshape(1, -1).to(DEVICE)
    gsum = torch.ones_like(gmax)
    out = [torch.zeros(1, dtype=t, device=DEVICE) for t in (torch.int32,) + (torch.float32,) * 3]
    k_t = torch.tensor([k], device=DEVICE)
    p_t = torch.tensor([p], device=DEVICE)
    bounds_kernel[(1,)](
        gmax, gsum, 2 * G, G, 10**6, k_t, p_t, *out,
        HAS_K=k > 0, HAS_P=p < 1.0, TG=TG, BLOCK=128,
        FAN=sampling_triton.DEFAULT.tuning.fan_bound, CH=64,
        PASSES=sampling_triton.DEFAULT.tuning.passes, SLACK=slack,
    )  # fmt: skip
    mode, bound, z, m = (t.item() for t in out)
    return int(mode), float(bound), float(z), float(m)


KINDS = ["normal", "ties", "huge-spread", "tiny-spread", "with-neg-inf", "with-pos-inf"]


@pytest.mark.parametrize("slack", [0, 16], ids=["exact", "slack-16"])
@pytest.mark.parametrize("k", [1, 7, 50, 200], ids=lambda k: f"k={k}")
@pytest.mark.parametrize("kind", KINDS)
def test_top_k_bound(kind: str, k: int, slack: int) -> None:
    values = _values(kind)
    mode, bound, _, m = _run(values, k, 1.0, slack)
    assert mode == int(common.TOP_K_ROW)
    assert m == float(values.max())
    kth = float(values.sort(descending=True).values[k - 1])
    assert bound <= kth  # never cuts a top-k token
    above = int((values >= bound).sum())
    if slack == 0:
        assert bound == kth
    else:
        assert above <= max(k - 1 + slack, int((values >= kth).sum()))


@pytest.mark.parametrize("slack", [0, 16], ids=["exact", "slack-16"])
@pytest.mark.parametrize("p", [0.05, 0.3, 0.9], ids=lambda p: f"p={p}")
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "with-pos-inf"])
def test_top_p_bound(kind: str, p: float, slack: int) -> None:
    values = _values(kind)
    mode, bound, z, m = _run(values, 0, p, slack)
    maxima = values[:G][values[:G] > float("-inf")]
    assert z == pytest.approx(float(torch.exp(maxima - m).sum()), rel=1e-5)  # gsum is 1
    ordered = values.sort(descending=True).values
    mass = torch.cumsum(torch.exp(ordered.double() - m), 0)
    reach = int((mass < p * z).sum())  # the first group value whose running mass reaches p z
    if reach >= len(ordered) or reach >= TG:
        assert mode == int(common.WIDE_ROW)
        return
    exact = float(ordered[reach])
    assert mode in (int(common.TOP_P_ROW), int(common.WIDE_ROW))
    assert bound <= exact * (1 + 1e-6) + 1e-6  # the nucleus lies above it (float rounding aside)
    if slack == 0 and mode == int(common.TOP_P_ROW):
        assert bound == pytest.approx(exact, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize(
    ("values", "k", "p", "mode", "bound"),
    [
        pytest.param([float("-inf")] * 4, 3, 1.0, "EMPTY_ROW", None, id="nothing-finite"),
        pytest.param([float("inf")] * 3 + [1.0], 2, 1.0, "TOP_K_ROW", float("inf"),
                     id="inf-fill-k"),
        pytest.param([1.0, 2.0] + [float("-inf")] * 2, 3, 1.0, "TOP_K_ROW", float("-inf"),
                     id="fewer-values-than-k"),
        pytest.param([float("inf"), 1.0, 0.0, 0.0], 0, 0.9, "INF_ROW", None, id="inf-top-p"),
        pytest.param([3.0, 1.0, 0.0, 0.0], 0, 1.0, "PLAIN_ROW", None, id="no-filter"),
    ],
)  # fmt: skip
def test_special_rows(
    values: list[float], k: int, p: float, mode: str, bound: float | None
) -> None:
    row = torch.tensor(values + [float("-inf")] * (2 * G - len(values)))
    got_mode, got_bound, _, _ = _run(row, k, p, 16)
    assert got_mode == int(getattr(common, mode))
    if bound is not None:
        assert got_bound == bound
