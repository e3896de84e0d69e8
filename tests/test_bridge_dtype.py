"""Per-dtype choices and the engine bridge: where stored evidence (or a run-time failure)
refuses a dtype to the chosen implementation, ``select()`` sends that dtype's calls to the next
candidate in-process, while an engine's variables carry one choice for every dtype;
``kernelpolicy env`` and ``exec`` say which is which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.bridge import engine_settings
from kernelpolicy.bridge.model import NO_IMPL, DtypeChoice
from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.errors import ResolutionError
from kernelpolicy.evidence.store import Evidence, EvidenceEntry, store_evidence
from kernelpolicy.platform import load_platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
SAMPLER = "sampler.top_k_top_p"
NOTE = (
    f"{SAMPLER}: chosen per call by dtype in-process only (resolve().select(), the worker "
    "bridge): float16 without a batch: triton; vllm is told one choice, flashinfer, for every "
    "dtype"
)
POLICY = """schema = "kernelpolicy.policy/v1"
[features.f]
description = "d"
fallback = "slow"
in_process = false
dtypes = ["float32", "bfloat16", "float16"]
[[features.f.candidates]]
impl = "fast"
vendor = "nvidia"
engines.vllm = [{ env = { KP_F = "fast" } }]
[[features.f.candidates]]
impl = "slow"
engines.vllm = [{ env = { KP_F = "slow" } }]
"""


def entry(passed: tuple[str, ...], failed: tuple[str, ...]) -> EvidenceEntry:
    return EvidenceEntry(not failed, "2026-11-26", "summary", "e.json", passed, failed, False)


def resolved(policy: str, evidence: dict[tuple[str, str], EvidenceEntry]) -> Resolution:
    """``policy`` resolved on the H100 snapshot with this stored evidence."""
    stored = Evidence("key", evidence)
    return resolve_policies(fixture("h100-sxm"), {}, load_policy_text(policy), evidence=stored)


def C(dtype: str, impl: str, batch: tuple[int, int | None] | None = None) -> DtypeChoice:
    """A choice; ``changed`` where ``impl`` is not the feature's choice without a dtype."""
    low, high = batch or (None, None)
    return DtypeChoice(dtype, impl, low, high, changed=impl != ("slow" if low == 512 else "fast"))


ROUTED = (
    POLICY.replace(
        '[[features.f.candidates]]\nimpl = "slow"',
        '[[features.f.candidates]]\nimpl = "mid"\nvendor = "nvidia"\n'
        'engines.vllm = [{ env = { KP_F = "mid" } }]\n'
        '[[features.f.candidates]]\nimpl = "slow"',
    )
    + '[[features.f.by_batch]]\nmin = 512\nprefer = ["slow"]\n'
)


@pytest.mark.parametrize(
    ("policy", "evidence", "expected"),
    [
        pytest.param(
            POLICY, entry(("float32", "bfloat16"), ("float16",)),
            (C("float32", "fast"), C("bfloat16", "fast"), C("float16", "slow")),
            id="one-dtype-failed",
        ),
        pytest.param(
            POLICY, entry(("float32",), ()),
            (C("float32", "fast"), C("bfloat16", "slow"), C("float16", "slow")),
            id="passed-for-one-dtype-only",
        ),
        pytest.param(POLICY, entry(("float32", "bfloat16", "float16"), ()), (),
                     id="every-dtype-passed"),
        pytest.param(POLICY, None, (), id="no-evidence"),
        pytest.param(
            ROUTED, entry(("float32",), ()),
            (
                C("float32", "fast"), C("bfloat16", "mid"), C("float16", "mid"),
                C("float32", "fast", (1, 511)), C("bfloat16", "mid", (1, 511)),
                C("float16", "mid", (1, 511)),
                C("float32", "slow", (512, None)), C("bfloat16", "slow", (512, None)),
                C("float16", "slow", (512, None)),
            ),
            id="routed-by-batch-too",
        ),
    ],
)  # fmt: skip
def test_told_says_what_select_chooses_per_dtype(
    policy: str, evidence: EvidenceEntry | None, expected: tuple[DtypeChoice, ...]
) -> None:
    """Every routed dtype's first choice (per batch range where the feature routes by batch
    too), only where some dtype changes a choice; each as select() answers."""
    res = resolved(policy, {} if evidence is None else {("f", "fast"): evidence})
    settings = engine_settings(res, "vllm", {})
    told = settings.decisions["f"]
    assert (told.impl, told.by_dtype, told.per_dtype) == ("fast", expected, bool(expected))
    assert settings.per_dtype == (("f",) if expected else ())
    assert settings.env == {"KP_F": "fast"}  # the engine is told the one choice regardless
    for choice in expected:
        batch = {} if choice.low is None else {"batch": choice.low}
        assert res.select("f", dtype=choice.dtype, **batch) == choice.impl
    if expected:
        assert told.per_dtype_note("vllm") in settings.per_call_notes()
        assert told.to_dict()["per_dtype"] == [c.to_dict() for c in expected]
    else:
        assert told.per_dtype_note("vllm") not in settings.per_call_notes()
        assert told.to_dict()["per_dtype"] is None


