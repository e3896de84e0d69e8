"""Entries are found without being imported, and loaded (imported) by one function."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from kernelpolicy.policy.entries import entry_problem, load_entry, load_prepared


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        pytest.param("kernelpolicy.kernels.torch_impl:greedy", None, id="installed-submodule"),
        pytest.param("json:loads", None, id="stdlib"),
        pytest.param("nomod:fn", "no module named 'nomod'", id="missing-top-level"),
        pytest.param(
            "kernelpolicy.kernels.nope:fn", "no module named 'kernelpolicy.kernels.nope'",
            id="missing-submodule",
        ),
        pytest.param("json.decoder.x:f", "'json.decoder' is a module, not a package", id="module"),
    ],
)  # fmt: skip
def test_entry_problem(entry: str, problem: str | None) -> None:
    """Found entries give None; missing ones name the first missing part."""
    found = entry_problem(entry)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_parent_package_is_not_executed(tmp_path: Path) -> None:
    """Finding pkg.sub does not run pkg/__init__.py (it might import torch)."""
    package = tmp_path / "kp_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('executed')\n")
    (package / "sub.py").write_text("def f(): pass\n")
    assert entry_problem("kp_probe_pkg.sub:f", path=[str(tmp_path)]) is None
    assert "kp_probe_pkg.nope" in (entry_problem("kp_probe_pkg.nope:f", path=[str(tmp_path)]) or "")
    assert "kp_probe_pkg" not in sys.modules


def test_load_entry_returns_the_callable_named() -> None:
    import json

    from kernelpolicy.kernels import torch_impl

    assert load_entry("json:loads") is json.loads
    assert load_entry("kernelpolicy.kernels.torch_impl:greedy") is torch_impl.greedy


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        pytest.param("nomod_kp:fn", ImportError, "nomod_kp", id="missing-module"),
        pytest.param("json:no_such_fn", AttributeError, "no_such_fn", id="missing-attribute"),
        pytest.param("json", ValueError, "'json': expected", id="no-attribute-named"),
        pytest.param("kp_broken_mod:f", RuntimeError, "broken at import", id="module-raises"),
    ],
)  # fmt: skip
def test_load_entry_raises_what_the_import_raises(
    entry: str, error: type[Exception], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Its callers (the engine's fallbacks, verify) catch every failure and say why."""
    (tmp_path / "kp_broken_mod.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(error, match=message):
        load_entry(entry)


PLANTED = """\
PREPARED = []
def kernel(x):
    return x + 1
def served(x):
    return x + 2
def fast(x):
    return x + 3
fast.nonblocking = served
def prepare():
    PREPARED.append(True)
def refuse():
    raise RuntimeError("the library cannot start here")
"""


@pytest.mark.parametrize(
    ("entry", "prepare", "serving", "served", "prepared"),
    [
        pytest.param("kp_prep:kernel", None, True, "kernel", False, id="no-preparation"),
        pytest.param("kp_prep:kernel", "kp_prep:prepare", True, "kernel", True, id="prepared"),
        pytest.param("kp_prep:fast", "kp_prep:prepare", True, "served", False,
                     id="serving-form-prepares-in-its-build"),
        pytest.param("kp_prep:fast", "kp_prep:prepare", False, "fast", True,
                     id="not-serving-runs-the-callable-prepared"),
        pytest.param("kp_prep:fast", None, True, "served", False, id="serving-form-alone"),
    ],
)  # fmt: skip
def test_load_prepared_serves_the_form_or_prepares(
    entry: str, prepare: str | None, serving: bool, served: str, prepared: bool,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The engine and verify load through one function: the callable, prepared unless its
    serving form (which builds in the background) serves it."""
    (tmp_path / "kp_prep.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kp_prep", raising=False)
    module = importlib.import_module("kp_prep")
    loaded = load_prepared(entry, prepare, serving=serving)
    assert loaded.function is getattr(module, entry.partition(":")[2])
    assert loaded.served is getattr(module, served)
    calls: list[bool] = module.PREPARED
    assert calls == ([True] if prepared else [])


@pytest.mark.parametrize(
    ("entry", "prepare", "error", "message"),
    [
        pytest.param("kp_prep:kernel", "kp_prep:refuse", RuntimeError, "cannot start here",
                     id="preparation-fails"),
        pytest.param("kp_prep:kernel", "kp_prep:nope", AttributeError, "nope",
                     id="preparation-missing"),
        pytest.param("kp_prep:nope", "kp_prep:prepare", AttributeError, "nope",
                     id="entry-missing"),
    ],
)  # fmt: skip
def test_load_prepared_raises_what_loading_raises(
    entry: str, prepare: str, error: type[Exception], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A failure is the caller's to word (the engine's fallbacks, LazyEntry, verify)."""
    (tmp_path / "kp_prep.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kp_prep", raising=False)
    with pytest.raises(error, match=message):
        load_prepared(entry, prepare)
