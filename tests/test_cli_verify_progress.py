"""`kernelpolicy verify`'s progress display (redrawn in place on a terminal only) and its
`--quick` profile (fewer checks, labelled, never stored as evidence)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.progress import LineProgress, TerminalProgress, for_stream
from kernelpolicy.evidence.model import Outcome
from kernelpolicy.verify import suite
from kernelpolicy.verify.profile import FULL, QUICK

ROOT = Path(__file__).resolve().parent.parent
OK = Outcome("x", True, "ok")


class _Clock:
    """A clock the test moves: no timing enters an assertion."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("steps", "line"),
    [
        pytest.param([], "[0/100] sampler.greedy/torch  ETA -:--", id="before-any-check"),
        pytest.param([(10, 5.0)], "[10/100] sampler.greedy/torch  ETA 0:45", id="ten-in-5s"),
        pytest.param(
            [(10, 5.0), ("skip", 40)], "[10/60] sampler.greedy/torch  ETA 0:25",
            id="skipped-checks-leave-the-total",
        ),
        pytest.param([(1, 100.0)], "[1/100] sampler.greedy/torch  ETA 2:45:00", id="hours"),
        pytest.param([(100, 7.0)], "[100/100] sampler.greedy/torch  ETA 0:00", id="all-done"),
    ],
)  # fmt: skip
def test_terminal_line_shows_done_total_and_eta(steps: list[Any], line: str) -> None:
    """The line redrawn in place: checks done / total, the implementation, the ETA."""
    stream, clock = io.StringIO(), _Clock()
    progress = TerminalProgress(stream, width=200, clock=clock)
    progress.begin(100)
    progress.target("sampler.greedy", "torch")
    for count, value in steps:
        if count == "skip":
            progress.skipped(value, "aiter", "needs a ROCm device")
            continue
        for _ in range(count):
            progress.check(OK)
        clock.now += value
    progress._draw()  # the line as it stands now, with the clock moved
    assert stream.getvalue().rsplit("\r\x1b[K", 1)[-1] == line


def test_terminal_line_fits_the_terminal_and_closes_with_a_newline() -> None:
    """A line wider than the terminal is cut (a wrapped line cannot be redrawn); close() ends
    the line with what was done, also when the run stopped early."""
    stream, clock = io.StringIO(), _Clock()
    progress = TerminalProgress(stream, width=20, clock=clock)
    progress.begin(3)
    progress.target("sampler.top_k_top_p", "flashinfer")
    assert len(stream.getvalue().rsplit("\r\x1b[K", 1)[-1]) == 19
    progress.check(OK)
    clock.now = 61.0
    progress.close()
    assert stream.getvalue().endswith("\r\x1b[K1/3 checks done in 1:01\n")


@pytest.mark.parametrize(
    ("seconds_per_check", "said"),
    [
        pytest.param(0.1, ["verifying sampler.greedy/torch ..."], id="a-quick-run-as-before"),
        pytest.param(
            4.0,
            ["verifying sampler.greedy/torch ...",
             "  [8/20] sampler.greedy/torch  ETA 0:48",
             "  [16/20] sampler.greedy/torch  ETA 0:16",
             "20/20 checks done in 1:20"],
            id="a-slow-run-says-it-moves",
        ),
    ],
)  # fmt: skip
def test_without_a_terminal_a_long_run_shows_it_moves(
    seconds_per_check: float, said: list[str]
) -> None:
    """In a log: the checks done and the ETA at most every 30 s while an implementation runs,
    and what was done at the end if anything was said between; nothing more for a quick run."""
    stream, clock = io.StringIO(), _Clock()
    progress = LineProgress(stream, clock=clock)
    progress.begin(20)
    progress.target("sampler.greedy", "torch")
    for _ in range(20):
        clock.now += seconds_per_check
        progress.check(OK)
    progress.close()
    assert stream.getvalue().splitlines() == said


@pytest.mark.parametrize(
    ("tty", "kind"),
    [
        pytest.param(True, TerminalProgress, id="terminal-redraws"),
        pytest.param(False, LineProgress, id="pipe-or-file-prints-lines"),
    ],
)
def test_display_is_chosen_by_the_stream(tty: bool, kind: type) -> None:
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    assert isinstance(for_stream(Stream()), kind)


