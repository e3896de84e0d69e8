"""An accelerated implementation is imported on a background thread when impl() hands it out
(LazyEntry.prefetch), with its library's per-process set-up (a ``prefetch`` attribute), so its
first call finds it imported; a failure there is met and reported by the first call. A routed
feature starts the import of every implementation a call can run first."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.engine.loading import EntryUnloadable, LazyEntry

GOOD = """\
import threading
IMPORTED_ON = threading.current_thread().name
PREFETCHED = []
def kernel(x):
    return x + 1
def prefetch():
    PREFETCHED.append(threading.current_thread().name)
kernel.prefetch = prefetch
"""
BROKEN = "raise RuntimeError('the library cannot start here')\n"


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("kp_lazy_good", "kp_lazy_broken", "kp_lazy_fi"):
            sys.modules.pop(name, None)


def _wait_for_imports() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("kernelpolicy-import"):
            thread.join(30)


def test_prefetch_imports_off_the_calling_thread(planted: Path) -> None:
    (planted / "kp_lazy_good.py").write_text(GOOD)
    loaded: list[object] = []
    entry = LazyEntry("kp_lazy_good:kernel", None, ("kp_lazy_good",), loaded.append)
    entry.prefetch()
    _wait_for_imports()
    module = sys.modules["kp_lazy_good"]
    assert module.IMPORTED_ON.startswith("kernelpolicy-import")
    assert len(module.PREFETCHED) == 1
    assert module.PREFETCHED[0].startswith("kernelpolicy-import")
    assert len(loaded) == 1  # told once
    assert entry(1) == 2
    assert len(loaded) == 1  # the call found it loaded


def test_a_failing_prefetch_is_met_by_the_first_call(planted: Path) -> None:
    (planted / "kp_lazy_broken.py").write_text(BROKEN)
    entry = LazyEntry("kp_lazy_broken:kernel", None, ("kp_lazy_broken",), lambda f: None)
    entry.prefetch()
    _wait_for_imports()
    with pytest.raises(EntryUnloadable, match="the library cannot start here"):
        entry(1)


FEATURE = "sampler.top_k_top_p"
ROUTED_POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.top_k_top_p"]
description = "routed by batch: calls run another implementation than the one chosen"
fallback = "torch"
[[features."sampler.top_k_top_p".candidates]]
impl = "flashinfer"
[[features."sampler.top_k_top_p".candidates]]
impl = "triton"
[[features."sampler.top_k_top_p".candidates]]
impl = "torch"
[[features."sampler.top_k_top_p".by_batch]]
min = 1
prefer = ["triton", "flashinfer"]
"""


@pytest.fixture
def routed(planted: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A resolution of ROUTED_POLICY whose flashinfer and triton are planted modules."""
    from kernelpolicy.engine import resolve_policies
    from kernelpolicy.policy import load_policy_text, names
    from tests.helpers import fixture

    for impl, module in (("flashinfer", "kp_lazy_fi"), ("triton", "kp_lazy_good")):
        (planted / f"{module}.py").write_text(GOOD)
        monkeypatch.setitem(names.BUILTIN_ENTRIES, (FEATURE, impl), f"{module}:kernel")
        monkeypatch.setitem(names.REQUIRES, impl, (module,))
    monkeypatch.delitem(names.PREPARE, "flashinfer")
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(ROUTED_POLICY))
    assert resolution.decision(FEATURE).impl == "flashinfer"
    return resolution


def _imported_in_the_background() -> None:
    _wait_for_imports()
    for module in ("kp_lazy_fi", "kp_lazy_good"):
        assert sys.modules[module].IMPORTED_ON.startswith("kernelpolicy-import"), module
        assert len(sys.modules[module].PREFETCHED) == 1, module


def test_impl_starts_the_import_of_what_each_route_runs_first(routed: Any) -> None:
    """impl() of a feature routed per call imports, in the background, every implementation a
    call can run first (here triton, for every call with a batch), not only the chosen one
    (flashinfer, for calls without): a worker's first request finds it imported."""
    from kernelpolicy.engine.dispatch import Routed

    kernel = routed.impl(FEATURE)
    assert isinstance(kernel, Routed)
    _imported_in_the_background()
    assert kernel.choice(4, None) == "triton"


def test_the_vllm_plugin_starts_them_when_it_installs(
    routed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vLLM plugin routes each sampler call through select(); it starts the same imports
    when it installs, so that vLLM's first request does not pay them."""
    from kernelpolicy import vllm_plugin

    monkeypatch.setattr(vllm_plugin, "_resolve", lambda inputs: routed)
    plugin = vllm_plugin._Plugin()
    assert "kp_lazy_good" not in sys.modules
    plugin.prefetch(FEATURE)
    _imported_in_the_background()
    plugin.prefetch("no.such.feature")  # an error decision: said by the calls, not here


def test_torch_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without torch (the daemon needs none): impl() of a torch kernel names the
    extra (first day: a bare ModuleNotFoundError)."""
    from kernelpolicy.engine import loading
    from kernelpolicy.errors import ResolutionError

    monkeypatch.setattr(loading, "installed", lambda name: not name.startswith("torch"))
    with pytest.raises(ResolutionError) as caught:
        loading.LazyEntry("kernelpolicy.kernels.torch_impl:greedy", None, ("torch",), print)
    assert str(caught.value) == (
        "cannot import torch: ModuleNotFoundError: No module named 'torch' (kernelpolicy's "
        "kernels run on torch, an optional extra: pip install 'kernelpolicy[torch]', or the "
        "torch build for your GPU first)"
    )
