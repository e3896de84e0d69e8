"""Per-call routing: by the call's batch (``by_batch`` rows) and dtype (stored evidence per
dtype), in ``select()``, in the callable ``impl()`` hands out, and in ``explain``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelpolicy.engine import resolve_policies
from kernelpolicy.engine.dispatch import TABLE_LIMIT, Routed
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.evidence.store import Evidence, EvidenceEntry
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture, with_libraries

FEATURE = "demo.sampler"
TORCH = "kernelpolicy.kernels.torch_impl:top_k_top_p"
FAILS_FP16 = "kernelpolicy.testing.buggy_kernels:top_k_top_p_fails_float16"
POLICY = f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "two kernels that win at different batch sizes"
fallback = "torch"
context = {{ seeded = "bool" }}
dtypes = ["float32", "bfloat16", "float16"]
[[features."{FEATURE}".candidates]]
impl = "small"
entry = "{FAILS_FP16}"
when = "!seeded"
[[features."{FEATURE}".candidates]]
impl = "large"
entry = "{TORCH}"
[[features."{FEATURE}".candidates]]
impl = "torch"
entry = "{TORCH}"
[[features."{FEATURE}".by_batch]]
max = 32
prefer = ["small", "large"]
reference = "small 0.1 ms, large 0.3 ms at batch 1-32"
[[features."{FEATURE}".by_batch]]
min = 33
prefer = ["large"]
reference = "large 1.0 ms, small 2.0 ms at batch 1024"
"""


def entry(
    passed: tuple[str, ...], failed: tuple[str, ...] = (), general: bool = False
) -> EvidenceEntry:
    ok = not failed and not general
    return EvidenceEntry(ok, "2026-11-23", "summary", "evidence.json", passed, failed, general)


def resolve(
    evidence: dict[str, EvidenceEntry] | None = None,
    policy: str = POLICY,
    env: dict[str, str] | None = None,
) -> Resolution:
    stored = Evidence("key", {(FEATURE, impl): e for impl, e in (evidence or {}).items()})
    return resolve_policies(fixture("cpu"), env or {}, load_policy_text(policy), evidence=stored)


@pytest.mark.parametrize(
    ("batch", "dtype", "evidence", "expected"),
    [
        pytest.param(1, "float32", {}, "small", id="small-batch"),
        pytest.param(32, "bfloat16", {}, "small", id="row-upper-bound"),
        pytest.param(33, "float32", {}, "large", id="row-lower-bound"),
        pytest.param(4096, "float16", {}, "large", id="large-batch"),
        pytest.param(None, None, {}, "small", id="neither-given-policy-order"),
        pytest.param(1000, None, {}, "large", id="batch-only"),
        pytest.param(None, "float16", {}, "small", id="dtype-only-no-evidence"),
        pytest.param(
            1, "float16", {"small": entry(("float32", "bfloat16"), ("float16",))}, "large",
            id="dtype-failed-goes-to-next",
        ),
        pytest.param(
            1, "bfloat16", {"small": entry(("float32",))}, "large",
            id="dtype-not-passed-goes-to-next",
        ),
        pytest.param(
            1, "float32", {"small": entry(("float32",))}, "small", id="dtype-passed-stays"
        ),
        pytest.param(
            1, torch.float16, {"small": entry(("float32",), ("float16",))}, "large",
            id="torch-dtype-object",
        ),
        pytest.param(
            4096, "bfloat16", {"large": entry(("float32",), ("bfloat16",))}, "small",
            id="large-refused-small-next",
        ),
        pytest.param(
            1, "float16",
            {"small": entry((), ("float16",)), "large": entry((), ("float16",)),
             "torch": entry((), ("float16",))},
            "torch", id="fallback-serves-every-dtype",
        ),
        pytest.param(
            1, "float16", {"small": entry((), (), general=True)}, "small",
            id="evidence-naming-no-dtype-does-not-route",
        ),
    ],
)  # fmt: skip
def test_select_routes_by_batch_and_dtype(
    batch: int | None, dtype: object, evidence: dict[str, EvidenceEntry], expected: str
) -> None:
    """select() takes the row of the call's batch, skips what the dtype's evidence refuses,
    and agrees with the CEL path and with the callable impl() hands out."""
    resolution = resolve(evidence)
    context: dict[str, object] = {"seeded": False}
    if batch is not None:
        context["batch"] = batch
    if dtype is not None:
        context["dtype"] = dtype
    assert resolution.select(FEATURE, **context) == expected
    assert resolution.select(FEATURE, **context) == expected  # the cached answer
    assert resolution._select_miss({}, FEATURE, None, context) == expected
    if batch is not None and dtype is not None:
        routed = resolution.impl(FEATURE)
        assert isinstance(routed, Routed)
        torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))
        assert routed.choice(batch, torch_dtype) == expected


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        pytest.param(8, "large", id="small-row-falls-through-when"),
        pytest.param(64, "large", id="large"),
    ],
)
def test_per_call_conditions_still_apply_within_a_row(batch: int, expected: str) -> None:
    """A row's preferred implementation whose `when` fails (seeded) gives way to the next."""
    assert resolve().select(FEATURE, seeded=True, batch=batch, dtype="float32") == expected


