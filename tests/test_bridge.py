"""The bridge: a resolution translated into what an engine is told, and the child's
environment and command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.bridge import Status, engine_settings, flag_options
from kernelpolicy.bridge.process import child_command, child_environment, given_options
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import SettingsError
from kernelpolicy.policy import load_policies
from tests.helpers import fixture, resolve_on

POLICY = """schema = "kernelpolicy.policy/v1"

[features."attention.backend"]
description = "Attention backend"
fallback = "engine_default"
in_process = false

[[features."attention.backend".candidates]]
impl = "flash_attn"
vendor = "nvidia"
engines.vllm = [
  { versions = ">=0.13", flags = ["--attention-backend", "FLASH_ATTN"] },
  { env = { VLLM_ATTENTION_BACKEND = "FLASH_ATTN" } },
]

[[features."attention.backend".candidates]]
impl = "engine_default"
engines.vllm = [{}]

[features."attention.mla"]
description = "MLA backend"
fallback = "engine_default"
in_process = false
model_kind = "mla"

[[features."attention.mla".candidates]]
impl = "flashmla"
vendor = "nvidia"
engines.vllm = [
  { versions = ">=0.13", flags = ["--attention-backend", "FLASHMLA"] },
  { env = { VLLM_ATTENTION_BACKEND = "FLASHMLA" } },
]

