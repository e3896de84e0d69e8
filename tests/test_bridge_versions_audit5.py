"""How ``--engine-version`` is matched (the fifth audit's findings 12-14): a version kernelpolicy
cannot read is matched as the newest release of the knob tables, as the note says; a release
newer than the tables keeps its own version for what kernelpolicy's plugin does in it; a
pre-release, dev build or nightly of X is matched as X, and a version the tables hold only as
other builds of its release (X.postN) is checked against those builds' knobs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.bridge import EngineSettings, engine_settings
from kernelpolicy.bridge.plugin import ENABLE
from kernelpolicy.bridge.release import MatchedRelease
from kernelpolicy.engine import resolve_policies
from kernelpolicy.knobs import runner_v2_routed
from kernelpolicy.policy import load_policies
from tests.helpers import fixture, resolve_on

ROOT = Path(__file__).resolve().parent.parent
V2 = "VLLM_USE_V2_MODEL_RUNNER"
BYPASS = f"the choice reaches vllm only with {V2}=0"


def told(fixture_name: str, engine: str, version: str | None, **env: str) -> EngineSettings:
    return engine_settings(resolve_on(fixture_name, **env), engine, env, engine_version=version)


def setting(settings: EngineSettings) -> tuple[dict[str, str], tuple[str, ...]]:
    return settings.env, settings.flags


# --- finding 12: a version kernelpolicy cannot read ------------------------------------------


@pytest.mark.parametrize(
    ("engine", "version", "newest"),
    [
        pytest.param("vllm", "latest", "0.33.0", id="vllm-latest"),
        pytest.param("vllm", "main", "0.33.0", id="vllm-main"),
        pytest.param("sglang", "latest", "0.5.23", id="sglang-latest"),
        pytest.param("sglang", "nightly", "0.5.23", id="sglang-nightly"),
    ],
)
def test_an_unreadable_version_is_told_as_the_newest_release(
    engine: str, version: str, newest: str
) -> None:
    """H100: what the newest release is told, the note saying so; before, the first rule listed
    won (vLLM got the 0.10-0.23 VLLM_USE_FLASHINFER_MOE_FP8/FP4=0 and no plugin, SGLang
    --sampling-backend pytorch with the 'before 0.4.6' warning)."""
    settings = told("h100-sxm", engine, version)
    assert setting(settings) == setting(told("h100-sxm", engine, newest))
    assert settings.release == newest
    assert settings.warnings[0] == settings.release_note
    assert f"{version!r} unreadable: matched as {engine} {newest}" in (settings.release_note or "")
    said = " ".join(settings.warnings)
    assert "before 0.4.6" not in said
    assert "VLLM_USE_FLASHINFER_MOE" not in str(settings.env)


@pytest.mark.parametrize(
    ("version", "plugin"),
    [
        pytest.param("latest", "1", id="unreadable-newest-runs-the-plugin"),
        pytest.param(None, "1", id="not-installed-the-same"),
        pytest.param("0.33-cuda", "1", id="dotted-build-tag-is-readable-0.33"),
    ],
)
def test_the_plugin_for_an_unknown_version(version: str | None, plugin: str) -> None:
    """The plugin is turned on as for 0.33.0 (a dotted build tag is read by parse_version as
    0.33+cuda, so it is no unreadable version). The H100 snapshot without vLLM."""
    assert told("h100-real", "vllm", version).env.get(ENABLE) == plugin


@pytest.mark.parametrize(
    ("version", "unread"),
    [
        pytest.param("latest", True, id="unreadable-checked-as-newest"),
        pytest.param("0.12.0", False, id="0.12-reads-it"),
    ],
)
def test_an_unreadable_version_gets_the_newest_releases_knob_check(
    version: str, unread: bool
) -> None:
    """VLLM_ATTENTION_BACKEND is ignored by 0.33.0 (dropped in 0.15): said for 'latest' too."""
    settings = told("h100-sxm", "vllm", version, VLLM_ATTENTION_BACKEND="FLASH_ATTN")
    said = [w for w in settings.warnings if w.startswith("VLLM_ATTENTION_BACKEND is set")]
    assert bool(said) is unread, settings.warnings


CUSTOM = """schema = "kernelpolicy.policy/v1"
[features."attention.backend"]
description = "Attention backend"
fallback = "engine_default"
in_process = false
[[features."attention.backend".candidates]]
impl = "flash_attn"
vendor = "nvidia"
engines.myengine = [
  { versions = "<2.0", env = { MYENGINE_OLD = "1" } },
  { versions = ">=2.0", env = { MYENGINE_NEW = "1" } },
]
[[features."attention.backend".candidates]]
impl = "engine_default"
engines.myengine = [{}]
"""


@pytest.mark.parametrize(
    ("version", "sent", "noted"),
    [
        pytest.param(None, "MYENGINE_NEW", True, id="not-installed-newest-rule"),
        pytest.param("latest", "MYENGINE_NEW", True, id="unreadable-newest-rule"),
        pytest.param("1.5", "MYENGINE_OLD", False, id="an-old-release"),
        pytest.param("2.0rc1", "MYENGINE_NEW", False, id="rc-of-2.0-is-2.0"),
    ],
)
def test_an_engine_without_tables_matches_past_every_version_its_rules_name(
    tmp_path: Path, version: str | None, sent: str, noted: bool
) -> None:
    """No knob tables: no version is matched as a release newer than every version the rules
    name, so the rule listed first (<2.0) no longer wins whatever its range."""
    path = tmp_path / "p.toml"
    path.write_text(CUSTOM)
    res = resolve_policies(fixture("h100-sxm"), {}, load_policies([path]))
    settings = engine_settings(res, "myengine", {}, engine_version=version)
    assert list(settings.env) == [sent]
    note = settings.release_note
    assert (note is not None and "newer than every version they name" in note) is noted, note


# --- finding 13: newer than the tables ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "env", "warned"),
    [
        pytest.param("0.34.0", {}, True, id="0.34-plugin-does-not-route-v2"),
        pytest.param("0.34.0.dev5", {}, True, id="0.34-nightly-neither"),
        pytest.param("0.35.1+cu130", {}, True, id="0.35-local-build"),
        pytest.param("0.34.0", {V2: "0"}, False, id="0.34-v1-runner-asked-for"),
        pytest.param("0.33.1", {}, False, id="0.33.1-inside-the-routed-range"),
        pytest.param("0.33.0", {}, False, id="0.33-routed"),
        pytest.param("latest", {}, False, id="unreadable-as-0.33-routed"),
    ],
)
def test_a_release_newer_than_the_tables_warns_where_v2_is_not_routed(
    version: str, env: dict[str, str], warned: bool
) -> None:
    """H100: the plugin routes Model Runner V2's sampler in >=0.32.0,<0.34 only
    (knobs.PLUGIN_RUNNER_V2; kernelpolicy/vllm_sampling.py refuses 0.34): 0.34 is matched as
    0.33.0 for the rules but asked as itself about the plugin (before: silent)."""
    settings = told("h100-real", "vllm", version, **env)
    said = [w for f, w in settings.feature_warnings if f == "sampler.top_k_top_p"]
    assert any(BYPASS in w for w in said) is warned, said
    assert settings.decisions["sampler.top_k_top_p"].plugin is not None


def test_the_version_given_is_kept_beside_the_one_matched() -> None:
    """0.34.0: rules matched as 0.33.0, the engine's own release kept for the plugin."""
    release = MatchedRelease("vllm", "0.34.0")
    assert (str(release.matched), str(release.given), release.known) == (
        "0.33.0", "0.34.0", "0.33.0"
    )  # fmt: skip


