"""A daemon whose stdout no one reads still stops on SIGTERM: its start-up output (the port file,
then the explain table) is written by a thread beside the event loop, and a table larger than the
pipe's buffer blocks that thread for good. Before, the stopping daemon waited for it without end
(the thread was not a daemon thread and was joined with no time limit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, wait_until

FEATURES = 1500  # an explain table of about 84 KB, over a pipe's 64 KiB


def _big_pack(directory: Path) -> Path:
    lines = ['schema = "kernelpolicy.policy/v1"']
    for i in range(FEATURES):
        name = f"feat.number_{i:04d}"
        lines += [
            f'[features."{name}"]',
            f'description = "feature {i} of a large pack, long enough to make a wide row"',
            'fallback = "plain"',
            f'[[features."{name}".candidates]]',
            'impl = "plain"',
            'entry = "builtins:len"',
        ]
    (directory / "big.toml").write_text("\n".join(lines) + "\n")
    return directory


@pytest.mark.parametrize("read", [False, True], ids=["stdout-unread", "stdout-read"])
def test_sigterm_stops_a_daemon_whose_stdout_is_full(
    read: bool, tmp_path: Path, short_dir: Path
) -> None:
    policies = _big_pack(tmp_path)
    port_file = short_dir / "kp.port"
    out = subprocess.PIPE if not read else (tmp_path / "out.txt").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--listen", "127.0.0.1:0",
         "--no-watch", "--policies", str(policies), "--port-file", str(port_file),
         "--platform", str(ROOT / "kernelpolicy/fixtures/platforms/cpu.json")],
        stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        wait_until(lambda: port_file.exists() or proc.poll() is not None, "no port file", 120)
        assert proc.poll() is None, "serve ended before serving"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not port_file.exists()  # removed on the way out, as on any stop
    finally:
        proc.kill()
        proc.wait()
