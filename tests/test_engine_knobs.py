"""The engine bridge against the knob tables read from the engines' releases: the tables
themselves, the eight findings of the bridge review (each a regression case), and everything the
bundled pack tells every fixture at every known release checked against that release's knobs."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from kernelpolicy.bridge import MODEL_KINDS, EngineSettings, Status, engine_settings
from kernelpolicy.check.bridge_proof import prove_bridge_rules
from kernelpolicy.knobs import KnobTable, knob_table, refused
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.policy.schema.bridge import flag_options
from tests.helpers import bundled, resolve_on

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p.stem for p in (fixture_dir() / "platforms").glob("*.json"))


def table(engine: str) -> KnobTable:
    found = knob_table(engine)
    assert found is not None
    return found


def told(
    fixture: str, engine: str, version: str | None, model_kind: str = "mha", **env: str
) -> EngineSettings:
    return engine_settings(
        resolve_on(fixture, **env), engine, env, engine_version=version, model_kind=model_kind
    )


# -- the tables -------------------------------------------------------------------------------


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


# -- the eight findings -----------------------------------------------------------------------


def test_finding_1_no_engine_installed_means_the_newest_release() -> None:
    """l4 (no vLLM): no VLLM_ATTENTION_BACKEND / VLLM_FLASH_ATTN_VERSION, which no release from
    0.15 defines, and the warning names the release matched; mi355x with aiter on: no false
    "predates" warning, the aiter sampler is told."""
    l4 = told("l4", "vllm", None)
    assert l4.release == table("vllm").newest
    assert not {"VLLM_ATTENTION_BACKEND", "VLLM_FLASH_ATTN_VERSION"} & set(l4.env)
    # FLASH_ATTN is vLLM's own first backend on SM89, so no --attention-backend pins it (a pin
    # stops the models FA2 refuses: the third audit)
    assert l4.decisions["attention.backend"].status is Status.DEFAULT
    assert "--attention-backend" not in l4.flags
    assert f"matched as vllm {table('vllm').newest}" in l4.warnings[0]
    mi355x = told("mi355x", "vllm", None, VLLM_ROCM_USE_AITER="1")
    sampler = mi355x.decisions["sampler.top_k_top_p"]
    assert (sampler.impl, sampler.status) == ("aiter", Status.TOLD)
    assert not any("predates" in w or "no aiter sampler" in w for w in mi355x.warnings)


@pytest.mark.parametrize(
    ("version", "status"),
    [
        pytest.param("0.11.2", Status.INEXPRESSIBLE, id="0.11.2-has-none"),
        pytest.param("0.12.0", Status.TOLD, id="0.12.0-runs-it"),
    ],
)
def test_finding_2_the_aiter_sampler_starts_at_0_12(version: str, status: Status) -> None:
    """vLLM 0.11.2 never installs forward_hip: it is not told 'aiter'."""
    settings = told("mi325x", "vllm", version, VLLM_ROCM_USE_AITER="1")
    assert settings.decisions["sampler.top_k_top_p"].status is status


def test_finding_3_the_capability_difference_is_stated_with_evidence() -> None:
    """kernelpolicy keeps 8.0 where vLLM 0.12-0.23 accept 7.5: its rule says why (vLLM 0.24's
    own raise to 8.0 for flashinfer-ai/flashinfer#3620), and the tables record both."""
    flashinfer = bundled().features["sampler.top_k_top_p"].candidate("flashinfer")
    assert flashinfer is not None
    assert flashinfer.spec.capability == ">=8.0,<=12.1"
    reference = flashinfer.engines["vllm"][0].spec.reference or ""
    assert "flashinfer-ai/flashinfer#3620" in reference
    assert table("vllm").fact("flashinfer_sampler_capability", "0.24.0")[0] == "8.0-12.1"


@pytest.mark.parametrize(
    ("version", "status"),
    [
        pytest.param("0.20.0", Status.DEFAULT, id="0.20-no-aiter-path"),
        pytest.param("0.25.0", Status.INEXPRESSIBLE, id="0.25-ungated"),
        pytest.param("0.33.0", Status.INEXPRESSIBLE, id="0.33-ungated"),
    ],
)
def test_finding_4_mhc_torch_cannot_be_told_where_vllm_runs_aiter_ungated(
    version: str, status: Status
) -> None:
    """mi355x (aiter installed): the policy keeps MHC on torch; from 0.25 vLLM runs aiter's
    MHC wherever aiter is installed, so that choice is reported as inexpressible."""
    settings = told("mi355x", "vllm", version, "mla-sparse")
    mhc = settings.decisions["mhc"]
    assert mhc.impl == "torch"
    assert mhc.status is status
    if status is Status.INEXPRESSIBLE:
        assert "no variable" in (mhc.inexpressible or "")


@pytest.mark.parametrize(
    ("version", "ok", "status"),
    [
        pytest.param("0.33.0", True, Status.DEFAULT, id="0.33-native-gfx950"),
        pytest.param("0.16.0", True, Status.INEXPRESSIBLE, id="0.16-needs-aiter"),
    ],
)
def test_finding_5_vllm_runs_its_own_gfx950_indexer(version: str, ok: bool, status: Status) -> None:
    """mi355x, sparse MLA, no VLLM_ROCM_USE_AITER: 0.33 takes its native gfx950 path (no
    error); 0.16 cannot, and says so."""
    settings = told("mi355x", "vllm", version, "mla-sparse")
    assert settings.ok is ok
    indexer = settings.decisions["sparse_attn_indexer"]
    assert (indexer.impl, indexer.status) == ("vllm_gfx950", status)


@pytest.mark.parametrize(
    ("version", "status", "variable"),
    [
        pytest.param("0.5.6", Status.INEXPRESSIBLE, None, id="0.5.6-has-none"),
        pytest.param("0.5.13", Status.TOLD, "SGLANG_USE_AITER", id="0.5.13-runs-it"),
    ],
)
def test_finding_6_sglang_aiter_greedy_starts_at_0_5_13(
    version: str, status: Status, variable: str | None
) -> None:
    """The aiter greedy kernel and its kill switch exist from SGLang 0.5.13 only."""
    settings = told("mi355x", "sglang", version, SGLANG_USE_AITER="1")
    greedy = settings.decisions["sampler.greedy"]
    assert greedy.status is status
    assert dict(greedy.env).get(variable or "", None) == ("1" if variable else None)
    assert "SGLANG_DISABLE_AITER_GREEDY_SAMPLE" not in settings.env


def test_finding_7_sglang_0_4_3_gets_only_backends_it_accepts() -> None:
    """SGLang 0.4.3 rejects fa3, flashmla and aiter, and reads no SGLANG_USE_AITER."""
    for fixture, kind in [("h100-sxm", "mha"), ("h100-sxm", "mla"), ("mi355x", "mha")]:
        settings = told(fixture, "sglang", "0.4.3", kind, SGLANG_USE_AITER="1")
        words = dict(flag_options(settings.flags)).get("--attention-backend", ())
        assert set(words) <= {"flashinfer", "triton", "torch_native"}
        assert "SGLANG_USE_AITER" not in settings.env


def _problems(settings: EngineSettings, knobs: KnobTable, release: str) -> list[str]:
    problems = []
    for name, value in settings.env.items():
        if name.startswith("KERNELPOLICY_"):
            continue  # kernelpolicy's own plugin switch: read by kernelpolicy, not the engine
        knob = knobs.env(name, release)
        if knob is None or not knob.defined or knob.read_in is None:
            problems.append(f"{name}={value} not read")
    for option, values in flag_options(settings.flags):
        choices = knobs.option(option, release)
        enum = knobs.enum_for(option)
        allowed = choices or (knobs.enum(enum, release) if enum else None)
        if choices is None or (allowed and not set(values) <= set(allowed)):
            problems.append(f"{option} {' '.join(values)} rejected")
    return problems


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_finding_8_every_setting_is_read_by_the_release_it_is_sent_to(engine: str) -> None:
    """Every fixture, every known release, every model kind, with and without the aiter
    switches: each variable sent is defined and read by that release, each flag accepted."""
    knobs = table(engine)
    switches = [{}, {"VLLM_ROCM_USE_AITER": "1"}, {"SGLANG_USE_AITER": "1"}]
    resolutions = {(f, tuple(s.items())): resolve_on(f, **s) for f in FIXTURES for s in switches}
    bad = []
    for (fixture, env), resolution in resolutions.items():
        for release in knobs.releases:
            for kind in MODEL_KINDS:
                settings = engine_settings(
                    resolution, engine, dict(env), engine_version=release, model_kind=kind
                )
                bad += [f"{fixture} {release} {kind} {dict(env)}: {p}" for p in
                        _problems(settings, knobs, release)]  # fmt: skip
    assert bad == []


# -- what the operator sets, and releases the tables do not know ------------------------------


def test_operator_variables_the_release_ignores_are_named() -> None:
    """VLLM_ATTENTION_BACKEND on vLLM 0.26 is ignored (vllm-project/vllm#50292): one line, with
    its replacement; a variable the release reads gives none."""
    env = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_USE_FLASHINFER_SAMPLER": "1"}
    settings = engine_settings(resolve_on("h100-sxm", **env), "vllm", env, engine_version="0.26.0")
    lines = [w for w in settings.warnings if w.startswith("VLLM_")]
    assert lines == [
        "VLLM_ATTENTION_BACKEND is set, but vllm 0.26.0 does not define it: it is ignored; its "
        "replacement: --attention-backend (vllm/engine/arg_utils.py)"
    ]


def test_a_release_newer_than_the_tables_is_matched_as_the_newest() -> None:
    settings = told("h100-sxm", "vllm", "9.0.0")
    assert settings.release == table("vllm").newest
    assert "newer than the newest release" in settings.warnings[0]


def test_the_bundled_pack_is_proven() -> None:
    """kernelpolicy check's proof finds nothing in the bundled pack."""
    assert [str(i) for i in prove_bridge_rules(bundled())] == []


# -- check's proof, on small policies ---------------------------------------------------------

POLICY = """schema = "kernelpolicy.policy/v1"

[features."demo.kernel"]
description = "A kernel the engine runs"
fallback = "plain"
in_process = false

[[features."demo.kernel".candidates]]
impl = "fast"
vendor = "amd"
engines.vllm = [RULES]

[[features."demo.kernel".candidates]]
impl = "plain"
engines.vllm = [{}]
"""


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        pytest.param(
            '{ env = { VLLM_ROCM_USE_AITER_PAGED_ATTN = "1" } }',
            "vllm 0.14.0, ..., 0.25.1 (15 releases): sets VLLM_ROCM_USE_AITER_PAGED_ATTN, which "
            "this release defines but reads nowhere",
            id="defined-but-unread",
        ),
        pytest.param(
            '{ versions = ">=0.10", env = { VLLM_NOT_A_KNOB = "1" } }',
            "sets VLLM_NOT_A_KNOB, which this release does not define",
            id="undefined-variable",
        ),
        pytest.param(
            '{ versions = ">=0.10", env = { VLLM_USE_FLASHINFER_SAMPLER = "true" } }',
            "VLLM_USE_FLASHINFER_SAMPLER=true: its parser refuses the value (ValueError)",
            id="parser-refuses",
        ),
        pytest.param(
            '{ versions = ">=0.13", flags = ["--attention-backend", "NOPE"] }, '
            '{ versions = "<0.13" }',
            "--attention-backend NOPE: not among its choices",
            id="not-in-the-enum",
        ),
        pytest.param(
            '{ versions = ">=0.10", flags = ["--moe-backend", "triton"] }',
            "--moe-backend: this release has no such option",
            id="option-too-early",
        ),
        pytest.param(
            '{ versions = ">=0.12", facts = { aiter_sampler = true } }',
            "vllm 0.7.3, ..., 0.11.2 (7 releases): no rule's versions cover it",
            id="uncovered-releases",
        ),
        pytest.param(
            '{ versions = ">=0.11", facts = { aiter_sampler = true } }, { versions = "<0.12" }',
            "vllm 0.11.0, 0.11.1, 0.11.2: the rule expects aiter_sampler = True; it has False",
            id="fact-does-not-hold",
        ),
        pytest.param(
            '{ versions = ">=0.10" }, { versions = ">=0.30" }, { versions = "<0.10" }',
            "covered by both rule 1 and rule 2",
            id="doubly-covered",
        ),
        pytest.param(
            '{ versions = ">=0.10", facts = { no_such_fact = true } }, { versions = "<0.10" }',
            "vllm rule 1: fact 'no_such_fact' is not in the knob tables (aiter_sampler,",
            id="unknown-fact",
        ),
    ],
)
def test_check_proves_rules_against_the_releases(tmp_path: Path, rules: str, message: str) -> None:
    """Each kind of disagreement is found and named with its rule, releases and knob."""
    from kernelpolicy.policy import load_policies

    path = tmp_path / "p.toml"
    path.write_text(POLICY.replace("RULES", rules))
    issues = [str(i) for i in prove_bridge_rules(load_policies([path]))]
    assert any(message in i for i in issues), issues


def test_the_docs_show_what_check_and_env_print(tmp_path: Path) -> None:
    """docs/engines.md's two example lines are the ones the code prints."""
    docs = (ROOT / "docs/engines.md").read_text()
    from kernelpolicy.policy import load_policies

    path = tmp_path / "p.toml"
    path.write_text(POLICY.replace("RULES", '{ env = { VLLM_ROCM_USE_AITER_PAGED_ATTN = "1" } }'))
    issues = [str(i) for i in prove_bridge_rules(load_policies([path]))]
    (issue,) = [i for i in issues if "reads nowhere" in i]
    assert issue.replace(str(path), "p.toml") in docs
    env = {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    settings = engine_settings(resolve_on("h100-sxm", **env), "vllm", env, engine_version="0.26.0")
    (warning,) = [w for w in settings.warnings if w.startswith("VLLM_ATTENTION_BACKEND")]
    assert f"kernelpolicy: warning: {warning}" in docs
