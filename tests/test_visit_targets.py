"""scripts/visit_targets.py: the sampler's speed targets judged from a GPU visit's benchmark
rows, on made-up rows and on the committed results of the last H100 visit."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks/results/h100-2026-11-26"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "visit_targets", ROOT / "scripts/visit_targets.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["visit_targets"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


targets = _load()


def row(
    impl: str, path: str, batch: int, ms: float, x: float | None, **more: Any
) -> dict[str, Any]:
    case = {"dtype": "float32", "scale": 5.0, "vocab": 128256, **more}
    return {"impl": impl, "path": path, "batch": batch, "ms": ms, "x_floor": x, **case}


def verdict(rows: list[dict[str, Any]], name: str) -> Any:
    (found,) = [v for v in targets.judge(rows) if v.target.startswith(name)]
    return found


@pytest.mark.parametrize(
    ("rows", "name", "met", "cases", "high"),
    [
        pytest.param(
            [row("flashinfer", "top_p", 32, 0.10, None), row("triton", "top_p", 32, 0.11, None)],
            "batch 1-32", 0, 1, 1.1, id="slower-than-flashinfer-at-32",
        ),
        pytest.param(
            [row("flashinfer", "top_k", 1, 0.20, None), row("triton", "top_k", 1, 0.10, None)],
            "batch 1-32", 1, 1, 0.5, id="faster-at-1",
        ),
        pytest.param([row("triton", "top_k", 32, 0.1, None)], "batch 1-32", 0, 0, 0.0,
                     id="no-flashinfer-to-compare"),
        pytest.param([row("triton", "top_k", 256, 0.1, None)], "batch 256", 0, 0, 0.0,
                     id="no-floor"),
        pytest.param([row("triton", "top_k", 256, 0.2, 6.0)], "batch 256", 1, 1, 6.0,
                     id="at-the-bound"),
        pytest.param([row("triton", "top_k", 1024, 0.5, 4.2)], "batch 1024", 0, 1, 4.2,
                     id="over-the-bound"),
        pytest.param(
            [row("triton", "top_p", 256, 0.5, 11.0, scale=1.0),
             row("triton", "top_p", 256, 0.5, 12.0, scale=5.0)],
            "triton wide nucleus", 0, 1, 11.0, id="only-n01-top-p-is-wide",
        ),
        pytest.param(
            [row("torch", "top_p", 1024, 9.0, 53.0), row("torch", "top_k", 1024, 8.0, 44.0)],
            "torch top-p", 0, 1, 53.0, id="torch-top-p-alone",
        ),
    ],
)  # fmt: skip
def test_each_target_judges_its_rows(
    rows: list[dict[str, Any]], name: str, met: int, cases: int, high: float
) -> None:
    found = verdict(rows, name)
    assert (found.met, found.cases) == (met, cases)
    assert found.high == pytest.approx(high)


def test_rows_with_nothing_to_compare_are_counted() -> None:
    rows = [row("triton", "top_k", 32, 0.1, None), row("triton", "top_p", 32, 0.1, None)]
    line = verdict(rows, "batch 1-32").line()
    assert line.endswith("no case in this run (2 rows with nothing to compare)")


def test_a_miss_says_by_how_much_and_where() -> None:
    rows = [row("triton", "top_p", 1024, 0.6, 5.0, scale=1.0)]
    line = verdict(rows, "batch 1024").line()
    assert "0 of 1 within; missed by up to 1.25x" in line
    assert "top_p float32 N(0, 1) batch 1024 vocab 128256: 5.00" in line


@pytest.mark.parametrize(
    ("file", "name"),
    [
        pytest.param(f, n, id=f"{f}-{n.split(':')[0]}")
        for f in ("samplers.json", "samplers-second-run.json", "samplers-b2b.json")
        for n in ("batch 256", "batch 1024", "triton wide nucleus")
    ],
)
def test_the_last_h100_visit_meets_the_float32_targets(file: str, name: str) -> None:
    """benchmarks/README.md says so; these are the rows it says it from."""
    rows = json.loads((RESULTS / file).read_text())["rows"]
    found = next(v for v in targets.judge(rows, "float32") if v.target.startswith(name))
    assert found.cases > 0
    assert found.met == found.cases


RUNS = ["samplers.json", "samplers-second-run.json", "samplers-b2b.json", "samplers-third-run.json"]
REPORTS = sorted((ROOT / "benchmarks/results").glob("*/targets.txt"))


@pytest.mark.parametrize("report", REPORTS, ids=[r.parent.name for r in REPORTS])
def test_the_committed_target_report_is_current(
    report: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """targets.txt in a results folder is what the script prints for the runs there (run in
    that folder, as it was written: the script names each file as it is given)."""
    monkeypatch.chdir(report.parent)
    assert targets.main([n for n in RUNS if (report.parent / n).exists()]) == 0
    assert capsys.readouterr().out == report.read_text()


def test_both_h100_visits_of_the_day_have_a_target_report() -> None:
    assert {r.parent.name for r in REPORTS} >= {"h100-2026-11-26", "h100-2026-11-26b"}