# no fallback: two candidates, both of them for NVIDIA only
REQUIRED = (
    POLICY.replace('fallback = "slow"', 'required = { vendor = "nvidia", hint = "install fast" }')
    .replace('impl = "slow"', 'impl = "other"\nvendor = "nvidia"')
    .replace('KP_F = "slow"', 'KP_F = "other"')
)


def test_a_dtype_nothing_serves_is_named_in_the_note() -> None:
    """No fallback, and both candidates passed float32 only: bfloat16 and float16 calls have
    no implementation in-process (select() raises), while the engine runs the one it is told."""
    failed = entry(("float32",), ("bfloat16", "float16"))
    res = resolved(REQUIRED, {("f", "fast"): failed, ("f", "other"): failed})
    told = engine_settings(res, "vllm", {}).decisions["f"]
    assert [(c.dtype, c.impl, c.changed) for c in told.by_dtype] == [
        ("float32", "fast", False), ("bfloat16", NO_IMPL, True), ("float16", NO_IMPL, True),
    ]  # fmt: skip
    assert "bfloat16: (none), float16: (none); vllm is told" in told.per_dtype_note("vllm")
    with pytest.raises(ResolutionError):
        res.select("f", dtype="bfloat16")


def test_the_routed_note_names_the_calls_it_moves() -> None:
    res = resolved(ROUTED, {("f", "fast"): entry(("float32",), ())})
    note = engine_settings(res, "vllm", {}).decisions["f"].per_dtype_note("vllm")
    assert note == (
        "f: chosen per call by dtype in-process only (resolve().select(), the worker bridge): "
        "bfloat16 without a batch: mid, float16 without a batch: mid, batch 1-511 bfloat16: "
        "mid, batch 1-511 float16: mid; vllm is told one choice, fast, for every dtype"
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Evidence on the H100 snapshot: flashinfer passed float32 and bfloat16, failed float16
    (as on the lent H100: one wide-nucleus draw outside the nucleus)."""
    checks = [
        {"check": f"distribution/{dtype}/wide", "passed": dtype != "float16", "detail": ""}
        for dtype in ("float32", "bfloat16", "float16")
    ]
    result = {"feature": SAMPLER, "impl": "flashinfer", "status": "failed", "checks": checks}
    cache = tmp_path / "cache"
    store_evidence(load_platform(H100), [result], "2026-11-26", cache)
    return cache


def kernelpolicy(
    store: Path, *args: str, command: str = "env", log: str = "off"
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT),
        "KERNELPOLICY_LOG_FORMAT": log,
        "KERNELPOLICY_CACHE_DIR": str(store),
    }
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", command, "--engine", "vllm", "--platform",
         str(H100), *args],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["shell", "dotenv", "k8s"])
def test_env_text_formats_say_it_in_a_comment(store: Path, fmt: str) -> None:
    run = kernelpolicy(store, "--format", fmt)
    assert f"\n# {NOTE}\n" in run.stdout
    assert run.stderr == ""


def test_env_json_has_a_per_dtype_field(store: Path) -> None:
    document = json.loads(kernelpolicy(store, "--format", "json").stdout)
    assert document["per_dtype"] == [SAMPLER]
    moved = [c for c in document["decisions"][SAMPLER]["per_dtype"] if c["changed"]]
    assert moved == [{"dtype": "float16", "batch": None, "impl": "triton", "changed": True}]
    assert {"dtype": "float16", "batch": [1, None], "impl": "triton", "changed": False} in (
        document["decisions"][SAMPLER]["per_dtype"]
    )
    assert document["decisions"]["sampler.greedy"]["per_dtype"] is None
    assert document["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "1"


def test_env_k8s_json_notes_on_stderr(store: Path) -> None:
    run = kernelpolicy(store, "--format", "k8s-json")
    assert set(json.loads(run.stdout)) == {"env", "args"}
    assert f"kernelpolicy: note: {NOTE}" in run.stderr.splitlines()


def test_exec_notes_it_and_logs_the_features(store: Path) -> None:
    run = kernelpolicy(store, "--", sys.executable, "-c", "pass", command="exec", log="json")
    lines = run.stderr.splitlines()
    assert f"kernelpolicy: note: {NOTE}" in lines
    (event,) = [json.loads(line) for line in lines if line.startswith("{")]
    assert event["per_dtype"] == [SAMPLER]


def test_the_manual_shows_the_note_as_printed() -> None:
    """docs/engines.md quotes the per-dtype line; it must be what env prints for that case."""
    assert f"\n# {NOTE}\n" in (ROOT / "docs/engines.md").read_text()
