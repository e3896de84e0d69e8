"""/readyz says not ready while the node's halts file is unpublished: its workers follow what
they last read, so they may run a kernel the daemon halted (before, a failed write showed only
in the kernelpolicy_halts_unpublished gauge and a log line, and the pod stayed Ready)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.halts_helpers import halts_daemon
from tests.http_helpers import call


@pytest.mark.parametrize(
    ("blocked", "freed_before_probe", "status", "metric"),
    [
        pytest.param(False, False, 200, "0.0", id="published"),
        pytest.param(True, False, 503, "1.0", id="name-taken-by-a-directory"),
        pytest.param(True, True, 200, "0.0", id="cause-gone-by-the-next-probe"),
    ],
)
def test_readyz_reports_an_unpublished_halts_file(
    blocked: bool, freed_before_probe: bool, status: int, metric: str, short_dir: Path
) -> None:
    """A halts file the daemon could not write (its name taken by a directory) makes /readyz
    answer 503 naming the file, why and what it means, and the gauge count it; /readyz tries
    the write once more, so once the cause is gone the next probe is ready and the gauge 0."""
    with halts_daemon(short_dir) as daemon:
        url, listener, halts_file = daemon.url, daemon.listener, daemon.halts_file
        assert call(url, "GET", "/readyz").status == 200
        if blocked:
            daemon.block()
            daemon.publish()
            assert listener.unpublished is not None
        if freed_before_probe:
            daemon.free()
        ready = call(url, "GET", "/readyz")
        assert ready.status == status
        if status == 503:
            why = ready.json()["why"]
            assert why.startswith("halts not published to the node's workers, which may run a ")
            assert f"{halts_file}: {listener.unpublished}" in why
            assert "\n" not in why
        else:
            assert ready.json()["status"] == "ready"
            assert halts_file.is_file()  # written again by the probe where it had failed
        assert daemon.unpublished() == f"kernelpolicy_halts_unpublished {metric}"
