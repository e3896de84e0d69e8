"""explain says where each switch's value came from (issue 26 item 2) and shows, per feature,
what runs in-process and what each engine is told, with warnings for the features shown only
(issue 26 item 4)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from tests.helpers import FIXTURES

H100 = str(FIXTURES / "h100-sxm.json")
MI300X = str(FIXTURES / "mi300x.json")
TOPK = "sampler.top_k_top_p"
SWITCH = "VLLM_USE_FLASHINFER_SAMPLER"
FORCE = "KERNELPOLICY_FORCE_SAMPLER_TOP_K_TOP_P"


def _snapshot(tmp_path: Path, **env: str) -> str:
    document = json.loads(Path(H100).read_text())
    document["env"] = env
    path = tmp_path / "node.json"
    path.write_text(json.dumps(document))
    return str(path)


def _explain(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, object]]:
    """The text and the --json document of explain TOPK with ``argv``."""
    assert main(["explain", TOPK, *argv]) == 0
    text = capsys.readouterr().out
    assert main(["explain", TOPK, "--json", *argv]) == 0
    document = json.loads(capsys.readouterr().out)
    return text, document["decisions"][TOPK]


@pytest.mark.parametrize(
    ("shell", "snapshot_env", "argv", "line", "source"),
    [
        pytest.param({SWITCH: "0"}, {}, ["--platform", "SNAPSHOT"],
                     f"switch: {SWITCH} unset in the snapshot: auto (your shell has {SWITCH}=0, "
                     "ignored with --platform; pass --env to use it)",
                     {"variable": SWITCH, "from": "unset", "value": None,
                      "ignored_shell_value": "0"},
                     id="shell-value-ignored-with-platform"),
        pytest.param({SWITCH: "0"}, {}, ["--platform", "SNAPSHOT", "--env", f"{SWITCH}=0"],
                     f"switch: {SWITCH}=0 from --env: off",
                     {"from": "--env", "value": "0", "ignored_shell_value": None},
                     id="env-option-uses-it"),
        pytest.param({}, {SWITCH: "1"}, ["--platform", "SNAPSHOT"],
                     f"switch: {SWITCH}=1 in the snapshot: on",
                     {"from": "snapshot", "value": "1", "states": {"flashinfer": "on"}},
                     id="snapshot"),
        pytest.param({}, {SWITCH: "1"}, ["--platform", "SNAPSHOT", "--env", f"{SWITCH}="],
                     f"switch: {SWITCH} unset by --env: auto", {"from": "--env", "value": None},
                     id="unset-by-env-option"),
        pytest.param({SWITCH: "0"}, {}, [], f"switch: {SWITCH}=0 from your shell: off",
                     {"from": "shell", "value": "0"}, id="shell-without-platform"),
        pytest.param({}, {}, ["--platform", "SNAPSHOT"], f"switch: {SWITCH} unset in the "
                     "snapshot: auto", {"from": "unset", "ignored_shell_value": None},
                     id="unset"),
        pytest.param({}, {}, ["--platform", "SNAPSHOT", "--env", f"{FORCE}=torch"],
                     f"force: {FORCE}=torch from --env",
                     {"variable": FORCE, "from": "force", "set_in": "--env"}, id="force"),
        pytest.param({}, {}, ["--platform", "SNAPSHOT", "--env",
                              f'KERNELPOLICY_OVERRIDES={{"{TOPK}": "torch"}}'],
                     "override: KERNELPOLICY_OVERRIDES={'sampler.top_k_top_p': 'torch'} from "
                     "--env", {"variable": "KERNELPOLICY_OVERRIDES", "from": "override",
                               "set_in": "--env"}, id="override"),
        # first-day review, finding 1: a force or override of the shell was dropped in silence
        pytest.param({FORCE: "torch"}, {}, ["--platform", "SNAPSHOT"],
                     f"force: {FORCE} unset in the snapshot (your shell has {FORCE}=torch, "
                     "ignored with --platform; pass --env to use it)",
                     {"variable": FORCE, "from": "unset", "value": None,
                      "ignored_shell_value": "torch"}, id="shell-force-ignored-with-platform"),
        pytest.param({FORCE: "torch"}, {FORCE: "triton"}, ["--platform", "SNAPSHOT"],
                     f"force: {FORCE}=triton in the snapshot (your shell has {FORCE}=torch, "
                     "ignored with --platform; pass --env to use it)",
                     {"variable": FORCE, "from": "force", "set_in": "snapshot",
                      "ignored_shell_value": "torch"}, id="shell-force-beside-the-snapshots"),
        pytest.param({FORCE: "torch"}, {}, ["--platform", "SNAPSHOT", "--env", f"{FORCE}=torch"],
                     f"force: {FORCE}=torch from --env",
                     {"variable": FORCE, "ignored_shell_value": None}, id="shell-force-by-env"),
        pytest.param({FORCE: "torch"}, {FORCE: "torch"}, ["--platform", "SNAPSHOT"],
                     f"force: {FORCE}=torch in the snapshot",
                     {"variable": FORCE, "ignored_shell_value": None}, id="same-force-both"),
        pytest.param({"KERNELPOLICY_OVERRIDES": f'{{"{TOPK}": "torch"}}'}, {},
                     ["--platform", "SNAPSHOT"],
                     "override: none in the snapshot (your shell has KERNELPOLICY_OVERRIDES="
                     "{'sampler.top_k_top_p': 'torch'}, ignored with --platform; pass --env to "
                     "use it)", {"variable": "KERNELPOLICY_OVERRIDES", "from": "unset",
                                 "ignored_shell_value": "{'sampler.top_k_top_p': 'torch'}"},
                     id="shell-override-ignored-with-platform"),
        pytest.param({FORCE: "torch"}, {}, [], f"force: {FORCE}=torch from your shell",
                     {"variable": FORCE, "from": "force", "set_in": "shell"},
                     id="shell-force-without-platform"),
    ],
)  # fmt: skip
def test_every_switch_says_where_its_value_came_from(
    shell: dict[str, str],
    snapshot_env: dict[str, str],
    argv: list[str],
    line: str,
    source: dict[str, object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Text: one line per switch (and force or override) naming where its value came from;
    --json: the same in ``sources``, fields added to the decision."""
    for key in (SWITCH, FORCE, "KERNELPOLICY_OVERRIDES"):
        monkeypatch.delenv(key, raising=False)
    for key, value in shell.items():
        monkeypatch.setenv(key, value)
    path = _snapshot(tmp_path, **snapshot_env)
    text, decision = _explain([path if a == "SNAPSHOT" else a for a in argv], capsys)
    assert f"  {line}" in text.splitlines()
    sources = decision["sources"]
    assert isinstance(sources, list)
    entry = next(s for s in sources if s["variable"] == source.get("variable", SWITCH))
    assert {k: entry[k] for k in source} == source
    assert {"impl", "error", "reasons", "candidates"} <= set(decision)  # fields only added


