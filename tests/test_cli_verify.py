"""`kernelpolicy verify` as a user runs it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KERNELPOLICY_CACHE_DIR", raising=False)
    return tmp_path


def test_verify_stores_evidence(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A passing run exits 0, prints JSON results and writes the evidence file."""
    assert main(["verify", "--feature", "topk_per_row", "--feature", "rmsnorm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in doc["results"]] == ["passed", "passed"]
    stored = json.loads(Path(doc["evidence"]).read_text())
    assert stored["schema"] == "kernelpolicy.evidence/v1"
    assert Path(doc["evidence"]).is_relative_to(cache)


def test_verify_out_holds_what_json_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "verify.json"
    argv = ["verify", "--feature", "topk_per_row", "--feature", "rmsnorm", "--json"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    assert printed["complete"] is True
    assert [r["impl"] for r in printed["results"]] == ["torch", "torch"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_verify_out_cannot_be_written(capsys: pytest.CaptureFixture[str]) -> None:
    """A folder nobody may create files in (/proc refuses even root): one line naming --out,
    exit 2, no traceback, before the suite runs."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc, a folder where no file can be created")
    assert main(["verify", "--feature", "topk_per_row", "--out", "/proc/kp-verify.json"]) == 2
    captured = capsys.readouterr()
    assert "--out /proc/kp-verify.json: cannot create a file in /proc" in captured.err
    assert "verifying" not in captured.err + captured.out  # refused before the suite


def test_verify_out_replaces_a_planted_link_instead_of_following_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a shared folder another user may plant --out as a link to a file of the user's: the
    link is replaced, the file it pointed to is left alone."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "verify.json"
    out.symlink_to(victim)
    assert main(["verify", "--feature", "topk_per_row", "--out", str(out)]) == 0
    assert victim.read_text() == "keep me"
    assert not out.is_symlink()
    assert json.loads(out.read_text())["complete"] is True


def test_verify_out_keeps_what_finished_when_a_run_is_cut_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped during its second implementation (a timeout, Ctrl-C) leaves the first's
    results in --out, marked incomplete, with no evidence stored."""
    from kernelpolicy.verify import suite

    real = suite.run_one
    calls: list[str] = []

    def second_is_cut(feature: str, *args: object, **kwargs: object) -> object:
        calls.append(feature)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(feature, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(suite, "run_one", second_is_cut)
    out = tmp_path / "verify.json"
    argv = ["verify", "--feature", "topk_per_row", "--feature", "rmsnorm", "--out", str(out)]
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    document = json.loads(out.read_text())
    assert (document["complete"], document["evidence"]) == (False, None)
    assert [(r["feature"], r["status"]) for r in document["results"]] == [(calls[0], "passed")]


def test_verify_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows status and checks; skipped implementations say why."""
    assert main(["verify", "--feature", "sampler.greedy", "--no-store"]) == 0
    out = capsys.readouterr().out
    assert "sampler.greedy  torch  passed   9/9" in out
    assert "needs a ROCm device" in out


@pytest.mark.parametrize(("guard", "code"), [([], 1), (["--guard", "clamp_token_ids"], 0)])
def test_verify_your_own_kernel(
    guard: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """--entry checks any callable; the planted bug fails, guarded it passes."""
    argv = ["verify", "--feature", "sampler.greedy", "--entry",
            "kernelpolicy.testing.buggy_kernels:greedy_out_of_range", *guard]  # fmt: skip
    assert main(argv) == code
    assert ("failed" in capsys.readouterr().out) is (code == 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["verify", "--entry", "x:y"],
            "--entry needs exactly one --feature",
            id="entry-without-feature",
        ),
        pytest.param(
            ["verify", "--feature", "mhc"],
            "verify has no checks for feature 'mhc'",
            id="unknown-feature",
        ),
        pytest.param(
            ["verify", "--guard", "clamp_token_ids"],
            "--guard applies to --entry only",
            id="guard-alone",
        ),
        pytest.param(
            ["verify", "--feature", "rmsnorm", "--out", "."],
            "--out .: is a directory; expected a file to write",
            id="out-is-a-directory",
        ),
        pytest.param(
            ["verify", "--feature", "rmsnorm", "--out", "/nonexistent-kp/verify.json"],
            "--out /nonexistent-kp/verify.json: folder /nonexistent-kp does not exist",
            id="out-folder-missing",
        ),
    ],
)
def test_verify_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage mistakes exit 2 with one line."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        pytest.param(0o777, "writable by others (mode 0777", id="world-writable-cache"),
        pytest.param(0o775, "writable by its group (mode 0775", id="group-writable-cache"),
    ],
)
def test_verify_refuses_an_untrusted_store_before_running(
    mode: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cache directory others can write is refused at once (exit 2, one line), before the
    suite spends minutes; the opt-out stores into it."""
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(mode)
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(cache))
    assert main(["verify", "--feature", "topk_per_row"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"refusing evidence store {cache}: {message}" in captured.err
    assert captured.err.count("\n") == 1
    monkeypatch.setenv("KERNELPOLICY_ALLOW_UNTRUSTED_FILES", "1")
    assert main(["verify", "--feature", "topk_per_row", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["evidence"].startswith(str(cache))


MINE = "/mine/flashinfer"  # a FLASHINFER_WORKSPACE_BASE of yours: verify runs in-process
IN_THE_CACHE = {"TRITON_CACHE_DIR": "K/triton", "FLASHINFER_WORKSPACE_BASE": "K/flashinfer"}
NOT_USED = {"triton": "unchanged", "record": None}


@pytest.mark.parametrize(
    ("how", "gpu", "flashinfer", "seen"),
    [
        pytest.param("trusted", False, None, {"triton": "unchanged", "record": "K"}, id="trusted"),
        pytest.param("trusted", True, MINE, {"triton": "K/triton", "record": "K"},
                     id="trusted-on-a-gpu-run"),
        pytest.param("trusted", True, None, {"child": IN_THE_CACHE}, id="child-on-a-gpu-run"),
        pytest.param("your-own", True, MINE, {"triton": "/mine/triton", "record": None},
                     id="your-own-triton"),
        pytest.param("your-own", True, None,
                     {"child": {**IN_THE_CACHE, "TRITON_CACHE_DIR": "/mine/triton"}},
                     id="your-own-triton-child"),
        pytest.param("untrusted", True, None, NOT_USED, id="untrusted-cache"),
        pytest.param("missing-cpu", False, None, NOT_USED, id="none-on-a-cpu-run"),
        pytest.param("missing-gpu", True, None, {"child": IN_THE_CACHE},
                     id="created-for-a-gpu-run"),
    ],
)  # fmt: skip
def test_verify_uses_and_fills_the_kernel_cache(
    how: str,
    gpu: bool,
    flashinfer: str | None,
    seen: dict[str, Any],
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While the suite runs, the samplers find the node's kernel cache's record (they load what
    warm built and record what they build) and, on a run that compiles (a GPU run), Triton is
    pointed at it through its own setting (as exec and warm point theirs); where FlashInfer's
    workspace is not set, a GPU run runs again in a child whose environment points FlashInfer
    and Triton at it (FlashInfer reads nothing else), and the suite does not run here. A
    TRITON_CACHE_DIR or FLASHINFER_WORKSPACE_BASE of your own is kept, an untrusted cache is
    said in one line and not used, and neither the environment nor Triton's setting is changed
    after the run (nor the environment during it: tests/test_verify_environ.py). A GPU run
    creates a missing cache (as warm does); a CPU run, which compiles nothing, leaves the cache
    directory alone."""
    import triton as triton_module

    from kernelpolicy.cli import verify_child, verify_cmd
    from kernelpolicy.kernel_cache import VARIABLES, kernel_cache_dir, prepare_kernel_cache
    from kernelpolicy.kernels import cache_lookup
    from kernelpolicy.verify import suite

    root = kernel_cache_dir(cache / "kernelpolicy")
    if not how.startswith("missing"):
        prepare_kernel_cache(cache / "kernelpolicy")
    monkeypatch.setattr(verify_cmd, "_builds_kernels", lambda device: gpu)
    for name in VARIABLES:
        monkeypatch.setenv(name, "-")  # put back to what it was (unset) after the test
        monkeypatch.delenv(name)
    if how == "your-own":
        monkeypatch.setenv("TRITON_CACHE_DIR", "/mine/triton")
    if flashinfer is not None:
        monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", flashinfer)
    planted = root / "triton" / "planted.cubin"  # verify tightens the directories, not this
    if how == "untrusted":
        planted.write_bytes(b"\0code")
        planted.chmod(0o664)
    before = (dict(os.environ), triton_module.knobs.cache.dir)
    found: dict[str, object] = {}

    def run(*args: object, **kwargs: object) -> Any:
        found["triton"] = triton_module.knobs.cache.dir
        record = cache_lookup.kernel_cache()
        found["record"] = None if record is None else str(record.root)
        yield from ()

    def child(argv: list[str], env: dict[str, str]) -> int:
        found["child"] = {name: env.get(name) for name in VARIABLES}
        return 0

    monkeypatch.setattr(suite, "iter_run", run)
    monkeypatch.setattr(verify_child, "run", child)
    assert main(["verify", "--feature", "sampler.top_k_top_p", "--no-store"]) == 0

    def placed(value: Any) -> Any:  # K: the cache's root; unchanged: Triton's own setting
        if isinstance(value, dict):
            return {k: placed(v) for k, v in value.items()}
        if value == "unchanged":
            return before[1]
        return str(root) + value[1:] if isinstance(value, str) and value[:1] == "K" else value

    assert found == placed(seen)
    err = [line for line in capsys.readouterr().err.splitlines() if "kernel cache" in line]
    if how == "untrusted":
        assert err == [
            f"kernelpolicy: warning: kernel cache not used: {planted}: writable by group or "
            "others (mode 0664)"
        ]
    else:
        assert err == []
    assert (dict(os.environ), triton_module.knobs.cache.dir) == before
    assert root.exists() is (how != "missing-cpu")
