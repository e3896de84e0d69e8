"""Logging a client can cause is bounded: at most LOG_LINES_PER_MINUTE lines of one kind per
minute, the rest counted and reported with the next line (issue 24, finding 8)."""

from __future__ import annotations

from typing import Any

import pytest

from kernelpolicy.server.ratelog import WINDOW_SECONDS, Throttle

EVENT = "kernelpolicy.http.closed"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param([(0.0, 1)], [None], id="under-the-limit"),
        pytest.param([(0.0, 5)], [None, None], id="at-the-limit-the-rest-held"),
        pytest.param([(0.0, 5), (WINDOW_SECONDS, 1)], [None, None, 3], id="count-goes-out-next"),
        pytest.param([(0.0, 2), (WINDOW_SECONDS - 1, 1), (WINDOW_SECONDS, 2)],
                     [None, None, 1, None], id="window-is-fixed"),
        pytest.param([(0.0, 1000)], [None, None], id="a-flood-is-two-lines"),
    ],
)  # fmt: skip
def test_throttle_table(steps: list[tuple[float, int]], expected: list[int | None]) -> None:
    """Two lines per window: (time, events at that time) -> the ``suppressed`` of each line."""
    lines: list[dict[str, Any]] = []
    clock = Clock()
    throttle = Throttle(lambda level, event, **f: lines.append(f), per_window=2, clock=clock)
    for at, count in steps:
        clock.now = at
        for _ in range(count):
            throttle("info", EVENT, reason="client_hung_up", peer="10.0.0.1")
    assert [line.get("suppressed") for line in lines] == expected


def test_kinds_are_throttled_apart() -> None:
    """Different reasons (a closed set) have their own windows; peers (chosen by clients) do not."""
    lines: list[str] = []
    throttle = Throttle(lambda level, event, **f: lines.append(f["reason"]), per_window=1,
                        clock=Clock())  # fmt: skip
    for peer in range(50):
        throttle("info", EVENT, reason="client_hung_up", peer=f"10.0.0.{peer}")
        throttle("info", EVENT, reason="header_timeout", peer=f"10.0.0.{peer}")
    assert lines == ["client_hung_up", "header_timeout"]
