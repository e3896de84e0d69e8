"""A staged ``[[disable]]``: ``rollout = { percent = N }`` switches a candidate off on the nodes
of the disable's own cohort only, and every front-end says where the node stands."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelpolicy.engine import resolve_policies
from kernelpolicy.engine.cohort import disable_rollouts_of, rollout_metadata
from kernelpolicy.engine.model import CheckKind, ErrorCode, Reason
from kernelpolicy.errors import PolicyError
from kernelpolicy.labels import PREFIX, node_labels
from kernelpolicy.policy import load_policies
from kernelpolicy.policy.rollout import ROLLOUT_BUCKETS, Cohort, compile_rollout
from kernelpolicy.server.metrics import rollout_metrics
from tests.rollout_helpers import FEATURE, FEATURE_TEXT, INSIDE, OUTSIDE, disable, node, policies


def bucket(machine_id: str, salt: str = "") -> int:
    rollout = compile_rollout(FEATURE, "fast", SimpleNamespace(percent=50, salt=salt), disable=True)
    assert rollout is not None
    identity = node(machine_id).identity
    assert identity is not None
    return rollout.bucket(identity)


def test_the_identities_chosen_are_in_and_out_at_half() -> None:
    """The two machine IDs the tests use fall on either side of 50%."""
    assert bucket(INSIDE) < ROLLOUT_BUCKETS // 2 <= bucket(OUTSIDE)


@pytest.mark.parametrize(
    "rollout",
    [
        pytest.param("{ percent = 10 }", id="integer"),
        pytest.param("{ percent = 12.5 }", id="decimal"),
        pytest.param("{ percent = 0 }", id="zero"),
        pytest.param("{ percent = 100 }", id="hundred"),
        pytest.param('{ percent = 5, salt = "again-2" }', id="salt"),
    ],
)
def test_schema_accepts(tmp_path: Path, rollout: str) -> None:
    """A disable takes a candidate's rollout: a percent 0-100 with two decimals, a salt."""
    loaded = policies(tmp_path, disable(rollout))
    assert loaded.disables[0].rollout is not None


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        pytest.param("{ percent = 101 }", "percent 101 is out of range", id="over"),
        pytest.param("{ percent = -1 }", "percent -1 is out of range", id="negative"),
        pytest.param("{ percent = 1.234 }", "at most two decimals", id="three-decimals"),
        pytest.param('{ percent = "10" }', "is a string", id="string"),
        pytest.param("{ percent = true }", "is a boolean", id="boolean"),
        pytest.param("{ percent = nan }", "out of range", id="nan"),
        pytest.param("{ salt = 'x' }", r"disable\.0\.rollout\.percent", id="no-percent"),
        pytest.param('{ percent = 5, salt = "a b" }', "expected at most 64 letters", id="salt"),
        pytest.param("{ percent = 5, share = 1 }", "unknown key", id="unknown-key"),
        pytest.param("10", r"disable\.0\.rollout", id="not-a-table"),
    ],
)
def test_schema_refuses(tmp_path: Path, rollout: str, message: str) -> None:
    """What a candidate's rollout refuses, a disable's refuses, in the same words."""
    with pytest.raises(PolicyError, match=message):
        policies(tmp_path, disable(rollout))


def test_a_disable_salt_draws_apart_from_the_candidate() -> None:
    """The disable's cohort is not its candidate's: the same identities bucket differently."""
    spec = SimpleNamespace(percent=50, salt="")
    candidate = compile_rollout(FEATURE, "fast", spec)
    staged = compile_rollout(FEATURE, "fast", spec, disable=True)
    assert candidate is not None
    assert staged is not None
    assert candidate.salt != staged.salt
    identities = [f"{n:032x}" for n in range(200)]
    assert [candidate.bucket(i) for i in identities] != [staged.bucket(i) for i in identities]


@pytest.mark.parametrize(
    ("rollout", "machine_id", "cohort", "impl"),
    [
        pytest.param(None, INSIDE, None, "plain", id="unstaged-everywhere"),
        pytest.param("{ percent = 50 }", INSIDE, Cohort.IN, "plain", id="in"),
        pytest.param("{ percent = 50 }", OUTSIDE, Cohort.OUT, "fast", id="out"),
        pytest.param("{ percent = 0 }", INSIDE, Cohort.OFF, "fast", id="zero-nowhere"),
        pytest.param("{ percent = 100 }", OUTSIDE, Cohort.IN, "plain", id="hundred-everywhere"),
        pytest.param("{ percent = 50 }", None, Cohort.NO_IDENTITY, "plain", id="no-identity"),
        pytest.param("{ percent = 100 }", None, Cohort.IN, "plain", id="hundred-no-identity"),
    ],
)
def test_the_disable_applies_in_its_cohort(
    tmp_path: Path, rollout: str | None, machine_id: str | None, cohort: Cohort | None, impl: str
) -> None:
    """In the cohort (or at 100%, or unstaged) the candidate is disabled; out of it, at 0% and
    on a node without an identity (below 100%) it is not."""
    resolution = resolve_policies(node(machine_id), {}, policies(tmp_path, disable(rollout)))
    assert resolution.decisions[FEATURE].impl == impl
    placed = list(disable_rollouts_of(resolution.decisions))
    assert [(f, i, r.cohort) for f, i, r in placed] == (
        [] if cohort is None else [(FEATURE, "fast", cohort)]
    )


