"""impl()'s prefetch makes Triton's first specialisation of an argument (kernelpolicy.kernels.
sampling_triton.prefetch): the modules that specialisation imports (Triton's Gluon language and
its code generator; 159 ms in a first launch on the H100, benchmarks/README.md "The stall at the
load, broken down") are imported by the prefetch, not by a background build's load while calls
are served. Each case runs in a fresh interpreter, where nothing imported them before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

triton = pytest.importorskip("triton")

SCRIPT = """
import json, sys
import kernelpolicy.kernels.sampling_triton as sampling
before = {name: name in sys.modules for name in NAMES}
STEP
after = {name: name in sys.modules for name in NAMES}
print(json.dumps({"before": before, "after": after}))
"""

# What Triton's first specialisation of a tensor imports, where its install has them
WATCHED = [
    name
    for name in ("triton.compiler.code_generator", "triton.experimental.gluon.language")
    if __import__("importlib.util").util.find_spec(name.rsplit(".", 1)[0]) is not None
]

CASES = {
    "the prefetch imports them": ("sampling.prefetch()", True),
    "importing the sampler does not": ("pass", False),
}


@pytest.mark.parametrize(("step", "imported"), list(CASES.values()), ids=list(CASES))
def test_prefetch_makes_the_first_specialisation(step: str, imported: bool) -> None:
    if not hasattr(__import__("triton.runtime.jit").runtime.jit, "mangle_type"):
        pytest.skip("this Triton has no mangle_type: its first launch pays what it pays")
    code = SCRIPT.replace("NAMES", repr(WATCHED)).replace("STEP", step)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert not any(seen["before"].values()), seen  # nothing imported them before
    assert all(v is imported for v in seen["after"].values()), seen
    assert WATCHED  # the case watched something
