"""resolve()'s ``kernelpolicy.resolved`` event: its level says how the resolution went for the
features every model uses (info when healthy), a feature of one kind of model (the sparse
indexer of sparse-MLA models) never makes it an error, and the line is bounded."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.logs import bounded
from tests.helpers import fixture

AITER = {"VLLM_ROCM_USE_AITER": "1"}


def _event(caplog: pytest.LogCaptureFixture, *args: Any) -> tuple[str, dict[str, Any]]:
    """The one record resolve(*args) logs (JSON): its level and its event."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kernelpolicy"):
        resolve(*args)
    (record,) = [r for r in caplog.records if r.name == "kernelpolicy"]
    event = json.loads(record.getMessage())
    assert event == record.kernelpolicy  # type: ignore[attr-defined]
    return record.levelname, event


@pytest.mark.parametrize(
    ("machine", "env", "level", "errors", "kind_errors", "kind_warnings"),
    [
        pytest.param("cpu", {}, "INFO", [], [], [], id="healthy-is-info"),
        pytest.param("mi300x", {}, "INFO", [], ["sparse_attn_indexer"], [],
                     id="an-error-of-one-model-kind-is-not-an-error"),
        pytest.param("rx7900xtx", AITER, "INFO", [], [], ["aiter", "aiter"],
                     id="warnings-of-one-model-kind-are-not-a-warning"),
        pytest.param("mi300x", AITER, "WARNING", [], [], [], id="a-fallback-is-a-warning"),
        pytest.param("cpu", {"VLLM_ROCM_USE_AITER": "maybe"}, "ERROR",
                     ["allreduce_rmsnorm", "moe.experts", "sampler.top_k_top_p"],
                     ["attention.backend", "attention.mla", "mhc", "sparse_attn_indexer"], [],
                     id="an-error-every-model-meets-is-an-error"),
    ],
)  # fmt: skip
def test_the_level_counts_the_features_every_model_uses(
    caplog: pytest.LogCaptureFixture,
    machine: str,
    env: dict[str, str],
    level: str,
    errors: list[str],
    kind_errors: list[str],
    kind_warnings: list[str],
) -> None:
    """errors and warnings set the level; those of a one-kind feature are apart (``errors``:
    some of the errors of the features every model uses)."""
    found, event = _event(caplog, fixture(machine), {"KERNELPOLICY_LOG_FORMAT": "json", **env})
    assert found == level
    assert (event["errors"] is None) == (not errors)
    assert set(errors) <= set(event["errors"] or {})
    assert not set(kind_errors) & set(event["errors"] or {})
    assert sorted(event.get("model_kind_errors", {})) == kind_errors
    assert [w.split()[0] for w in event.get("model_kind_warnings", [])] == kind_warnings
    assert (event["warnings"] is not None) == (level == "WARNING")


def test_a_healthy_hopper_does_not_warn_of_blackwell_kernels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real H100's event warns of what is missing (flashinfer-python, deep_gemm), never of
    kernels for capability 10.x; its policy files are named by digest, not by path."""
    level, event = _event(caplog, fixture("h100-real"), {"KERNELPOLICY_LOG_FORMAT": "json"})
    assert level == "WARNING"
    assert [w.split()[0] for w in event["warnings"]] == ["flashinfer", "deep_gemm", "deep_gemm"]
    assert "compute capability" not in json.dumps(event)
    assert len(event["policy_digest"]) == 16
    assert event["policy_files"] == 7
    assert "policies" not in event


def test_the_line_is_bounded(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """40 features with 300-character names: 32 listed and a count, each name cut."""
    text = 'schema = "kernelpolicy.policy/v1"\n'
    for n in range(40):
        name = f"f{n:02}." + "x" * 300
        text += f'[features."{name}"]\ndescription = "d"\nfallback = "torch"\n'
        text += f'[[features."{name}".candidates]]\nimpl = "torch"\nentry = "json:loads"\n'
    (tmp_path / "p.toml").write_text(text)
    env = {"KERNELPOLICY_LOG_FORMAT": "json"}
    _, event = _event(caplog, fixture("cpu"), env, [tmp_path / "p.toml"])
    decisions = event["decisions"]
    assert len(decisions) == 33
    assert decisions["(more)"] == "(8 more)"
    assert all(len(name) <= 200 + len("...(cut, 304 chars)") for name in decisions)
    assert len(json.dumps(event)) < 10_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("short", "short", id="a-short-string"),
        pytest.param("y" * 201, "y" * 200 + "...(cut, 201 chars)", id="a-long-string"),
        pytest.param(None, None, id="none"),
        pytest.param(7, 7, id="a-number"),
        pytest.param(list(range(34)), [*range(32), "(2 more)"], id="a-long-list"),
        pytest.param(tuple(range(3)), [0, 1, 2], id="a-tuple"),
        pytest.param(
            {f"k{i}": i for i in range(33)}, {**{f"k{i}": i for i in range(32)},
                                             "(more)": "(1 more)"}, id="a-long-dict",
        ),
        pytest.param({"k" * 201: ["v" * 201]},
                     {"k" * 200 + "...(cut, 201 chars)": ["v" * 200 + "...(cut, 201 chars)"]},
                     id="nested"),
    ],
)  # fmt: skip
def test_bounded(value: object, expected: object) -> None:
    """Strings cut, lists and dicts shortened with a count of the rest, nested alike."""
    assert bounded(value) == expected