def test_explain_says_the_node_is_in_the_cohort(tmp_path: Path) -> None:
    """The disabled check names the cohort and the bucket; --json carries disable_rollout."""
    resolution = resolve_policies(node(INSIDE), {}, policies(tmp_path, disable("{ percent = 50 }")))
    decision = resolution.decisions[FEATURE]
    fast = decision.candidates[0]
    [check] = fast.failures
    assert check.kind is CheckKind.DISABLED
    b = bucket(INSIDE)
    assert check.message == (
        f"disabled by policy ({tmp_path / 'ops.toml'}:3): bad tokens; "
        f"in the 50% cohort of this disable (bucket {b} of {ROLLOUT_BUCKETS})"
    )
    assert "or lower its rollout percent" in (check.hint or "")
    assert f"fast rejected: {check.message} (https://example.com/4711)" in decision.reasons
    document = json.loads(json.dumps(decision.to_dict()))
    assert document["candidates"][0]["failures"][0]["disable_rollout"] == {
        "percent": 50.0, "cohort": "in", "bucket": b,
    }  # fmt: skip


def test_a_node_without_identity_is_switched_off(tmp_path: Path) -> None:
    """A node with nothing to place it by is switched off by a staged disable (in doubt, never
    the kernel the disable was written against), and its disabled check says why."""
    resolution = resolve_policies(node(None), {}, policies(tmp_path, disable("{ percent = 50 }")))
    decision = resolution.decisions[FEATURE]
    assert decision.impl == "plain"
    [check] = decision.candidates[0].failures
    assert check.message == (
        f"disabled by policy ({tmp_path / 'ops.toml'}:3): bad tokens; in the 50% rollout of "
        "this disable by doubt: the snapshot names no machine ID or GPU UUID to place the node "
        "by, and a staged switch-off applies where it cannot be placed"
    )
    assert not any("does not apply" in reason for reason in decision.reasons)


@pytest.mark.parametrize(
    ("rollout", "machine_id", "said"),
    [
        pytest.param(
            "{ percent = 50 }", OUTSIDE,
            "a disable staged at 50% does not apply here (bucket {b}; in from {joins}%)",
            id="out",
        ),
        pytest.param(
            "{ percent = 0 }", OUTSIDE, "a disable staged at 0% does not apply here (nor on any "
            "node)", id="zero",
        ),
    ],
)  # fmt: skip
def test_explain_says_the_disable_does_not_apply(
    tmp_path: Path, rollout: str, machine_id: str | None, said: str
) -> None:
    """Where the disable does not apply, the chosen candidate carries a note saying so."""
    resolution = resolve_policies(node(machine_id), {}, policies(tmp_path, disable(rollout)))
    decision = resolution.decisions[FEATURE]
    b = bucket(OUTSIDE)
    expected = said.format(b=b, joins=f"{(b + 1) / 100:.2f}".rstrip("0").rstrip("."))
    assert decision.reason is Reason.PREFERRED
    assert f"note: {expected}: {tmp_path / 'ops.toml'}:3: bad tokens" in decision.reasons[1]


def test_a_rejected_candidate_tells_of_its_unapplied_disable(tmp_path: Path) -> None:
    """A candidate rejected for another reason still says its staged disable is out here."""
    forced = {"KERNELPOLICY_FORCE_DEMO_KERNEL": "plain"}
    loaded = policies(tmp_path, disable("{ percent = 50 }"), disable(None, reason="other"))
    resolution = resolve_policies(node(OUTSIDE), forced, loaded)
    line = next(r for r in resolution.decisions[FEATURE].reasons if r.startswith("fast rejected"))
    assert "disabled by policy" in line
    assert "other" in line
    assert "; note: a disable staged at 50% does not apply here (bucket" in line


