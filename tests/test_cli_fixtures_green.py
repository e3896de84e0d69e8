"""Stock fixtures are green: explain, matrix and env exit 0 on every bundled platform unless a
decision is an error for every model there; a non-zero exit is explained on stderr."""

from __future__ import annotations

import json

import pytest

from kernelpolicy.cli import main
from tests.helpers import FIXTURES

PLATFORMS = sorted(p.stem for p in FIXTURES.glob("*.json"))
ENGINES = ["vllm", "sglang"]


def _path(name: str) -> str:
    return str(FIXTURES / f"{name}.json")


@pytest.mark.parametrize("name", PLATFORMS)
def test_explain_is_green_on_every_fixture(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """explain exits 0 on each bundled fixture; an error scoped to one kind of model is a note."""
    assert main(["explain", "--platform", _path(name)]) == 0
    err = capsys.readouterr().err
    assert all(line.startswith("kernelpolicy: note: ") for line in err.splitlines()), err


@pytest.mark.parametrize(("name", "engine"), [(n, e) for n in PLATFORMS for e in ENGINES])
def test_env_is_green_on_every_fixture(name: str, engine: str) -> None:
    """env --engine exits 0 on each bundled fixture for each engine."""
    assert main(["env", "--engine", engine, "--platform", _path(name)]) == 0


def test_matrix_is_green(capsys: pytest.CaptureFixture[str]) -> None:
    """matrix over the bundled fixtures exits 0; the sparse-MLA-only errors show in the cells."""
    assert main(["matrix"]) == 0
    captured = capsys.readouterr()
    assert "ERROR (mla-sparse)" in captured.out
    assert "not counted in the exit status" in captured.err


def _said(err: str, expected: str) -> bool:
    """A line of ``err`` starting ``expected``, where ``[p]`` stands for a list of platforms
    that names ``p`` (matrix says a line once for all the platforms it holds on)."""
    head, bracket, rest = expected.partition("[")
    if not bracket:
        return any(line.startswith(expected) for line in err.splitlines())
    platform, _, tail = rest.partition("]")
    for line in err.splitlines():
        listed, sep, after = line.removeprefix(head).partition(": ")
        named = line.startswith(head) and sep and platform in listed.split(", ")
        if named and after.startswith(tail.removeprefix(": ")):
            return True
    return False


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        pytest.param(
            ["explain", "--platform", _path("mi300x"), "--model-kind", "mla-sparse"],
            "kernelpolicy: exit 1: sparse_attn_indexer is an error for mla-sparse models",
            id="explain-mla-counts-the-indexer",
        ),
        pytest.param(
            ["explain", "sampler.greedy", "--platform", _path("cpu"), "--env",
             "SGLANG_USE_AITER=maybe"],
            "kernelpolicy: exit 1: sampler.greedy is an error (bad_environment)",
            id="explain-error-for-every-model",
        ),
        pytest.param(
            ["matrix", "sampler.greedy", "--env", "SGLANG_USE_AITER=maybe"],
            "kernelpolicy: exit 1: [a100]: sampler.greedy is an error (bad_environment)",
            id="matrix-names-platform-and-feature",
        ),
        pytest.param(
            ["matrix", "-o", "json", "--model-kind", "mla-sparse"],
            "kernelpolicy: exit 1: [mi300x]: sparse_attn_indexer is an error for mla-sparse models",
            id="matrix-json-mla",
        ),
    ],
)  # fmt: skip
def test_exit_one_is_explained_on_stderr(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 names each error that caused it on stderr, one line each."""
    assert main(argv) == 1
    assert _said(capsys.readouterr().err, named)


FORCED_FLASHINFER = ["--env", "KERNELPOLICY_FORCE_ATTENTION_BACKEND=flashinfer"]


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        pytest.param(["explain", "attention.backend", *FORCED_FLASHINFER], 1,
                     "kernelpolicy: exit 1: attention.backend is an error for mha models",
                     id="explain-counts-mha-by-default"),
        pytest.param(["env", "--engine", "vllm", *FORCED_FLASHINFER], 1,
                     "kernelpolicy: error: attention.backend", id="as-env-refuses"),
        pytest.param(["explain", "attention.backend", "--model-kind", "mla", *FORCED_FLASHINFER],
                     0, "kernelpolicy: note: attention.backend is an error for mha models only",
                     id="mla-notes-it"),
        pytest.param(["matrix", "attention.backend", *FORCED_FLASHINFER], 1,
                     "kernelpolicy: exit 1: [a100]: attention.backend is an error for mha models",
                     id="matrix-counts-mha-by-default"),
    ],
)  # fmt: skip
def test_explain_counts_what_env_and_exec_refuse(
    argv: list[str], code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain and matrix count the errors env and exec stop on, for the same --model-kind
    (default mha): a node that passes explain starts its engine (explain exited 0 here while
    exec refused to start vLLM)."""
    assert main([*argv, "--platform", _path("cpu")] if argv[0] != "matrix" else argv) == code
    assert _said(capsys.readouterr().err, line)


def test_explain_json_says_which_model_kind_a_feature_is_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """explain --json gains model_kind per decision; the older keys stay."""
    assert main(["explain", "--platform", _path("mi300x"), "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)["decisions"]
    assert decisions["sparse_attn_indexer"]["model_kind"] == "mla-sparse"
    assert decisions["sampler.top_k_top_p"]["model_kind"] is None
    assert {"impl", "error", "reasons", "candidates"} <= set(decisions["sparse_attn_indexer"])


def test_features_that_fail_alike_are_said_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """One bad variable errs a dozen features: one `exit 1` line names them all (and one note
    those of each other kind of model), instead of a line each."""
    assert main(["explain", "--platform", _path("cpu"), "--env", "VLLM_ROCM_USE_AITER=x"]) == 1
    lines = capsys.readouterr().err.splitlines()
    every = [line for line in lines if line.startswith("kernelpolicy: exit 1: ")]
    notes = [line for line in lines if line.startswith("kernelpolicy: note: ")]
    assert len(every) == 2  # every model's features, then attention.backend (mha)
    assert "moe.experts, fp8.gemm" in every[0]
    assert every[0].endswith(" are errors (bad_environment)")
    assert every[1] == "kernelpolicy: exit 1: attention.backend is an error for mha models " + (
        "(bad_environment)"
    )
    assert len(notes) == 2
    assert "mhc, sparse_attn_indexer are errors for mla-sparse models only" in notes[0]
    assert "attention.mla is an error for mla models only" in notes[1]
