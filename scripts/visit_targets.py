"""The sampler's speed targets, checked against a GPU visit's benchmark files.

Reads the JSON that ``benchmarks/bench_samplers.py --json`` wrote in a visit
(``scripts/gpu_visit_once.sh``: ``all/samplers.json``, ``run2/samplers.json``,
``b2b/samplers.json``) and prints, for each target, the range measured, how many cases meet it
and the worst case:

* batch 1-32: triton no slower than FlashInfer in the same run;
* batch 256: every path at most 6x the floor; batch 1024: at most 4x;
* top-p alone with logits N(0, 1) (the wide nucleus): at most 10x;
* the torch top-p alone at batch >= 256: at most 20x.

The floor is the bench's: reading the logits once at the measured copy rate, so a bfloat16
call's floor is half a float32 call's. Usage::

    python scripts/visit_targets.py all/samplers.json [run2/samplers.json ...] [--dtype D]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One target: which rows it judges, and the bound on each row's ratio."""

    name: str
    rows: Callable[[Row], bool]
    bound: float
    ratio: Callable[[Row, dict[tuple[Any, ...], Row]], float | None]


def _x_floor(row: Row, _: dict[tuple[Any, ...], Row]) -> float | None:
    return row.get("x_floor")


def _against_flashinfer(row: Row, index: dict[tuple[Any, ...], Row]) -> float | None:
    other = index.get(("flashinfer", *_case(row)))
    return None if other is None else row["ms"] / other["ms"]


def _case(row: Row) -> tuple[Any, ...]:
    return (row["path"], row["dtype"], row["scale"], row["batch"], row["vocab"])


def _wide(row: Row) -> bool:
    return row["path"] == "top_p" and row["scale"] == 1.0


TARGETS = (
    Target(
        "batch 1-32: triton no slower than flashinfer (time over flashinfer's)",
        lambda r: r["impl"] == "triton" and r["batch"] <= 32,
        1.0,
        _against_flashinfer,
    ),
    Target(
        "batch 256: triton, every path <= 6x the floor",
        lambda r: r["impl"] == "triton" and r["batch"] == 256,
        6.0,
        _x_floor,
    ),
    Target(
        "batch 1024: triton, every path <= 4x the floor",
        lambda r: r["impl"] == "triton" and r["batch"] == 1024,
        4.0,
        _x_floor,
    ),
    Target(
        "triton wide nucleus (top-p alone, N(0, 1)), batch >= 256: <= 10x",
        lambda r: r["impl"] == "triton" and r["batch"] >= 256 and _wide(r),
        10.0,
        _x_floor,
    ),
    Target(
        "torch top-p alone, batch >= 256: <= 20x",
        lambda r: r["impl"] == "torch" and r["batch"] >= 256 and r["path"] == "top_p",
        20.0,
        _x_floor,
    ),
)


@dataclass(frozen=True)
class Verdict:
    """How one target fared over the rows of one run."""

    target: str
    bound: float
    cases: int
    met: int
    low: float
    high: float
    worst: str
    unjudged: int = 0  # rows of the target with nothing to judge them by (no FlashInfer row)

    def line(self) -> str:
        if not self.cases:
            why = f" ({self.unjudged} rows with nothing to compare)" if self.unjudged else ""
            return f"{self.target}: no case in this run{why}"
        over = self.high / self.bound
        state = "met" if self.met == self.cases else f"missed by up to {over:.2f}x"
        unjudged = f"; {self.unjudged} rows with nothing to compare" if self.unjudged else ""
        return (
            f"{self.target}: {self.low:.2f}-{self.high:.2f}, {self.met} of {self.cases} "
            f"within; {state} (worst: {self.worst}){unjudged}"
        )


def judge(rows: Iterable[Row], dtype: str | None = None) -> list[Verdict]:
    """Each target's verdict over ``rows`` (one run), for one dtype or all."""
    rows = [r for r in rows if dtype is None or r["dtype"] == dtype]
    index = {(r["impl"], *_case(r)): r for r in rows}
    verdicts = []
    for target in TARGETS:
        mine = [r for r in rows if target.rows(r)]
        judged = [(ratio, r) for r in mine if (ratio := target.ratio(r, index)) is not None]
        unjudged = len(mine) - len(judged)
        if not judged:
            verdicts.append(Verdict(target.name, target.bound, 0, 0, 0.0, 0.0, "-", unjudged))
            continue
        ratios = [ratio for ratio, _ in judged]
        worst_ratio, worst = max(judged, key=lambda pair: pair[0])
        where = (
            f"{worst['path']} {worst['dtype']} N(0, {worst['scale'] ** 2:g}) batch "
            f"{worst['batch']} vocab {worst['vocab']}: {worst_ratio:.2f}"
        )
        met = sum(ratio <= target.bound for ratio in ratios)
        verdicts.append(
            Verdict(
                target.name,
                target.bound,
                len(judged),
                met,
                min(ratios),
                max(ratios),
                where,
                unjudged,
            )
        )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("files", nargs="+", type=Path, help="samplers.json of a visit's runs")
    parser.add_argument("--dtype", help="judge one dtype only (default: each in turn)")
    args = parser.parse_args(argv)
    for path in args.files:
        document = json.loads(path.read_text())
        rows = document["rows"]
        dtypes = [args.dtype] if args.dtype else sorted({r["dtype"] for r in rows})
        print(f"== {path}: {document['device']}, {document['date']}")
        for dtype in dtypes:
            for verdict in judge(rows, dtype):
                print(f"{dtype}: {verdict.line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