@pytest.mark.parametrize(
    ("context", "message"),
    [
        pytest.param({"batch": "8"}, "'batch' must be int", id="batch-a-string"),
        pytest.param({"batch": True}, "'batch' must be int", id="batch-a-bool"),
        pytest.param({"dtype": 3}, "'dtype' must be string", id="dtype-an-int"),
    ],
)
def test_routing_variables_of_the_wrong_type_are_errors(
    context: dict[str, object], message: str
) -> None:
    """Where batch and dtype route (rows and evidence per dtype), a value of the wrong type is
    a ResolutionError naming the variable."""
    from kernelpolicy.errors import ResolutionError

    resolution = resolve({"small": entry(("float32",))})
    with pytest.raises(ResolutionError, match=message):
        resolution.select(FEATURE, seeded=False, **context)


def test_the_dispatcher_runs_the_chosen_kernel_per_shape() -> None:
    """impl() gives one callable; calls of each batch and dtype return valid ids."""
    resolution = resolve()
    sampler = resolution.impl(FEATURE)
    assert resolution.impl(FEATURE) is sampler
    for rows, dtype in [(1, torch.float32), (64, torch.bfloat16), (4, torch.float32)]:
        logits = torch.randn(rows, 300).to(dtype)
        ids = sampler(logits, torch.full((rows,), 5), None)
        assert ids.shape == (rows,)
        assert bool(((ids >= 0) & (ids < 300)).all())
    assert [sampler.choice(1, torch.float32), sampler.choice(64, torch.bfloat16)] == [
        "small",
        "large",
    ]


def test_a_call_time_failure_switches_only_that_dtype() -> None:
    """The small-batch kernel raises for float16: that call is answered by the fallback, float16
    goes to the next candidate from then on (impl() and select() alike), float32 stays, and
    runtime_fallbacks, the warnings and explain say so."""
    resolution = resolve()
    sampler = resolution.impl(FEATURE)
    logits = torch.randn(4, 200)
    ids = sampler(logits.half(), torch.full((4,), 5), None)
    assert ids.shape == (4,)
    note = resolution.runtime_fallbacks[FEATURE]
    assert "small failed at run time for float16" in note
    assert "no float16 kernel (planted)" in note
    assert note in resolution.decision(FEATURE).warnings
    assert sampler.choice(4, torch.float16) == "large"
    assert sampler.choice(4, torch.float32) == "small"
    assert resolution.select(FEATURE, seeded=False, batch=4, dtype="float16") == "large"
    assert resolution.select(FEATURE, seeded=False, batch=4, dtype="float32") == "small"
    assert sampler(logits.half(), torch.full((4,), 5), None).shape == (4,)  # no second failure
    assert resolution.runtime_fallbacks[FEATURE] == note
    assert resolution.to_dict()["decisions"][FEATURE]["dtypes"]["small"]["refuses"] == ["float16"]


def test_a_wrong_call_raises_and_switches_nothing() -> None:
    """1-D logits fail in the kernel and in the fallback: the kernel's error, nothing switched."""
    resolution = resolve()
    sampler = resolution.impl(FEATURE)
    with pytest.raises(IndexError, match="Dimension out of range"):
        sampler(torch.randn(8, 300)[0], torch.full((1,), 5), None)
    assert resolution.runtime_fallbacks == {}


def test_a_forced_implementation_serves_every_batch() -> None:
    """by_batch applies to the policy's own choice, not to a forced one."""
    resolution = resolve(env={"KERNELPOLICY_FORCE_DEMO_SAMPLER": "small"})
    decision = resolution.decision(FEATURE)
    assert decision.routes == ()
    assert resolution.select(FEATURE, seeded=False, batch=4096, dtype="float32") == "small"
    assert "by batch: not applied, small is forced" in decision.reasons


def test_explain_shows_who_serves_which_batch_and_dtype() -> None:
    """The rows with their measurements, the evidence per dtype, and the resulting table."""
    resolution = resolve({"small": entry(("float32", "bfloat16"), ("float16",))})
    reasons = resolution.decision(FEATURE).reasons
    assert (
        "by batch 1-32: small then large then torch (small 0.1 ms, large 0.3 ms at batch 1-32)"
        in reasons
    )
    assert (
        "by batch 33+: large then small then torch (large 1.0 ms, small 2.0 ms at batch 1024)"
        in reasons
    )
    assert (
        "dtype: small serves float32, bfloat16 "
        "(kernelpolicy verify on 2026-11-23 passed float32, bfloat16, failed float16)"
    ) in reasons
    assert "serves batch 1-32: small for float32, bfloat16; large for float16" in reasons
    assert "serves batch 33+: large for float32, bfloat16, float16" in reasons
    document = resolution.to_dict()["decisions"][FEATURE]
    assert document["routes"][0] == {
        "batch": [1, 32], "order": ["small", "large", "torch"],
        "reference": "small 0.1 ms, large 0.3 ms at batch 1-32",
    }  # fmt: skip
    assert document["dtypes"]["small"]["serves"] == ["float32", "bfloat16"]


