"""`kernelpolicy verify` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

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
            "no conformance checks for feature 'mhc'",
            id="unknown-feature",
        ),
        pytest.param(
            ["verify", "--guard", "clamp_token_ids"],
            "--guard applies to --entry only",
            id="guard-alone",
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