[[features."attention.mla".candidates]]
impl = "engine_default"
engines.vllm = [{}]
"""


def policies(tmp_path: Path, text: str = POLICY):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_policies([path])


@pytest.mark.parametrize(
    ("version", "env", "flags"),
    [
        pytest.param("0.12.0", {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}, (), id="env-before-0.13"),
        pytest.param("0.16.0", {}, ("--attention-backend", "FLASH_ATTN"), id="flag-from-0.13"),
        pytest.param(  # an rc of 0.13 ships 0.13's code (finding 14 of the fifth audit)
            "0.13.0rc1", {}, ("--attention-backend", "FLASH_ATTN"), id="pre-release-is-its-release"
        ),
        pytest.param("0.13.0+cu129", {}, ("--attention-backend", "FLASH_ATTN"), id="local-tag"),
    ],
)
def test_rules_follow_the_engine_version(
    tmp_path: Path, version: str, env: dict[str, str], flags: tuple[str, ...]
) -> None:
    """The first rule whose version range holds applies."""
    res = resolve_policies(fixture("h100-sxm"), {}, policies(tmp_path))
    settings = engine_settings(res, "vllm", {}, engine_version=version)
    assert (settings.env, settings.flags) == (env, flags)
    assert settings.ok
    assert settings.warnings == ()


def test_unknown_version_matches_the_newest_rule_and_says_so(tmp_path: Path) -> None:
    """No vllm installed: the first rule listed (the newest release) applies, with a warning."""
    res = resolve_policies(fixture("h100-real"), {}, policies(tmp_path))
    settings = engine_settings(res, "vllm", {})
    assert settings.version is None
    assert settings.flags == ("--attention-backend", "FLASH_ATTN")
    assert "vllm not installed here" in settings.warnings[0]


def test_model_kind_mla_tells_the_mla_feature_and_conflicts_are_errors(tmp_path: Path) -> None:
    """Two decisions needing one option with different values: an error naming both."""
    res = resolve_policies(fixture("h200"), {}, policies(tmp_path))
    mha = engine_settings(res, "vllm", {})
    assert mha.decisions["attention.mla"].status is Status.OTHER_MODEL_KIND
    assert mha.ok
    mla = engine_settings(res, "vllm", {}, model_kind="mla")
    assert mla.errors == (
        "attention.mla: needs --attention-backend FLASHMLA, but attention.backend needs "
        "--attention-backend FLASH_ATTN",
    )


@pytest.mark.parametrize(
    ("kind", "told"),
    [
        pytest.param("mha", Status.OTHER_MODEL_KIND, id="mha"),
        pytest.param("mla", Status.TOLD, id="dense-mla"),
        pytest.param("mla-sparse", Status.OTHER_MODEL_KIND, id="sparse-mla"),
    ],
)
def test_a_feature_is_told_only_for_its_model_kind(tmp_path: Path, kind: str, told: Status) -> None:
    """attention.mla (model_kind mla: dense MLA) is told for dense MLA models only; a
    sparse-MLA model is another kind."""
    res = resolve_policies(fixture("h200"), {}, policies(tmp_path))
    settings = engine_settings(res, "vllm", {}, engine_version="0.33.0", model_kind=kind)
    assert settings.decisions["attention.mla"].status is told


@pytest.mark.parametrize("kind", ["MLA", "dsa", "", "mla_sparse"])
def test_an_unknown_model_kind_is_refused(kind: str) -> None:
    """A model kind no feature can be for is a SettingsError naming the kinds there are, not a
    kind that silently tells nothing."""
    with pytest.raises(SettingsError, match="expected one of mha, mla, mla-sparse"):
        engine_settings(resolve_on("h100-sxm"), "vllm", {}, model_kind=kind)


def test_user_set_variable_is_kept_and_reported() -> None:
    """A variable the user set is never overwritten; a different value is a warning."""
    res = resolve_on("h100-sxm", VLLM_USE_FLASHINFER_SAMPLER="true")
    settings = engine_settings(res, "vllm", {"VLLM_USE_FLASHINFER_SAMPLER": "true"})
    assert settings.env["VLLM_USE_FLASHINFER_SAMPLER"] == "true"
    assert settings.kept == {"VLLM_USE_FLASHINFER_SAMPLER": "true"}
    assert any("the policy would set VLLM_USE_FLASHINFER_SAMPLER=1" in w for w in settings.warnings)


def test_decision_error_blocks_only_the_engines_told_about_it() -> None:
    """sparse_attn_indexer (a vLLM switch, sparse-MLA models only) in error stops vLLM 0.16 (its
    requirement holds from 0.15) for a sparse-MLA model, not for another model (a dense MLA
    one included: it has no indexer), not the fixture's vLLM 0.10.1 (no indexer: a warning),
    and not SGLang (mi300x, gfx942: no native path)."""
    res = resolve_on("mi300x")
    assert res.decision("sparse_attn_indexer").error
    assert engine_settings(res, "vllm", {}, engine_version="0.16.0").ok
    assert engine_settings(res, "vllm", {}, engine_version="0.16.0", model_kind="mla").ok
    assert engine_settings(res, "vllm", {}, model_kind="mla-sparse").ok  # 0.10.1
    vllm = engine_settings(res, "vllm", {}, engine_version="0.16.0", model_kind="mla-sparse")
    assert not vllm.ok
    assert vllm.errors[0].startswith("sparse_attn_indexer: ")
    sglang = engine_settings(res, "sglang", {}, model_kind="mla-sparse")
    assert sglang.ok
    assert sglang.decisions["sparse_attn_indexer"].status is Status.NOT_FOR_ENGINE


def test_inexpressible_lists_what_the_shared_switch_gives_up() -> None:
    """aiter on, aiter sampler rejected (amd-aiter 0.1.12): vLLM cannot express it."""
    res = resolve_on("mi300x", VLLM_ROCM_USE_AITER="1")
    settings = engine_settings(res, "vllm", {"VLLM_ROCM_USE_AITER": "1"}, engine_version="0.12.0")
    told = settings.decisions["sampler.top_k_top_p"]
    assert (told.impl, told.status) == ("torch", Status.INEXPRESSIBLE)
    assert told.shared_switch == "VLLM_ROCM_USE_AITER"
    assert "allreduce_rmsnorm (aiter)" in told.gives_up
    assert "sparse_attn_indexer (aiter)" in told.gives_up
    assert any("would also give up: allreduce_rmsnorm (aiter)" in w for w in settings.warnings)


@pytest.mark.parametrize(
    ("words", "options"),
    [
        pytest.param([], [], id="empty"),
        pytest.param(["--a", "x", "--b=y"], [("--a", ("x",)), ("--b", ("y",))], id="both-forms"),
        pytest.param(["serve", "m", "--c"], [("--c", ())], id="leading-positionals-ignored"),
        pytest.param(["--a", "x", "y"], [("--a", ("x", "y"))], id="several-values"),
    ],
)
def test_flag_options(words: list[str], options: list[tuple[str, tuple[str, ...]]]) -> None:
    """Command-line words split into options and their values."""
    assert flag_options(words) == options


def test_child_command_keeps_what_the_user_gave(tmp_path: Path) -> None:
    """A flag already on the command line is kept as given; others are appended."""
    res = resolve_policies(fixture("h200"), {}, policies(tmp_path))
    settings = engine_settings(res, "vllm", {})
    argv, warnings = child_command(["vllm", "serve", "m"], settings)
    assert argv == ["vllm", "serve", "m", "--attention-backend", "FLASH_ATTN"]
    assert warnings == []
    argv, warnings = child_command(["vllm", "serve", "--attention-backend=TRITON_ATTN"], settings)
    assert argv == ["vllm", "serve", "--attention-backend=TRITON_ATTN"]
    assert "--attention-backend TRITON_ATTN is on the command line and kept" in warnings[0]


@pytest.mark.parametrize(
    ("words", "kept"),
    [
        pytest.param(["--attention_backend", "TRITON_ATTN"], "TRITON_ATTN", id="underscores"),
        pytest.param(["--attention_backend=TRITON_ATTN"], "TRITON_ATTN", id="underscores-inline"),
        pytest.param(["-ac.backend=TRITON_ATTN"], "TRITON_ATTN", id="config-field-short"),
        pytest.param(["--attention-config.backend", "TRITON_ATTN"], "TRITON_ATTN",
                     id="config-field"),
        pytest.param(["--attention_config.backend", "TRITON_ATTN"], "TRITON_ATTN",
                     id="config-field-underscores"),
        pytest.param(["--attention-config", '{"backend": "TRITON_ATTN"}'], "TRITON_ATTN",
                     id="config-json"),
        pytest.param(["-ac", '{"backend": "FLASH_ATTN", "flash_attn_version": 3}'], "FLASH_ATTN",
                     id="config-json-short-same"),
        pytest.param(["-ac", '{"flash_attn_version": 3}'], None, id="config-without-backend"),
        pytest.param(["-ac", "[[[["], None, id="config-not-json"),
        pytest.param(["--attention-backends", "X"], None, id="another-option"),
        pytest.param(["--attention-backend", "TRITON_ATTN", "--attention-backend", "FLASH_ATTN"],
                     "FLASH_ATTN", id="the-last-one-wins"),
        pytest.param(["-ac", '{"backend": "TRITON_ATTN"}', "-ac", '{"flash_attn_version": 2}'],
                     None, id="the-last-whole-config-has-none"),
        pytest.param(["-ac", '{"flash_attn_version": 2}', "-ac.backend", "TRITON_ATTN"],
                     "TRITON_ATTN", id="dotted-after-whole"),
        pytest.param(["-ac", '{"backend": null}'], None, id="null-is-not-given"),
        pytest.param(["--attention-back", "TRITON_ATTN"], "TRITON_ATTN", id="abbreviated"),
        pytest.param(["--attention-b=TRITON_ATTN"], "TRITON_ATTN", id="abbreviated-inline"),
    ],
)  # fmt: skip
def test_child_command_knows_vllms_spellings(
    tmp_path: Path, words: list[str], kept: str | None
) -> None:
    """vLLM reads --a_b as --a-b and takes the backend inside --attention-config (-ac) too,
    refusing it given both ways: a backend the command gives in any of these is kept, and
    --attention-backend is not added beside it."""
    res = resolve_policies(fixture("h200"), {}, policies(tmp_path))
    settings = engine_settings(res, "vllm", {})
    argv, warnings = child_command(["vllm", "serve", "m", *words], settings)
    added = argv[3 + len(words) :]
    assert added == ([] if kept else ["--attention-backend", "FLASH_ATTN"])
    assert bool(warnings) == (kept not in (None, "FLASH_ATTN"))


def test_sglang_options_are_not_respelled(tmp_path: Path) -> None:
    """Only vLLM's parser reads underscores as dashes."""
    assert given_options(["--attention_backend", "x"], "sglang") == {"--attention_backend": ("x",)}
    assert given_options(["--attention_backend", "x"], "vllm") == {"--attention-backend": ("x",)}


