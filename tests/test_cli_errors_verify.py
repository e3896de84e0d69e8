"""kernelpolicy verify's mistakes: a bad --device, --guard, --entry or --impl, and a missing
package, are one line on stderr with exit 2, never a crash or a silent pass."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernelpolicy.cli import main
from tests.cli_error_helpers import cuda_here, kernelpolicy, needs_torch, one_line
from tests.helpers import ROOT

# verify imports torch: these run in this process (torch imported once) through the same
# main() and error boundary; the first also runs as a process below.
VERIFY_ERRORS = [
    pytest.param(
        ["verify", "--device", "cuda", "--feature", "sampler.greedy", "--no-store"],
        ["--device cuda: torch", "sees no CUDA or ROCm device",
         "accepted on this machine: --device cpu"],
        marks=[needs_torch, pytest.mark.skipif(cuda_here(), reason="this machine has a GPU")],
        id="verify-device-cuda-on-cpu-torch",
    ),
    pytest.param(
        ["verify", "--device", "tpu", "--no-store"],
        ["--device 'tpu': expected cpu or cuda"], marks=needs_torch, id="verify-device-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "mypkg.kernels:greedy",
         "--guard", "bogus"],
        ["--guard 'bogus': unknown guard; known: clamp_token_ids"],
        marks=needs_torch, id="verify-guard-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "nomod:fn"],
        ["--entry nomod:fn: cannot import module 'nomod'", "No module named 'nomod'"],
        marks=needs_torch, id="verify-entry-not-importable",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "kernelpolicy.cli:nofn"],
        ["--entry kernelpolicy.cli:nofn: module 'kernelpolicy.cli' has no 'nofn'"],
        marks=needs_torch, id="verify-entry-no-function",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "tests.entry_raises:fn"],
        ["--entry tests.entry_raises:fn: importing 'tests.entry_raises' failed: RuntimeError: "
         "boom at import"],
        marks=needs_torch, id="verify-entry-import-raises",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry",
         "kernelpolicy.limits:MAX_NESTING_DEPTH"],
        ["--entry kernelpolicy.limits:MAX_NESTING_DEPTH: 'MAX_NESTING_DEPTH' is not callable"],
        marks=needs_torch, id="verify-entry-not-callable",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--entry", "nocolon"],
        ["entry 'nocolon': expected 'package.module:function'"],
        marks=needs_torch, id="verify-entry-malformed",
    ),
    pytest.param(
        ["verify", "--impl", "nope", "--no-store"],
        ["--impl 'nope': no built-in implementation has that name; known: ", "torch"],
        marks=needs_torch, id="verify-impl-unknown",
    ),
    pytest.param(
        ["verify", "--feature", "rmsnorm", "--impl", "flashinfer", "--no-store"],
        ["--impl 'flashinfer': no built-in implementation of rmsnorm has that name; known: torch"],
        marks=needs_torch, id="verify-impl-not-of-feature",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.gredy", "--no-store"],
        ["verify has no checks for feature 'sampler.gredy'; did you mean 'sampler.greedy'?; "
         "checked features: sampler.top_k_top_p, sampler.greedy"],
        marks=needs_torch, id="verify-feature-typo",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.gredy", "--entry", "kernelpolicy.cli:main"],
        ["verify has no checks for feature 'sampler.gredy'; did you mean 'sampler.greedy'?"],
        marks=needs_torch, id="verify-entry-feature-typo",
    ),
    pytest.param(
        ["verify", "--feature", "sampler.greedy", "--feature", "rmsnrm", "--no-store"],
        ["feature 'rmsnrm'; did you mean 'rmsnorm'?"], marks=needs_torch,
        id="verify-second-feature-typo",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "expected"), VERIFY_ERRORS)
def test_verify_mistakes_exit_2(
    argv: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """verify refuses what would crash (a bad --device or --guard) or pass in silence (an
    --entry that cannot be imported, an --impl that selects nothing): one line, exit 2."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    for part in expected:
        assert part in lines[0]
    assert captured.out == ""


@needs_torch
@pytest.mark.skipif(cuda_here(), reason="this machine has a GPU")
def test_verify_device_cuda_as_a_process() -> None:
    """The AssertionError traceback of `verify --device cuda` on CPU torch is one line now."""
    done = kernelpolicy("verify", "--device", "cuda", "--feature", "sampler.greedy", "--no-store")
    assert done.returncode == 2
    assert "--device cuda: torch" in one_line(done)


@needs_torch
@pytest.mark.parametrize(
    ("blocked", "missing"),
    [
        pytest.param(["scipy"], "missing here: scipy.", id="scipy"),
        pytest.param(["torch"], "missing here: torch.", id="torch"),
        pytest.param(["torch", "scipy"], "missing here: torch, scipy.", id="torch-and-scipy"),
    ],
)
def test_verify_names_every_missing_package(blocked: list[str], missing: str) -> None:
    """Without the verify extra, verify names each missing package and the extra to install."""
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from kernelpolicy.cli import main\n"
        "sys.exit(main(['verify', '--no-store']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 2
    line = one_line(done)
    assert "kernelpolicy verify needs torch, scipy, numpy; " + missing in line
    assert "pip install 'kernelpolicy[verify]'" in line
