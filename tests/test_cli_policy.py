"""explain, check and matrix as a user runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "kernelpolicy/fixtures/platforms"


def platform(name: str) -> str:
    return str(FIXTURES / f"{name}.json")


def test_explain_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The table: feature, what runs in-process, why (naming the rejected candidates); then
    rejected candidates with hints and where each switch's value came from."""
    assert (
        main(["explain", "--platform", platform("mi300x"), "--env", "VLLM_ROCM_USE_AITER=1"]) == 0
    )
    out = capsys.readouterr().out
    squeezed = re.sub(r" {2,}", "  ", out)  # column widths follow the longest feature name
    assert (
        "sampler.top_k_top_p  torch  fallback: flashinfer, aiter, triton rejected (below)"
        in squeezed
    )
    assert "switch: VLLM_ROCM_USE_AITER=1 from --env: auto" in out
    assert (
        "allreduce_rmsnorm  aiter  first supported candidate (VLLM_ROCM_USE_AITER=1: auto)"
        in squeezed
    )
    assert "aiter rejected: needs amd-aiter >=0.1.13, found 0.1.12" in out
    assert "hint: upgrade amd-aiter to >= 0.1.13" in out
    assert "hint: pip install 'flashinfer-python'" not in out  # not for an AMD machine


def test_explain_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    """--json has fingerprint, policy digest and decisions with impl, error, reasons, candidates."""
    assert main(["explain", "--platform", platform("h100-sxm"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"fingerprint", "policy_digest", "decisions", "engines"}
    topk = doc["decisions"]["sampler.top_k_top_p"]
    assert {"impl", "error", "reasons", "candidates"} <= set(topk)
    assert topk["impl"] == "flashinfer"
    assert [c["impl"] for c in topk["candidates"]] == ["flashinfer", "aiter", "triton", "torch"]


def test_explain_exits_one_on_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A decision that is an error makes explain exit 1 and shows the hint."""
    argv = ["explain", "sparse_attn_indexer", "--platform", platform("mi300x")]
    assert main([*argv, "--model-kind", "mla-sparse"]) == 1  # gfx942: no native indexer path
    out = capsys.readouterr().out
    assert "ERROR (no_implementation)" in out
    assert "hint: set VLLM_ROCM_USE_AITER=1" in out


def test_explain_env_unset_and_snapshot_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--platform answers with the snapshot's env; --env K= unsets a variable from it."""
    snapshot = json.loads(Path(platform("h100-sxm")).read_text())
    snapshot["env"] = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(snapshot))
    main(["explain", "sampler.top_k_top_p", "--platform", str(path), "--json"])
    assert (
        json.loads(capsys.readouterr().out)["decisions"]["sampler.top_k_top_p"]["impl"] == "triton"
    )
    main(
        [
            "explain",
            "sampler.top_k_top_p",
            "--platform",
            str(path),
            "--env",
            "VLLM_USE_FLASHINFER_SAMPLER=",
            "--json",
        ]
    )
    assert (
        json.loads(capsys.readouterr().out)["decisions"]["sampler.top_k_top_p"]["impl"]
        == "flashinfer"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["explain", "sampler.nope", "--platform", platform("cpu")],
            "unknown feature 'sampler.nope'",
            id="unknown-feature",
        ),
        pytest.param(
            ["explain", "--env", "NOEQUALS", "--platform", platform("cpu")],
            "--env 'NOEQUALS': expected KEY=VALUE",
            id="bad-env",
        ),
        pytest.param(
            ["explain", "--platform", "/nonexistent.json"],
            "no such file",
            id="missing-platform",
        ),
    ],
)
def test_explain_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage mistakes exit 2 with one line naming the problem."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_check_bundled(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped pack checks clean."""
    assert main(["check"]) == 0
    found = re.match(r"ok: (\d+) features, \d+ gates? in \d+ files\n", capsys.readouterr().out)
    assert found is not None
    assert int(found.group(1)) >= 15  # the pack the engine bridge tells vLLM and SGLang about


