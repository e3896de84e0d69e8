"""The knob tables read from the engines' releases (kernelpolicy/knobs/*.json): made by today's
script, covering the releases asked for, holding what the releases' own files say, with the
releases' own parsers."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest

from kernelpolicy.knobs import refused
from tests.helpers import ROOT
from tests.knob_helpers import table


def test_tables_are_made_by_todays_script() -> None:
    """Each table records the digest of the scripts that made it: changing the extraction
    without regenerating the tables fails here (scripts/gen_engine_tables.py)."""
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts/gen_engine_tables.py")
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    digest = hashlib.sha256()
    for name in gen.SCRIPTS:
        digest.update((ROOT / "scripts" / name).read_bytes())
    for engine in ("vllm", "sglang"):
        data = json.loads((ROOT / f"kernelpolicy/knobs/{engine}.json").read_text())
        assert data["generator_sha256"] == digest.hexdigest(), f"regenerate {engine}.json"
        assert data["releases"] == sorted(gen.RELEASES[engine], key=gen.Version)


@pytest.mark.parametrize(
    ("engine", "at_least", "must_cover"),
    [
        pytest.param("vllm", 12, {"0.7.3", "0.10.1", "0.12.0", "0.16.0", "0.33.0"}, id="vllm"),
        pytest.param("sglang", 12, {"0.4.3", "0.5.6", "0.5.23"}, id="sglang"),
    ],
)
def test_tables_cover_the_releases_asked_for(
    engine: str, at_least: int, must_cover: set[str]
) -> None:
    """At least 12 releases each, every release a fixture names, and every minor release from
    vLLM 0.10 and SGLang 0.4.10."""
    releases = table(engine).releases
    assert len(releases) >= at_least
    assert must_cover <= set(releases)
    minors = {".".join(r.split(".")[:2]) for r in releases}
    wanted = (
        {f"0.{m}" for m in range(10, 34)}
        if engine == "vllm"
        else {"0.4"} | {f"0.5.{p}" for p in range(1, 24)}
    )
    if engine == "sglang":
        minors = {r.split(".post")[0] for r in releases} | {"0.4"}
        wanted -= {"0.5.0"}
    assert wanted <= minors | {"0.5.0"}


@pytest.mark.parametrize(
    ("engine", "kind", "name", "release", "expected"),
    [
        pytest.param("vllm", "env", "VLLM_ROCM_USE_AITER", "0.7.3", None, id="no-aiter-in-0.7.3"),
        pytest.param("vllm", "fact", "aiter_sampler", "0.11.2", False, id="no-aiter-sampler"),
        pytest.param("vllm", "fact", "aiter_sampler", "0.12.0", True, id="aiter-sampler-0.12.0"),
        pytest.param("vllm", "fact", "mhc", "0.20.0", "no_aiter", id="mhc-0.20-no-aiter"),
        pytest.param("vllm", "fact", "mhc", "0.25.0", "ungated", id="mhc-0.25-ungated"),
        pytest.param("vllm", "fact", "mhc", "0.33.0", "ungated", id="mhc-0.33-ungated"),
        pytest.param(
            "vllm", "fact", "sparse_indexer_native_archs", "0.33.0", ["gfx11", "gfx950"],
            id="indexer-0.33",
        ),
        pytest.param(  # forward_hip's `or on_gfx11()` (sparse_attn_indexer.py:859)
            "vllm", "fact", "sparse_indexer_native_archs", "0.28.0", ["gfx11"], id="indexer-0.28"
        ),
        pytest.param(
            "vllm", "fact", "sparse_indexer_native_archs", "0.27.1", [], id="indexer-0.27.1"
        ),
        pytest.param(
            "vllm", "fact", "sparse_indexer_native_archs", "0.16.0", [], id="indexer-0.16"
        ),
        pytest.param(
            "vllm", "fact", "flashinfer_sampler_capability", "0.12.0", "7.5-12.1", id="fi-cc-0.12"
        ),
        pytest.param("sglang", "fact", "aiter_greedy", "0.5.12", False, id="greedy-0.5.12"),
        pytest.param("sglang", "fact", "aiter_greedy", "0.5.13", True, id="greedy-0.5.13"),
        pytest.param(  # 0.18.1's platforms/rocm.py tests it in the backend priority list
            "vllm", "read", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION", "0.18.1",
            "vllm/platforms/rocm.py", id="unified-read-0.18.1",
        ),
        pytest.param(  # 0.19.1 only stores it for is_triton_unified_attn_enabled(), never called
            "vllm", "read", "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION", "0.19.1", None,
            id="unified-unread-0.19.1",
        ),
        pytest.param(  # sglang fp8_utils.py: a comment says it "still works", no code reads it
            "sglang", "read", "SGLANG_FORCE_CK_W8A8", "0.5.23", None, id="comment-only-0.5.23",
        ),
        pytest.param("vllm", "option", "--attention-backend", "0.12.0", None, id="no-flag-0.12"),
        pytest.param("vllm", "option", "--attention-backend", "0.13.0", (), id="flag-0.13"),
        pytest.param(
            "sglang", "option", "--attention-backend", "0.4.3",
            ("flashinfer", "torch_native", "triton"), id="sglang-0.4.3-backends",
        ),
    ],
)  # fmt: skip
def test_tables_hold_what_the_releases_say(
    engine: str, kind: str, name: str, release: str, expected: object
) -> None:
    """Spot checks against the releases' own files (cited in the pack's references)."""
    knobs = table(engine)
    if kind == "env":
        assert knobs.env(name, release) is expected
    elif kind == "read":
        knob = knobs.env(name, release)
        assert (knob.read_in if knob is not None else None) == expected
    elif kind == "fact":
        assert knobs.fact(name, release)[0] == expected
    else:
        assert knobs.option(name, release) == expected


def test_parsers_are_the_releases_own() -> None:
    """vLLM's bool(int()) refuses "true"; its aiter switches read "yes" as false."""
    sampler = table("vllm").env("VLLM_USE_FLASHINFER_SAMPLER", "0.33.0")
    assert sampler is not None
    assert sampler.parse is not None
    assert refused(sampler.parse["true"])
    assert sampler.parse["1"] is True
    aiter = table("vllm").env("VLLM_ROCM_USE_AITER", "0.33.0")
    assert aiter is not None
    assert aiter.parse is not None
    assert aiter.parse["x"] is False
    assert aiter.parse["true"] is True