@pytest.mark.parametrize(
    ("evidence", "accepted"),
    [
        pytest.param(None, False, id="no-evidence-rejected-as-before"),
        pytest.param(entry(("float32",), ("float16",)), True, id="dtype-only-failure-accepted"),
        pytest.param(entry(("float32",), ("float16",), general=True), False, id="general-failure"),
        pytest.param(entry((), ("float16",)), False, id="no-dtype-passed"),
    ],
)
def test_verified_candidates_per_dtype(evidence: EvidenceEntry | None, accepted: bool) -> None:
    """`verified = true` on a dtype-routed feature: a failure naming only some dtypes verifies
    the candidate for the dtypes that passed; no evidence still rejects it."""
    policy = POLICY.replace('impl = "small"\n', 'impl = "small"\nverified = true\n')
    resolution = resolve({"small": evidence} if evidence else {}, policy=policy)
    small = next(c for c in resolution.decision(FEATURE).candidates if c.impl == "small")
    assert small.accepted is accepted
    if accepted:
        assert resolution.select(FEATURE, seeded=False, batch=1, dtype="float16") == "large"
        assert resolution.select(FEATURE, seeded=False, batch=1, dtype="float32") == "small"


def test_the_bundled_sampler_routes_by_the_measured_winners() -> None:
    """With FlashInfer and Triton usable on an H100, Triton serves every batch (the measured
    winner); a call without a batch keeps FlashInfer first (what the engines can run); a
    platform without them has nothing to route (impl() is the plain function)."""
    import kernelpolicy
    from kernelpolicy.kernels.torch_impl import top_k_top_p

    platform = with_libraries("h100-real", flashinfer_python="0.7.2.post1")
    resolution = kernelpolicy.resolve(platform=platform, env={})
    context = {
        "has_generators": False,
        "has_top_k": True,
        "has_top_p": True,
        "logprobs_mode": "raw_logprobs",
    }
    answers = [
        resolution.select("sampler.top_k_top_p", batch=b, dtype="bfloat16", **context)
        for b in (1, 255, 256, 1024)
    ]
    assert answers == ["triton", "triton", "triton", "triton"]
    assert resolution.select("sampler.top_k_top_p", **context) == "flashinfer"  # as before
    cpu = kernelpolicy.resolve(platform=fixture("cpu"), env={})
    assert cpu.impl("sampler.top_k_top_p") is top_k_top_p


def test_explain_routes_by_stored_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After verify stored a float16 failure for triton, `explain` on that machine serves
    float16 with flashinfer at every batch, and says why."""
    from kernelpolicy.cli import main
    from kernelpolicy.evidence.store import store_evidence

    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path))
    checks = {"robustness/float32/nan": True, "robustness/bfloat16/nan": True}
    checks["robustness/float16/nan"] = False
    result = {
        "feature": "sampler.top_k_top_p", "impl": "triton", "status": "failed",
        "checks": [{"check": c, "passed": ok, "detail": ""} for c, ok in checks.items()],
    }  # fmt: skip
    platform_file = "kernelpolicy/fixtures/platforms/h200.json"
    store_evidence(fixture("h200"), [result], "2026-11-23T04:00:00Z", tmp_path)
    assert main(["explain", "--platform", platform_file, "sampler.top_k_top_p"]) == 0
    out = capsys.readouterr().out
    assert "dtype: triton serves float32, bfloat16 (kernelpolicy verify on 2026-11-23" in out
    assert "serves batch 1+: triton for float32, bfloat16; flashinfer for float16" in out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((FEATURE, False), id="one-more"),
        pytest.param((FEATURE, False, 8), id="two-more"),
    ],
)
def test_context_is_never_positional(args: tuple[object, ...]) -> None:
    """select() takes the name alone positionally (its parameters are positional-or-keyword
    for speed); anything more is a TypeError, never a variable bound by position."""
    with pytest.raises(TypeError, match="name as its only positional argument"):
        resolve().select(*args)


@pytest.mark.parametrize(
    ("pairs", "kept"),
    [
        pytest.param(TABLE_LIMIT, TABLE_LIMIT, id="at-limit"),
        pytest.param(TABLE_LIMIT + 1, 1, id="limit-plus-one"),
    ],
)
def test_the_dispatch_table_is_bounded(pairs: int, kept: int) -> None:
    """TABLE_LIMIT (rows, dtype) pairs are remembered; one more starts the table over."""
    routed = resolve().impl(FEATURE)
    for rows in range(1, pairs + 1):
        routed.choice(rows, torch.float32)
    assert routed._size == kept
