"""`kernelpolicy verify` counts only the checks that run here: an implementation that needs a
device this machine lacks is off the total before the first ETA, one whose load fails is taken
off when it fails, and the closing line says how many were skipped and why (the first-day
review saw `[99/519] ... ETA 2:10` and `519/519 checks done` on a CPU where 144 ran)."""

from __future__ import annotations

import io
import re

import pytest

from kernelpolicy.cli.progress import TerminalProgress
from kernelpolicy.evidence.model import Outcome
from kernelpolicy.policy import names
from kernelpolicy.verify import suite
from kernelpolicy.verify.profile import QUICK

GREEDY = suite.CHECKS["sampler.greedy"].count(QUICK)


def _no_rocm() -> bool:
    return False


@pytest.mark.parametrize(
    ("aiter_entry", "needs", "totals", "closing"),
    [
        pytest.param(
            None, {"aiter": ("a ROCm device", _no_rocm)}, {GREEDY},
            f"{GREEDY}/{GREEDY} checks done in 0:00; {GREEDY} skipped "
            "(aiter: needs a ROCm device)",
            id="needs-a-device-is-off-the-total-from-the-start",
        ),
        pytest.param(
            "kernelpolicy_no_such_module:greedy", {}, {2 * GREEDY, GREEDY},
            f"{GREEDY}/{GREEDY} checks done in 0:00; {GREEDY} skipped "
            "(aiter: cannot load kernelpolicy_no_such_module:greedy: ",
            id="a-failed-load-is-taken-off-when-it-fails",
        ),
        pytest.param(
            None, {}, {2 * GREEDY}, None, id="nothing-skipped-says-nothing-more",
        ),
    ],
)  # fmt: skip
def test_only_checks_that_run_are_counted(
    aiter_entry: str | None,
    needs: dict[str, object],
    totals: set[int],
    closing: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sampler.greedy's torch and aiter implementations; aiter's made unable to run here."""
    monkeypatch.setattr(suite, "_NEEDS", needs)
    if aiter_entry is not None:
        monkeypatch.setitem(names.BUILTIN_ENTRIES, ("sampler.greedy", "aiter"), aiter_entry)
    elif not needs:  # aiter runs here: a stand-in for it, as fast as the torch one
        torch_entry = names.BUILTIN_ENTRIES[("sampler.greedy", "torch")]
        monkeypatch.setitem(names.BUILTIN_ENTRIES, ("sampler.greedy", "aiter"), torch_entry)
        monkeypatch.setattr(suite, "PREPARE", {})
    stream = io.StringIO()
    progress = TerminalProgress(stream, width=400, clock=lambda: 0.0)
    reports = list(
        suite.iter_run(["sampler.greedy"], device="cpu", progress=progress, profile=QUICK)
    )
    progress.close()
    ran = sum(len(r.outcomes) for r in reports)
    lines = stream.getvalue().split("\r\x1b[K")[1:]
    drawn = [(int(m[1]), int(m[2])) for line in lines if (m := re.match(r"\[(\d+)/(\d+)\]", line))]
    # the totals drawn once a check has run: only what runs (a failed load: until it fails)
    assert {total for done, total in drawn if done} == totals
    assert drawn[-1] == (ran, ran)
    summary = lines[-1].rstrip("\n")
    if closing is None:
        assert summary == f"{ran}/{ran} checks done in 0:00"
    else:
        assert summary.startswith(closing)


def test_summary_groups_implementations_by_why() -> None:
    """Several implementations skipped for one reason are named once, with it."""
    progress = TerminalProgress(io.StringIO(), width=400, clock=lambda: 0.0)
    progress.begin(519)
    progress.skipped(122, "flashinfer", "needs a CUDA device")
    progress.skipped(122, "aiter", "needs a ROCm device")
    progress.skipped(122, "triton", "needs a CUDA device")
    progress.skipped(9, "aiter", "needs a ROCm device")
    for _ in range(144):
        progress.check(Outcome("x", True, "ok"))
    assert progress.summary() == (
        "144/144 checks done in 0:00; 375 skipped "
        "(flashinfer, triton: needs a CUDA device; aiter: needs a ROCm device)"
    )