def test_every_disabled_implementation_is_still_an_error(tmp_path: Path) -> None:
    """A staged disable that takes the last usable implementation is all_disabled, as any."""
    text = FEATURE_TEXT.replace('fallback = "plain"', 'required = { hint = "needs fast" }')
    text = text.split('[[features."demo.kernel".candidates]]\nimpl = "plain"')[0]
    (tmp_path / "demo.toml").write_text(text)
    (tmp_path / "ops.toml").write_text(
        'schema = "kernelpolicy.policy/v1"\n' + disable("{ percent = 50 }")
    )
    loaded = load_policies([tmp_path / "demo.toml", tmp_path / "ops.toml"])
    inside = resolve_policies(node(INSIDE), {}, loaded).decisions[FEATURE]
    outside = resolve_policies(node(OUTSIDE), {}, loaded).decisions[FEATURE]
    assert inside.error_code is ErrorCode.ALL_DISABLED
    assert "in the 50% cohort of this disable" in (inside.error or "")
    assert outside.impl == "fast"


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param(
            ("{ percent = 50 }", INSIDE), ("{ percent = 60 }", INSIDE), False, id="percent-moves"
        ),
        pytest.param(
            ("{ percent = 50 }", INSIDE), ("{ percent = 50 }", OUTSIDE), False, id="in-and-out"
        ),
        pytest.param(
            ("{ percent = 50 }", INSIDE), ("{ percent = 50 }", INSIDE), True, id="same-node"
        ),
        pytest.param((None, INSIDE), (None, OUTSIDE), True, id="unstaged-identity-unread"),
    ],
)
def test_fingerprint_and_digest(
    tmp_path: Path,
    first: tuple[str | None, str],
    second: tuple[str | None, str],
    same: bool,
) -> None:
    """The fingerprint changes with the disable's percent (the digest with it) and with the
    node's cohort; an unstaged disable reads no identity."""
    prints, digests = [], []
    for index, (rollout, machine_id) in enumerate((first, second)):
        directory = tmp_path / str(index)
        directory.mkdir()
        loaded = policies(directory, disable(rollout))
        prints.append(resolve_policies(node(machine_id), {}, loaded).fingerprint)
        digests.append(loaded.digest)
    assert (prints[0] == prints[1]) is same
    assert (digests[0] == digests[1]) is (first[0] == second[0])


def test_fingerprint_of_unstaged_disables_is_unchanged(tmp_path: Path) -> None:
    """Policies without a staged disable keep the fingerprint they had: no cohorts input."""
    from kernelpolicy.engine.fingerprint import fingerprint

    loaded = policies(tmp_path, disable(None))
    resolution = resolve_policies(node(INSIDE), {}, loaded)
    assert resolution.fingerprint == fingerprint(node(INSIDE), {}, loaded, {})


@pytest.mark.parametrize(
    ("machine_id", "cohort"),
    [
        pytest.param(INSIDE, "in", id="in"),
        pytest.param(OUTSIDE, "out", id="out"),
        pytest.param(None, "no-identity", id="no-identity"),
    ],
)
def test_labels_metrics_and_metadata(tmp_path: Path, machine_id: str | None, cohort: str) -> None:
    """The label disable.<feature>.<impl>, the kernelpolicy_disable_rollout_* metrics and the
    flag metadata disable.<impl>.* say the node's cohort in the staged disable."""
    loaded = policies(tmp_path, disable("{ percent = 50 }"))
    resolution = resolve_policies(node(machine_id), {}, loaded)
    labels = node_labels(resolution)
    assert labels[f"{PREFIX}/disable.{FEATURE}.fast"] == cohort
    assert f"{PREFIX}/disable.{FEATURE}.plain" not in labels
    metadata = rollout_metadata(resolution.decisions[FEATURE])
    assert metadata["disable.fast.cohort"] == cohort
    assert metadata["disable.fast.percent"] == 50.0
    expected_bucket = None if machine_id is None else bucket(machine_id)
    assert metadata.get("disable.fast.bucket") == expected_bucket
    assert not any(key.startswith("rollout.") for key in metadata)
    families = {m.name: m for m in rollout_metrics(resolution)}
    ones = [
        s.labels["cohort"]
        for s in families["kernelpolicy_disable_rollout_cohort"].samples
        if s.value == 1
    ]
    assert ones == [cohort]
    [percent] = families["kernelpolicy_disable_rollout_percent"].samples
    assert percent.labels == {"feature": FEATURE, "impl": "fast"}
    assert percent.value == 50.0
    buckets = families["kernelpolicy_disable_rollout_bucket_index"].samples
    assert [s.value for s in buckets] == ([] if expected_bucket is None else [expected_bucket])
    assert not families["kernelpolicy_rollout_cohort"].samples


def test_several_staged_disables_show_the_one_that_applies(tmp_path: Path) -> None:
    """Two staged disables of one candidate: the one that applies here is the one shown."""
    loaded = policies(tmp_path, disable("{ percent = 0 }"), disable("{ percent = 50 }"))
    resolution = resolve_policies(node(INSIDE), {}, loaded)
    [(_, _, result)] = disable_rollouts_of(resolution.decisions)
    assert result.cohort is Cohort.IN
    assert result.percent == 50.0
    assert resolution.decisions[FEATURE].impl == "plain"


def test_the_pack_cache_keeps_the_disable_rollout(tmp_path: Path) -> None:
    """A set read back from the compiled-pack cache (records, no pydantic) stages the disable
    alike: same rollout, same decisions and fingerprints."""
    from kernelpolicy.policy.packcache import load_cached

    ops = 'schema = "kernelpolicy.policy/v1"\n' + disable("{ percent = 50 }")
    sources = [("/p/demo.toml", FEATURE_TEXT), ("/p/ops.toml", ops)]
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    fresh, cached = load_cached(sources, cache), load_cached(sources, cache)
    assert type(cached.disables[0].spec).__name__ == "SpecRecord"
    assert cached.disables[0].rollout == fresh.disables[0].rollout
    for machine_id in (INSIDE, OUTSIDE):
        one, other = (resolve_policies(node(machine_id), {}, s) for s in (fresh, cached))
        assert one.decisions[FEATURE].impl == other.decisions[FEATURE].impl
        assert one.fingerprint == other.fingerprint