def test_exec_warns_for_0_34_that_v2_is_not_routed() -> None:
    """exec, as an operator runs it: the warning line is on stderr and the engine starts."""
    done = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "exec", "--engine", "vllm", "--engine-version",
         "0.34.0", "--platform", str(ROOT / "kernelpolicy/fixtures/platforms/h100-real.json"),
         "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "KERNELPOLICY_LOG_FORMAT": "off"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert BYPASS in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("release", "routed"),
    [
        pytest.param("0.32.0rc1", True, id="rc-of-0.32"),
        pytest.param("0.33.0+rocm711", True, id="local-build"),
        pytest.param("0.34.0.dev5", False, id="nightly-of-0.34"),
        pytest.param("0.34.0rc1", False, id="rc-of-0.34"),
        pytest.param("0.31.0", False, id="before-0.32"),
        pytest.param("not-a-version", False, id="unreadable"),
    ],
)
def test_runner_v2_routed_asks_the_release_a_build_ships(release: str, routed: bool) -> None:
    """The plugin's own question, as vllm_sampling asks it with vllm.__version__."""
    assert runner_v2_routed("vllm", release) is routed


# --- finding 14: pre-releases, dev builds, post releases ------------------------------------


@pytest.mark.parametrize(
    ("fixture_name", "engine", "version", "release", "env"),
    [
        pytest.param("h100-sxm", "vllm", "0.32.0rc1", "0.32.0", {}, id="rc-gets-the-plugin"),
        pytest.param("h100-sxm", "vllm", "0.13.0rc2", "0.13.0", {}, id="rc-of-0.13-no-0.12-rules"),
        pytest.param("mi300x", "vllm", "0.11.1.dev123+g1a2b3c4", "0.11.1",
                     {"VLLM_ROCM_USE_AITER": "1"}, id="nightly-of-0.11.1-not-0.11.0"),
        pytest.param("h100-sxm", "sglang", "0.5.23rc0", "0.5.23", {}, id="sglang-rc"),
        pytest.param("h100-sxm", "vllm", "0.33.0+cu130", "0.33.0", {}, id="local-label-kept"),
        pytest.param("h100-sxm", "vllm", "0.32.0+cpu", "0.32.0", {}, id="cpu-build-kept"),
    ],
)  # fmt: skip
def test_a_build_of_a_release_is_told_as_that_release(
    fixture_name: str, engine: str, version: str, release: str, env: dict[str, str]
) -> None:
    """An rc of X ships X's code (vLLM and SGLang cut it from X's branch, and read their own
    dependencies' dev builds as the release they precede): told exactly what X is, no note."""
    settings = told(fixture_name, engine, version, **env)
    assert setting(settings) == setting(told(fixture_name, engine, release, **env))
    assert settings.release == release
    assert settings.release_note is None, settings.release_note