def test_in_process_and_engines_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows what select() runs (per batch range) and, before any detail line, what
    each engine is told; a fallback names the candidates rejected and why in one word."""
    assert main(["explain", "--platform", H100]) == 0
    out = capsys.readouterr().out
    squeezed = re.sub(r" {2,}", "  ", out)
    head = out.split("\n\n")[:3]
    assert f"{TOPK}  triton (batch 1+), flashinfer without a batch  first supported" in squeezed
    assert "sampler.greedy  torch  fallback: aiter rejected (for another vendor's GPU)" in squeezed
    assert "moe.experts  triton  fallback: flashinfer_cutlass, deep_gemm, rocm_aiter rejected" in (
        squeezed
    )
    assert any("engines: what each is told" in part for part in head)
    assert main(["explain", TOPK, "--platform", H100, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (
        document["decisions"][TOPK]["in_process"] == "triton (batch 1+), flashinfer without a batch"
    )


@pytest.mark.parametrize(
    ("argv", "present", "absent"),
    [
        pytest.param(["explain", "sampler.greedy", "--platform", MI300X], [],
                     ["sparse_attn_indexer", "not installed here", "engines: what each"],
                     id="filter-filters-the-warnings"),
        pytest.param(["explain", "--platform", MI300X], ["sglang not installed here"],
                     ["sglang: warning: sparse_attn_indexer"], id="sglang-not-warned-about-vllm"),
        pytest.param(["explain", "allreduce_rmsnorm", "--platform", MI300X], [],
                     ["not installed here"], id="no-row-no-release-note"),
        # the header says "(newest known)"; one quiet line says why, no warning per engine
        pytest.param(["explain", "--platform", MI300X],
                     ["(newest known): sglang not installed here, matched as the newest release "
                      "kernelpolicy's knob tables know; env and exec take --engine-version"],
                     ["warning: sglang not installed here", "pass --engine-version"],
                     id="assumed-release-one-line"),
    ],
)  # fmt: skip
def test_warnings_follow_what_is_shown(
    argv: list[str], present: list[str], absent: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Feature filters filter the engines' warnings; an engine without a row gets no 'not
    installed here'; an SGLang column is not warned about a vLLM-only feature's switches; an
    engine matched as the newest known release gets one line, not a warning (first day: explain
    said 'pass --engine-version', an option explain does not take)."""
    main(argv)
    out = capsys.readouterr().out
    for text in present:
        assert text in out
    for text in absent:
        assert text not in out


@pytest.mark.parametrize(
    ("engine", "foreign"),
    [pytest.param("sglang", "VLLM_", id="sglang"), pytest.param("vllm", "SGLANG_", id="vllm")],
)
def test_env_warns_an_engine_only_about_its_own_switches(
    engine: str, foreign: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """kernelpolicy env --engine E on a node where another engine's feature is an error: no
    warning names the other engine's variables."""
    assert main(["env", "--engine", engine, "--platform", MI300X, "--model-kind", "mla"]) in (0, 1)
    err = capsys.readouterr().err
    assert foreign not in err, err
