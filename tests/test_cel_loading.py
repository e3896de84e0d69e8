"""The CEL extension is loaded once per process, from any number of threads at once, and shares
that one copy with a host that imports ``cel`` itself, before or after kernelpolicy (issue 24,
findings 6 and 7: a second copy panics with pyo3's ``SetLoggerError``).

Each case runs in a fresh interpreter (the extension can be loaded only once per process), with
a warm compiled-pack cache: the normal state on a node, where no CEL is loaded until a call
needs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
THREADS = 16

# A rule outside the subset translated to Python: every call evaluates it through CEL.
POLICY = """\
schema = "kernelpolicy.policy/v1"

[features."demo.cel"]
description = "a per-call rule only CEL evaluates"
fallback = "b"
context = { name = "string" }

[[features."demo.cel".candidates]]
impl = "a"
entry = "json:loads"
when = 'name.startsWith("a")'

[[features."demo.cel".candidates]]
impl = "b"
entry = "json:dumps"
"""

# The child's prologue: resolve the demo pack from the warm cache; CEL is not loaded yet.
PROLOGUE = """\
import json, sys, threading
import kernelpolicy
from kernelpolicy.policy.cel import cel_module

def resolution():
    platform = kernelpolicy.load_platform(sys.argv[1])
    return kernelpolicy.resolve(platform, policies=[sys.argv[2]])

def select(res, name):
    try:
        return res.select("demo.cel", name=name)
    except BaseException as exc:  # a panic is a BaseException
        return f"{type(exc).__name__}: {exc}"[:300]
"""

WARM = PROLOGUE + "print(select(resolution(), 'abc'))\n"

CONCURRENT = (
    PROLOGUE
    + """
res = resolution()
cold = "cel.cel" not in sys.modules
barrier = threading.Barrier(int(sys.argv[3]))
answers = {}

def call(i):
    barrier.wait()
    if i % 2 and sys.argv[4] == "host-imports-too":
        try:
            import cel
            answers[i] = "host " + str(cel.evaluate("1 + 2"))
        except BaseException as exc:
            answers[i] = f"host {type(exc).__name__}: {exc}"[:300]
        return
    answers[i] = select(res, "abc" if i % 3 else "xyz")

threads = [threading.Thread(target=call, args=(i,)) for i in range(barrier.parties)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"cold": cold, "answers": [answers[i] for i in sorted(answers)]}))
"""
)

HOST_BEFORE = (
    "import cel  # the host's own import, first\n"
    + PROLOGUE
    + """
res = resolution()
print(json.dumps({
    "select": [select(res, "abc"), select(res, "xyz")],
    "host": cel.evaluate("1 + 2"),
    "one_copy": cel_module() is sys.modules["cel.cel"],
}))
"""
)

HOST_AFTER = (
    PROLOGUE
    + """
res = resolution()
first = [select(res, "abc"), select(res, "xyz")]
try:
    import cel
    host = cel.evaluate("1 + 2")
    program = cel.compile("n > 1")
    host_program = program.execute(cel.Context({"n": 2}, {}))
except BaseException as exc:
    host = host_program = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps({
    "select": first + [select(res, "abc")],
    "host": host,
    "host_program": host_program,
    "one_copy": cel_module() is sys.modules["cel.cel"],
}))
"""
)


def _run(code: str, cache: Path, policies: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELPOLICY_", "VLLM_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "XDG_CACHE_HOME": str(cache),
        "KERNELPOLICY_LOG_FORMAT": "off",
        "RUST_BACKTRACE": "0",
    }
    argv = [sys.executable, "-c", code, str(PLATFORM), str(policies), *args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A policy directory and a cache directory holding its compiled pack."""
    root = tmp_path_factory.mktemp("cel")
    policies, cache = root / "policies", root / "cache"
    policies.mkdir(mode=0o700)
    cache.mkdir(mode=0o700)
    (policies / "demo.toml").write_text(POLICY)
    assert _run(WARM, cache, policies) == "a"
    assert list(cache.glob("kernelpolicy/packs/*.json"))
    return cache, policies


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("select-only", id="16-threads-select"),
        pytest.param("host-imports-too", id="8-select-8-host-import"),
    ],
)
def test_first_cel_calls_from_many_threads(warm: tuple[Path, Path], mode: str) -> None:
    """16 threads released at once make the process's first CEL-needing select() (half of
    them importing ``cel`` as a host would, in the second case): every one gets its answer."""
    out: dict[str, Any] = json.loads(_run(CONCURRENT, *warm, str(THREADS), mode))
    assert out["cold"] is True  # the warm pack cache loaded no CEL: the threads load it
    expected = []
    for i in range(THREADS):
        if i % 2 and mode == "host-imports-too":
            expected.append("host 3")
        else:
            expected.append("a" if i % 3 else "b")
    assert out["answers"] == expected


@pytest.mark.parametrize(
    ("code", "extra"),
    [
        pytest.param(HOST_BEFORE, {}, id="host-imports-cel-before"),
        pytest.param(HOST_AFTER, {"host_program": True}, id="host-imports-cel-after"),
    ],
)
def test_host_import_order(warm: tuple[Path, Path], code: str, extra: dict[str, Any]) -> None:
    """A host importing ``cel`` before or after kernelpolicy: its ``import cel`` works, the
    CEL rules of select() work, and both use one copy of the extension."""
    out = json.loads(_run(code, *warm))
    assert all(answer in ("a", "b") for answer in out["select"]), out["select"]
    assert out["select"][:2] == ["a", "b"]
    assert out["host"] == 3
    assert out["one_copy"] is True
    for key, value in extra.items():
        assert out[key] == value


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        pytest.param(True, "{relative}:7:{mtime}", id="found-whole-path-size-time"),
        pytest.param(False, "cel.fake.so:-", id="found-then-gone"),
        pytest.param(None, "-", id="not-found"),
    ],
)
def test_extension_stamp_names_where_and_which_file(
    present: bool | None, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What kept translations depend on (engine.rules): the extension's whole path, its size
    and modification time, so another install or a rebuild is a miss; ``-`` where none is."""
    from kernelpolicy.policy import cel

    library = tmp_path / "cel.fake.so"
    if present:
        library.write_bytes(b"\x7fELF...")
    found = None if present is None else str(library)
    monkeypatch.setattr(cel, "_extension_path", lambda: found)
    mtime = library.stat().st_mtime_ns if present else 0
    relative = library.relative_to(library.anchor)
    assert cel.extension_stamp() == expected.format(relative=relative, mtime=mtime)
