"""The engine bridge against the knob tables: the eight findings of the bridge review (each a
regression case), everything the bundled pack tells every fixture at every known release
checked against that release's knobs, and what the operator sets that a release ignores."""

from __future__ import annotations

import pytest

from kernelpolicy.bridge import MODEL_KINDS, EngineSettings, Status, engine_settings
from kernelpolicy.check.bridge_proof import prove_bridge_rules
from kernelpolicy.knobs import KnobTable
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.policy.schema.bridge import flag_options
from tests.helpers import bundled, resolve_on
from tests.knob_helpers import table, told

FIXTURES = sorted(p.stem for p in (fixture_dir() / "platforms").glob("*.json"))

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
        pytest.param("0.16.0", False, Status.ERROR, id="0.16-needs-aiter"),
    ],
)
def test_finding_5_vllm_runs_its_own_gfx950_indexer(version: str, ok: bool, status: Status) -> None:
    """mi355x, sparse MLA, no VLLM_ROCM_USE_AITER: 0.33 takes its native gfx950 path (no
    error); 0.16 cannot, and is refused (the indexer is required: the fourth audit)."""
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