def test_child_environment_never_overwrites() -> None:
    """Set variables keep their value; empty ones count as unset."""
    res = resolve_on("t4")
    settings = engine_settings(res, "vllm", {})
    assert settings.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert child_environment({"PATH": "/bin"}, settings) == {"PATH": "/bin", **settings.env}
    kept = child_environment({"VLLM_USE_FLASHINFER_SAMPLER": "1"}, settings)
    assert kept["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    assert child_environment({"VLLM_USE_FLASHINFER_SAMPLER": ""}, settings) == settings.env


CHAINED = """schema = "kernelpolicy.policy/v1"

[features."attn"]
description = "an attention kernel that turns the engine's aiter switch on"
fallback = "default"
in_process = false

[[features."attn".candidates]]
impl = "aiter"
vendor = "amd"
switches = [{ env = "USE_AITER_ATTN", unset = "off", true = "on", false = "off" }]
engines.sglang = [{ env = { SGLANG_USE_AITER = "1" } }]

[[features."attn".candidates]]
impl = "default"
engines.sglang = [{}]

[features."greedy"]
description = "a sampler the same switch also turns on, unless its kill switch is set"
fallback = "torch"
in_process = false

[[features."greedy".candidates]]
impl = "torch"
engines.sglang = [
  { if_on = ["SGLANG_USE_AITER"], env = { SGLANG_DISABLE_AITER_GREEDY = "1" } },
  {},
]
"""


@pytest.mark.parametrize(
    ("user_env", "told"),
    [
        pytest.param({}, {}, id="nothing-on"),
        pytest.param({"USE_AITER_ATTN": "1"},
                     {"SGLANG_USE_AITER": "1", "SGLANG_DISABLE_AITER_GREEDY": "1"},
                     id="switch-told-by-another-decision"),
        pytest.param({"SGLANG_USE_AITER": "1"}, {"SGLANG_DISABLE_AITER_GREEDY": "1"},
                     id="switch-set-by-the-user"),
        pytest.param({"USE_AITER_ATTN": "1", "SGLANG_USE_AITER": "0"}, {},
                     id="the-users-value-wins"),
    ],
)  # fmt: skip
def test_if_on_sees_what_the_engine_will_see(
    tmp_path: Path, user_env: dict[str, str], told: dict[str, str]
) -> None:
    """``if_on`` tests the environment the engine gets: the user's, with what the other
    decisions tell it (once, this missed the kill switch whenever attention turned aiter on)."""
    res = resolve_policies(fixture("mi300x"), user_env, policies(tmp_path, CHAINED))
    settings = engine_settings(res, "sglang", user_env)
    assert {k: v for k, v in settings.env.items() if k not in user_env} == told


CYCLE = """schema = "kernelpolicy.policy/v1"

[features."a"]
description = "told A_ON=0 when B_ON is on, else 1"
fallback = "x"
in_process = false

[[features."a".candidates]]
impl = "x"
engines.sglang = [{ if_on = ["B_ON"], env = { A_ON = "0" } }, { env = { A_ON = "1" } }]

[features."b"]
description = "told B_ON=1 when A_ON is on"
fallback = "x"
in_process = false

[[features."b".candidates]]
impl = "x"
engines.sglang = [{ if_on = ["A_ON"], env = { B_ON = "1" } }, {}]
"""


def test_rules_that_never_settle_are_an_error(tmp_path: Path) -> None:
    """Two rules whose if_on turn each other on and off have no environment to agree on: an
    error naming the variables, never settings that contradict themselves."""
    res = resolve_policies(fixture("mi300x"), {}, policies(tmp_path, CYCLE))
    settings = engine_settings(res, "sglang", {})
    assert not settings.ok
    assert settings.errors[-1].startswith("the sglang rules never settle")
    assert "A_ON, B_ON" in settings.errors[-1]
