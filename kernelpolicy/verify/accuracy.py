"""Accuracy against exact references: RMSNorm and fused all-reduce + RMSNorm (one process and a
2-process gloo group) in float64, and exact agreement for top-k per row."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from kernelpolicy.evidence.model import Outcome
from kernelpolicy.verify.reference import rmsnorm64, topk_per_row_reference

# Tolerances relative to the largest reference magnitude, per dtype (output rounding included).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
EPS = 1e-6


def _inputs(
    dtype: torch.dtype, rank: int = 0, tokens: int = 16, hidden: int = 2880
) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    residual = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(7)).to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden, generator=torch.Generator().manual_seed(8))).to(dtype)
    return x, residual, weight


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).abs().max() / want.abs().max().clamp(min=1e-12))


RMSNORM_CHECKS = 2 * len(TOLERANCE)  # per dtype, without and with the residual


def rmsnorm(impl: Callable[..., Any], device: str = "cpu") -> Iterator[Outcome]:
    """Per dtype of :data:`TOLERANCE`, without and with the residual: :data:`RMSNORM_CHECKS`."""
    for dtype, tol in TOLERANCE.items():
        x, residual, weight = (t.to(device) for t in _inputs(dtype))
        want = rmsnorm64(x.cpu(), weight.cpu(), EPS)
        err = _error(impl(x, weight, EPS).cpu(), want)
        yield Outcome(
            f"accuracy/rmsnorm/{dtype}", err <= tol, f"max rel error {err:.2e} (tol {tol:.0e})"
        )
        out, new_residual = impl(x, weight, EPS, residual)
        fused = x.cpu().double() + residual.cpu().double()
        err = max(
            _error(out.cpu(), rmsnorm64(fused, weight.cpu(), EPS)),
            _error(new_residual.cpu(), fused),
        )
        yield Outcome(
            f"accuracy/rmsnorm+residual/{dtype}",
            err <= tol,
            f"max rel error {err:.2e} (tol {tol:.0e})",
        )


ALLREDUCE_RMSNORM_CHECKS = len(TOLERANCE) + 1  # per dtype in one process, and 2-process gloo


def allreduce_rmsnorm(impl: Callable[..., Any], device: str = "cpu") -> Iterator[Outcome]:
    """Per dtype of :data:`TOLERANCE` in one process, and float32 in a 2-process gloo group:
    :data:`ALLREDUCE_RMSNORM_CHECKS`."""
    for dtype, tol in TOLERANCE.items():
        x, residual, weight = (t.to(device) for t in _inputs(dtype))
        out, new_residual = impl(x, residual, weight, EPS, None)
        fused = x.cpu().double() + residual.cpu().double()
        err = max(
            _error(out.cpu(), rmsnorm64(fused, weight.cpu(), EPS)),
            _error(new_residual.cpu(), fused),
        )
        yield Outcome(
            f"accuracy/allreduce_rmsnorm/1-process/{dtype}", err <= tol, f"max rel error {err:.2e}"
        )
    yield _two_ranks(impl)


def rank_main(argv: list[str]) -> None:
    """One rank of the gloo check: ``rank store result_dir module:function``."""
    import torch.distributed as dist

    from kernelpolicy.policy.entries import load_entry

    rank, store, result_dir, entry = int(argv[0]), argv[1], argv[2], argv[3]
    impl = load_entry(entry)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        x, residual, weight = _inputs(torch.float32, rank)
        out, new_residual = impl(x, residual, weight, EPS, dist.group.WORLD)
        xs = [_inputs(torch.float32, r)[0].double() for r in range(2)]
        fused = xs[0] + xs[1] + residual.double()
        err = max(_error(out, rmsnorm64(fused, weight, EPS)), _error(new_residual, fused))
        Path(result_dir, f"rank{rank}").write_text(f"{err}")
    finally:
        dist.destroy_process_group()


def _two_ranks(impl: Callable[..., Any]) -> Outcome:
    """Two CPU processes in a gloo group, each with its own x; both must match the float64
    RMSNorm of the sum. Fresh interpreters (not fork: gloo and OpenMP threads do not survive a
    fork; not multiprocessing's spawn: it would re-run the caller's main module)."""
    import subprocess
    import sys

    name = "accuracy/allreduce_rmsnorm/2-process-gloo/float32"
    entry = f"{impl.__module__}:{impl.__qualname__}"
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        code = (
            "import sys; from kernelpolicy.verify.accuracy import rank_main; "
            "rank_main(sys.argv[1:])"
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(r), store, tmp, entry],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for r in range(2)
        ]  # fmt: skip
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                return Outcome(name, False, "timed out after 120 s")
        if any(p.returncode for p in procs):
            tail = next(o for p, o in zip(procs, outputs, strict=True) if p.returncode).strip()
            return Outcome(name, False, f"a rank failed: {tail.splitlines()[-1] if tail else '?'}")
        errors = [float(Path(tmp, f"rank{r}").read_text()) for r in range(2)]
    worst = max(errors)
    return Outcome(name, worst <= TOLERANCE[torch.float32], f"max rel error {worst:.2e} on 2 ranks")


TopkCase = tuple[torch.Tensor, int, list[int], list[int], bool]
"""(logits, k, starts, ends, whether the call passes the ranges)."""


_ROWS, _COLUMNS = 6, 4096


def _distinct() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randperm(_ROWS * _COLUMNS, generator=g).reshape(_ROWS, _COLUMNS).float()


def _full_rows() -> TopkCase:
    return _distinct(), 2048, [0] * _ROWS, [_COLUMNS] * _ROWS, False


def _row_ranges() -> TopkCase:
    return _distinct(), 2048, [0, 0, 100, 4000, 5, 0], [4096, 1000, 2500, 4096, 5, 1], True


def _masked_values() -> TopkCase:
    """Rows where a real value could be taken for a masked one: ``finfo.min`` among -inf and
    NaN, ties at every rank (the lower column first), -0.0 beside 0.0, finite values outside
    the range, NaN and -inf at the top of a range."""
    lowest, inf, nan = torch.finfo(torch.float32).min, float("inf"), float("nan")
    logits = torch.full((6, 12), -inf)
    logits[0, 5] = lowest
    logits[1, :4] = torch.tensor([-inf, lowest, -inf, nan])
    logits[2] = torch.tensor([2, lowest, 2, -inf, nan, lowest, 2, 0.0, -0.0, inf, 0.0, inf])
    logits[3] = torch.tensor([9, 9, nan, -inf, lowest, nan, lowest, -inf, 9, 9, 9, 9])
    logits[4] = torch.tensor([lowest] * 6 + [nan] * 6)
    logits[5, 3:9] = torch.tensor([nan, 1.0, -inf, 1.0, nan, 1.0])
    return logits, 8, [0, 0, 0, 2, 3, 3], [12, 4, 12, 8, 10, 12], True


# The cases of topk_per_row, one check each: label -> the case, built when the check runs (so
# that counting the checks builds no tensor).
TOPK_CASES: dict[str, Callable[[], TopkCase]] = {
    "full-rows": _full_rows,
    "row-ranges": _row_ranges,
    "masked-values": _masked_values,
}
TOPK_PER_ROW_CHECKS = len(TOPK_CASES)


def topk_per_row(impl: Callable[..., Any], device: str = "cpu") -> Iterator[Outcome]:
    """Exact agreement with a plain-Python reference, with and without row ranges, and on rows
    where a finite value meets -inf, NaN and columns outside the range: one check per case of
    :data:`TOPK_CASES` (:data:`TOPK_PER_ROW_CHECKS`)."""
    for label, case in TOPK_CASES.items():
        logits, k, s, e, ranged = case()
        got = impl(
            logits.to(device), k,
            torch.tensor(s, device=device) if ranged else None,
            torch.tensor(e, device=device) if ranged else None,
        ).cpu()  # fmt: skip
        want = topk_per_row_reference(logits, k, s, e)
        ok = got.dtype == torch.int32 and got.tolist() == want
        wrong = next((r for r, row in enumerate(got.tolist()) if row != want[r]), 0)
        detail = (
            "exact"
            if ok
            else f"differs (dtype {got.dtype}); row {wrong} {got[wrong, :6].tolist()} vs "
            f"{want[wrong][:6]}"
        )
        yield Outcome(f"exact/topk_per_row/{label}", ok, detail)
