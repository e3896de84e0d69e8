"""Which release of the knob tables an engine version is: a local label (``+rocm711``, ``+cpu``)
names a build of that release, and a post release is itself, not its base (the fourth audit)."""

from __future__ import annotations

import pytest

from kernelpolicy.bridge.release import MatchedRelease


@pytest.mark.parametrize(
    ("engine", "version", "known", "newer"),
    [
        pytest.param("vllm", "0.33.0+rocm711", "0.33.0", False, id="rocm-build-of-the-newest"),
        pytest.param("vllm", "0.32.0+cpu", "0.32.0", False, id="cpu-build"),
        pytest.param("sglang", "0.5.6.post2", "0.5.6.post2", False, id="post-release-is-itself"),
        pytest.param("sglang", "0.5.6.post2+rocm", "0.5.6.post2", False, id="post-with-local"),
        pytest.param("vllm", "0.33.1", "0.33.0", True, id="a-newer-release-is-still-newer"),
        pytest.param("vllm", "0.33.1+rocm711", "0.33.0", True, id="newer-with-local"),
    ],
)
def test_the_release_a_version_is(engine: str, version: str, known: str, newer: bool) -> None:
    matched = MatchedRelease(engine, version)
    assert matched.known == known
    assert ("newer than the newest release" in (matched.note or "")) is newer, matched.note