def test_without_a_terminal_stderr_is_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logs and CI see the same "verifying X ..." lines as before the display, nothing else."""
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path))
    assert main(["verify", "--feature", "sampler.greedy", "--no-store"]) == 0
    assert capsys.readouterr().err == (
        "verifying sampler.greedy/torch ...\nverifying sampler.greedy/aiter ...\n"
    )


def _run_on_a_terminal(argv: list[str], cache: Path) -> tuple[str, str, int]:
    """``python -m kernelpolicy ARGV`` in a child whose stderr is a pseudo-terminal."""
    master, slave = pty.openpty()
    env = {**os.environ, "KERNELPOLICY_CACHE_DIR": str(cache), "COLUMNS": "100"}
    child = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", *argv], cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    try:
        err = _read_until_closed(master, seconds=600)
        out = child.communicate(timeout=600)[0]
    finally:
        os.close(master)
        if child.poll() is None:  # the read or the wait gave up: leave no child behind
            child.kill()
            child.wait(timeout=30)
    return out.decode(), err.decode(), child.returncode


def _read_until_closed(master: int, seconds: float) -> bytes:
    """All the child writes on the terminal until it closes it; fails if it has not within
    ``seconds`` (a bound on a hang, not a speed check)."""
    chunks = []
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([master], [], [], max(left, 0))
            assert ready, f"the child kept its terminal open past {seconds:g} s"
            if not (chunk := os.read(master, 4096)):
                break
            chunks.append(chunk)
    return b"".join(chunks)


def test_on_a_terminal_progress_is_redrawn_and_ends_cleanly(tmp_path: Path) -> None:
    """On a pty: done/total and an ETA, redrawn in place, one closing line; stdout (the table)
    has no control characters."""
    argv = ["verify", "--quick", "--feature", "sampler.greedy", "--feature", "topk_per_row"]
    out, err, code = _run_on_a_terminal(argv, tmp_path)
    assert code == 0, err
    selected = suite.targets(["sampler.greedy", "topk_per_row"])
    total = sum(
        suite.CHECKS[feature].count(QUICK)
        for feature, impl, _ in selected
        if suite.unavailable(impl) is None  # what cannot run here is not counted
    )
    assert re.search(rf"\r\x1b\[K\[\d+/{total}\] sampler\.greedy/torch  ETA ", err)
    assert f"\r\x1b[K[{total}/{total}] topk_per_row/torch  ETA 0:00" in err
    assert re.search(rf"\r\x1b\[K{total}/{total} checks done in \d+:\d\d[^\r\n]*\r?\n$", err)
    assert "verifying" not in err
    assert "\x1b" not in out
    assert "sampler.greedy  torch" in out


# The tests of the quick run share it (a verify --quick of every feature, about 10 s of CPU): one
# pytest-xdist worker takes them all (--dist loadgroup), where each worker ran it before.
ON_THE_QUICK_RUN = pytest.mark.xdist_group("verify-quick-run")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``verify --quick --json`` of every feature (one sampler implementation: the torch
    one), with a temporary cache directory, run once for the tests below."""
    cache = tmp_path_factory.mktemp("cache")
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout):
        patch.setenv("KERNELPOLICY_CACHE_DIR", str(cache))
        patch.setattr(sys, "stderr", io.StringIO())
        code = main(["verify", "--quick", "--json", "--impl", "torch"])
    return {"code": code, "doc": json.loads(stdout.getvalue()), "cache": cache}


@ON_THE_QUICK_RUN
def test_quick_passes_and_says_so_in_its_json(quick_run: dict[str, Any]) -> None:
    assert quick_run["code"] == 0
    assert quick_run["doc"]["profile"] == "quick"
    assert quick_run["doc"]["evidence"] is None


@ON_THE_QUICK_RUN
def test_quick_stores_nothing(quick_run: dict[str, Any]) -> None:
    """No evidence directory, nor anything else, under the cache directory, but the settings
    memo (kernelpolicy.settings.memo) that any process reading KERNELPOLICY_* variables
    keeps there."""
    cache = quick_run["cache"]
    stored = [p for p in cache.rglob("*") if p.relative_to(cache).parts[0] != "settings"]
    assert stored == []


@ON_THE_QUICK_RUN
@pytest.mark.parametrize("feature", list(suite.CHECKS))
def test_quick_runs_fewer_checks_than_the_full_run(feature: str, quick_run: dict[str, Any]) -> None:
    """Each feature ran as many checks as the display counted, no more than the full run's;
    the samplers ran fewer."""
    (result,) = [r for r in quick_run["doc"]["results"] if r["feature"] == feature]
    assert len(result["checks"]) == suite.CHECKS[feature].count(QUICK)
    if feature.startswith("sampler."):
        assert suite.CHECKS[feature].count(QUICK) < suite.CHECKS[feature].count(FULL)
    else:
        assert suite.CHECKS[feature].count(QUICK) == suite.CHECKS[feature].count(FULL)


def test_full_counts_are_the_documented_ones() -> None:
    """The full run's totals, as docs/verify.md's transcript shows them (122/122, 9/9, ...)."""
    counts = {feature: suite.CHECKS[feature].count(FULL) for feature in suite.CHECKS}
    assert counts == {
        "sampler.top_k_top_p": 122,
        "sampler.greedy": 9,
        "rmsnorm": 6,
        "allreduce_rmsnorm": 4,
        "topk_per_row": 3,
    }


@pytest.mark.parametrize(
    ("argv", "shown", "absent"),
    [
        pytest.param(
            ["--quick"], ["profile: quick", "not stored: a quick run is never evidence"],
            ["evidence stored"], id="quick-is-labelled",
        ),
        pytest.param(
            ["--quick", "--no-store"], ["profile: quick"], ["evidence stored"],
            id="quick-with-no-store",
        ),
        pytest.param([], ["evidence stored"], ["profile: quick", "not stored"], id="full"),
    ],
)  # fmt: skip
def test_table_says_which_profile_ran(
    argv: list[str],
    shown: list[str],
    absent: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path))
    assert main(["verify", "--feature", "sampler.greedy", *argv]) == 0
    out = capsys.readouterr().out
    assert [text for text in shown if text not in out] == []
    assert [text for text in absent if text in out] == []
    assert (tmp_path / "evidence").exists() is (argv == [])


def test_quick_out_file_says_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--out holds the same document as --json: a quick run's file says so too."""
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "verify.json"
    assert main(["verify", "--quick", "--feature", "topk_per_row", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert (document["profile"], document["evidence"], document["complete"]) == (
        "quick", None, True,
    )  # fmt: skip