def test_check_reports_located_mistakes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad file: every mistake with file:line [feature] key, exit 1, no traceback."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'schema = "kernelpolicy.policy/v1"\n[features.mhc]\ndescription = "d"\nfallback = "torch"\n'
        '[[features.mhc.candidates]]\nimpl = "torch"\nlibraries = { x = "=>1" }\n'
    )
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:7 [mhc] candidates.0.libraries: x: invalid version specifier '=>1'" in out
    assert main(["check", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert doc["issues"][0]["line"] == 7


CHECK_DEFAULTS = {
    # KERNELPOLICY_POLICY_PATHS value (DIR: a directory holding one bad file) -> exit code
    "unset: the bundled pack": (None, 0),
    "+DIR: the pack and the bad file": ("+{dir}", 1),
    "DIR alone: the bad file": ("{dir}", 1),
}


@pytest.mark.parametrize(("value", "code"), list(CHECK_DEFAULTS.values()), ids=list(CHECK_DEFAULTS))
def test_check_without_paths_checks_what_workers_load(
    value: str | None, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no PATH, check reads KERNELPOLICY_POLICY_PATHS as every other command does (it
    checked the bundled pack whatever the variable said)."""
    policies = tmp_path / "policies.d"
    policies.mkdir(mode=0o755)
    (policies / "10-bad.toml").write_text('schema = "kernelpolicy.policy/v9"\n')
    if value is None:
        monkeypatch.delenv("KERNELPOLICY_POLICY_PATHS", raising=False)
    else:
        monkeypatch.setenv("KERNELPOLICY_POLICY_PATHS", value.format(dir=policies))
    assert main(["check"]) == code


def test_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    """One row per platform fixture, one column per feature."""
    # mi250x cannot run the required sparse_attn_indexer: an ERROR cell, and for sparse-MLA
    # models (--model-kind mla-sparse) exit 1, as explain.
    argv = ["matrix", "--env", "VLLM_ROCM_USE_AITER=1", "--json", "--model-kind", "mla-sparse"]
    assert main(argv) == 1
    cells = json.loads(capsys.readouterr().out)
    assert cells["mi325x"]["sampler.top_k_top_p"]["impl"] == "aiter"
    assert cells["mi300x"]["sampler.top_k_top_p"]["impl"] == "torch"
    assert cells["h100-sxm"]["sampler.top_k_top_p"]["impl"] == "flashinfer"
    assert cells["cpu"]["sparse_attn_indexer"] == {
        "impl": None, "reason": "not_applicable", "error": None, "error_code": None,
        "model_kind": "mla-sparse",
    }  # fmt: skip
    error = cells["mi250x"]["sparse_attn_indexer"]
    assert error["impl"] is None
    assert error["error_code"] == "no_implementation"
    assert "sparse_attn_indexer is required here" in error["error"]


def test_explain_as_a_process_on_this_machine() -> None:
    """The real command probes this machine and explains it."""
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "explain", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["decisions"]["topk_per_row"]["impl"] == "torch"


def test_explain_warns_about_an_unimportable_entry(tmp_path: Path) -> None:
    """explain says on stderr when the chosen implementation's module cannot be found."""
    policy = tmp_path / "mine.toml"
    policy.write_text(
        'schema = "kernelpolicy.policy/v1"\n[features."x.y"]\ndescription = "d"\n'
        'fallback = "fast"\n[[features."x.y".candidates]]\nimpl = "fast"\n'
        'entry = "no_such_pkg.sub:fn"\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "explain", "--policies", str(policy)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0
    assert "x.y -> fast: entry cannot be imported here: no module named 'no_such_pkg'" in (
        out.stderr
    )


INCIDENT = """schema = "kernelpolicy.policy/v1"
[[disable]]
feature = "sampler.greedy"
impl = "aiter"
reason = "incident 7"
"""
H100 = ["--platform", platform("h100-sxm")]
ADVICE = "(both paths, or +DIR to add a directory to the bundled pack: {advice})"


@pytest.mark.parametrize(
    ("argv", "paths", "advice"),
    [
        pytest.param(["explain", *H100], ["{d}"], "--policies +{d}", id="explain-directory"),
        pytest.param(["explain", *H100], ["{d}/incident.toml"], "--policies +{d}/incident.toml",
                     id="explain-file"),
        pytest.param(["labels", *H100], ["{d}", "{d}/incident.toml"],
                     "--policies +{d} --policies +{d}/incident.toml", id="labels-two-paths"),
        pytest.param(["matrix"], ["{d}"], "--policies +{d}", id="matrix"),
        pytest.param(["env", "--engine", "vllm", *H100], ["{d}"], "--policies +{d}", id="env"),
    ],
)  # fmt: skip
def test_a_disable_alone_advises_the_plus_of_the_option_given(
    tmp_path: Path,
    argv: list[str],
    paths: list[str],
    advice: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--policies DIR with a [[disable]] alone advises --policies +DIR (the option given), where
    it advised 'kernelpolicy check +DIR FILE' (first-day review, finding 10); with the + it
    loads."""
    (tmp_path / "incident.toml").write_text(INCIDENT)
    given = [p.format(d=tmp_path) for p in paths]
    options = [word for path in given for word in ("--policies", path)]
    assert main([*argv, *options]) == 2
    err = capsys.readouterr().err
    assert ADVICE.format(advice=advice.format(d=tmp_path)) in err
    assert "kernelpolicy check" not in err
    plus = [word for path in given for word in ("--policies", f"+{path}")]
    assert main(["explain", *plus, *H100, "sampler.greedy"]) == 0


def test_check_keeps_its_own_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check takes the paths as arguments: its advice stays 'kernelpolicy check +DIR FILE'."""
    (tmp_path / "incident.toml").write_text(INCIDENT)
    assert main(["check", str(tmp_path)]) == 1
    assert ADVICE.format(advice="kernelpolicy check +DIR FILE") in capsys.readouterr().out
