"""Every Triton kernel launch of the sampler compiles for an H100 (sm_90), per dtype, without a
GPU (scripts/triton_compile_check.py: the launches of one call are recorded instead of run, and
each is compiled by Triton's own compiler, ptxas included). The interpreter that runs the other
kernel tests skips compilation, which is how a kernel that compiled on no GPU once passed them.

A child process runs the check, since this process may hold the interpreter's kernels. Slow on
a cold Triton cache (the per-row kernel takes about 30 s a specialisation on 2 cores)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.compiler", reason="Triton's compiler is not installed")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "triton_compile_check.py"


EXACT = {"group_kernel", "bounds_kernel", "select_kernel", "finish_kernel", "row_kernel"}
WIDE = {
    "propose_kernel", "reject_tile_kernel", "reject_pick_kernel", "wide_tile_kernel",
    "wide_narrow_kernel", "wide_compact_kernel", "wide_resolve_kernel", "wide_draw_kernel",
}  # fmt: skip


# One child process per case, so that pytest-xdist spreads them over its workers (float32's
# two paths in one case took longer than the other two dtypes together). top_k_top_p launches
# every kernel (the wide rows' too: rows with p may lack k); the other paths differ only by the
# HAS_K / HAS_P flags, so float32 alone covers them.
@pytest.mark.parametrize(
    ("dtype", "path", "kernels"),
    [
        pytest.param("float32", "top_k", EXACT, id="float32-top_k"),
        pytest.param("float32", "top_k_top_p", EXACT | WIDE, id="float32-top_k_top_p"),
        pytest.param("bfloat16", "top_k_top_p", EXACT | WIDE, id="bfloat16-top_k_top_p"),
        pytest.param("float16", "top_k_top_p", EXACT | WIDE, id="float16-top_k_top_p"),
    ],
)
def test_every_launch_compiles_for_sm90(dtype: str, path: str, kernels: set[str]) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dtypes", dtype, "--paths", path, "--arch", "90"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    failures = [line for line in done.stdout.splitlines() if "FAILED" in line]
    assert done.returncode == 0, "\n".join(failures) or done.stderr[-3000:]
    assert " 0 failed" in done.stdout
    compiled = {line.split()[0] for line in done.stdout.splitlines() if ": ok" in line}
    assert compiled == kernels