@pytest.mark.parametrize(
    ("kind", "absent"),
    [
        pytest.param("mla", "--block-size", id="mla-no-block-size-1-of-0.8.5-0.11.0"),
        pytest.param("mha", "VLLM_ATTENTION_BACKEND", id="mha"),
    ],
)
def test_a_nightly_is_not_told_the_previous_releases_rules(kind: str, absent: str) -> None:
    """vLLM 0.11.1.dev123 on an MI300X with aiter: --block-size 1 is for 0.8.5-0.11.0."""
    env = {"VLLM_ROCM_USE_AITER": "1"}
    settings = engine_settings(
        resolve_on("mi300x", **env), "vllm", env,
        engine_version="0.11.1.dev123+g1a2b3c4", model_kind=kind,
    )  # fmt: skip
    assert absent not in settings.flags
    assert absent not in settings.env
    assert settings.env.get("VLLM_ROCM_USE_AITER_TRITON_ROPE") == "0"  # read from 0.11.1


@pytest.mark.parametrize(
    ("engine", "version", "checked", "variable", "warning"),
    [
        pytest.param("vllm", "0.8.5", ("0.8.5.post1",), V2,
                     f"{V2} is set, but vllm 0.8.5.post1 does not define it",
                     id="0.8.5-as-0.8.5.post1"),
        pytest.param("sglang", "0.4.6", ("0.4.6.post5",), "SGLANG_NOT_A_KNOB",
                     "SGLANG_NOT_A_KNOB is set, but sglang 0.4.6.post5 does not define it",
                     id="0.4.6-as-0.4.6.post5"),
        pytest.param("sglang", "0.5.6.post1", ("0.5.6", "0.5.6.post2"), "SGLANG_NOT_A_KNOB",
                     "SGLANG_NOT_A_KNOB is set, but neither sglang 0.5.6 nor 0.5.6.post2 reads it",
                     id="0.5.6.post1-between-its-builds"),
        pytest.param("sglang", "0.5.6.post1", ("0.5.6", "0.5.6.post2"),
                     "SGLANG_AITER_MLA_PERSIST", "", id="read-by-0.5.6.post2-not-warned"),
        pytest.param("sglang", "0.5.6.post3", ("0.5.6.post2",), "SGLANG_NOT_A_KNOB",
                     "SGLANG_NOT_A_KNOB is set, but sglang 0.5.6.post2 does not define it",
                     id="past-the-last-post-its-newest-build"),
    ],
)  # fmt: skip
def test_a_version_held_as_other_builds_of_its_release_is_checked_against_them(
    engine: str, version: str, checked: tuple[str, ...], variable: str, warning: str
) -> None:
    """Before, release=None and no check: the variable warning was never said."""
    settings = told("h100-sxm", engine, version, **{variable: "1"})
    assert settings.release == checked[0]
    note = settings.release_note or ""
    assert f"{engine} {version} is not in kernelpolicy's knob tables" in note, note
    assert " and ".join(checked) in note, note
    said = [w for w in settings.warnings if w.startswith(f"{variable} is set")]
    assert len(said) == bool(warning), said
    assert all(w.startswith(warning) for w in said), said


@pytest.mark.parametrize(
    ("engine", "version", "checked"),
    [
        pytest.param("vllm", "0.8.5.post1", ("0.8.5.post1",), id="in-the-tables"),
        pytest.param("sglang", "0.5.6.post2+rocm", ("0.5.6.post2",), id="post-with-local"),
        pytest.param("vllm", "0.32.1", ("0.32.0",), id="between-releases-newest-below"),
        pytest.param("vllm", "0.8.5rc1", ("0.8.5.post1",), id="rc-of-a-release-held-as-post"),
    ],
)
def test_which_releases_knobs_stand_for_a_version(
    engine: str, version: str, checked: tuple[str, ...]
) -> None:
    """Builds of the same release stand for it; a version between releases is checked
    against the newest release below it, as the rules' reads are (the seventh audit)."""
    assert MatchedRelease(engine, version).checked == checked
