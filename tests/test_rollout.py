"""Staged rollout: cohorts by node identity, stable, monotone, independent between features."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.engine.model import CheckKind, Reason
from kernelpolicy.errors import PolicyError
from kernelpolicy.labels import PREFIX, node_labels, render_nfd
from kernelpolicy.platform.identity import app_specific_id, node_identity, read_machine_id
from kernelpolicy.platform.model import Platform
from kernelpolicy.platform.probing import probe
from kernelpolicy.policy import PolicySet, load_policies
from kernelpolicy.policy.rollout import ROLLOUT_BUCKETS, Cohort, compile_rollout
from tests.helpers import fixture
from tests.rollout_helpers import node

IDENTITIES = [hashlib.sha256(f"node-{i}".encode()).hexdigest()[:32] for i in range(10_000)]
# 10,000 nodes: a share's standard deviation is at most 0.5 percentage points; 2 is 4 sigma.
TOLERANCE = 0.02


def policy(tmp_path: Path, *candidates: str, name: str = "demo.kernel") -> PolicySet:
    """One engine-only feature: the given candidate tables, then an unconditional 'plain'."""
    body = "".join(f'\n[[features."{name}".candidates]]\n{c}\n' for c in candidates)
    text = (
        'schema = "kernelpolicy.policy/v1"\n'
        f'[features."{name}"]\ndescription = "demo"\nfallback = "plain"\nin_process = false\n'
        f'{body}\n[[features."{name}".candidates]]\nimpl = "plain"\n'
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_policies([path])


def members(feature: str, impl: str, percent: float, salt: str = "") -> set[str]:
    spec = type("Spec", (), {"percent": percent, "salt": salt})()
    rollout = compile_rollout(feature, impl, spec)
    assert rollout is not None
    return {i for i in IDENTITIES if rollout.place(i)[0] is Cohort.IN}


@pytest.mark.parametrize("percent", [0.5, 1, 10, 25, 50, 90, 99])
def test_share_is_the_percent(percent: float) -> None:
    """Over 10,000 identities the cohort's share is the percent, within 2 points."""
    share = len(members("sampler.top_k_top_p", "flashinfer", percent)) / len(IDENTITIES)
    assert abs(share - percent / 100) <= TOLERANCE


def test_raising_the_percent_only_adds_nodes() -> None:
    """Each step's cohort contains the previous one's."""
    previous: set[str] = set()
    for percent in (0, 0.01, 1, 5, 10, 25, 50, 75, 99.99, 100):
        cohort = members("mhc", "aiter", percent)
        assert previous <= cohort
        previous = cohort
    assert previous == set(IDENTITIES)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(("mhc", "aiter", ""), ("sampler.greedy", "aiter", ""), id="features"),
        pytest.param(("mhc", "aiter", ""), ("mhc", "triton", ""), id="candidates"),
        pytest.param(("mhc", "aiter", ""), ("mhc", "aiter", "again"), id="salts"),
    ],
)
def test_cohorts_are_independent(first: tuple[str, str, str], second: tuple[str, str, str]) -> None:
    """Two 50% cohorts salted differently overlap on a quarter of the nodes, as independent
    draws do, not on half (the same cohort) or none."""
    a = members(first[0], first[1], 50, first[2])
    b = members(second[0], second[1], 50, second[2])
    assert abs(len(a & b) / len(IDENTITIES) - 0.25) <= TOLERANCE


@pytest.mark.parametrize(
    ("feature", "salt", "percent", "buckets"),
    [
        pytest.param("sampler.top_k_top_p", "", 10, [5680, 8059, 2310], id="default-salt"),
        pytest.param("sampler.top_k_top_p", "", 90, [5680, 8059, 2310],
                     id="default-salt-whatever-the-percent"),
        pytest.param("sampler.top_k_top_p", "canary", 10, [1450, 5479, 5979], id="own-salt"),
        pytest.param("sampler.greedy", "", 10, [8321, 990, 1978], id="another-feature"),
    ],
)  # fmt: skip
def test_bucket_is_stable(feature: str, salt: str, percent: int, buckets: list[int]) -> None:
    """A node's bucket is a pure function of feature, impl, salt and identity, pinned: a change
    of hashing would move every node of every fleet."""
    spec = type("Spec", (), {"percent": percent, "salt": salt})()
    rollout = compile_rollout(feature, "flashinfer", spec)
    assert rollout is not None
    assert [rollout.bucket(i) for i in IDENTITIES[:3]] == buckets
    assert all(0 <= rollout.bucket(i) < ROLLOUT_BUCKETS for i in IDENTITIES[:100])


def _decision(tmp_path: Path, candidate: str, platform: Platform, **env: str):  # type: ignore[no-untyped-def]
    policies = policy(tmp_path, candidate)
    return resolve_policies(platform, env, policies).decisions["demo.kernel"]


@pytest.mark.parametrize(
    ("candidate", "machine", "impl", "cohort", "message"),
    [
        pytest.param("rollout = { percent = 100 }", IDENTITIES[0], "fast", "in", "in the 100%",
                     id="all"),
        pytest.param("rollout = { percent = 0 }", IDENTITIES[0], "plain", "off", "kill switch",
                     id="kill-switch"),
        pytest.param("rollout = { percent = 50 }", None, "plain", "no-identity",
                     "no machine ID or GPU UUID", id="no-identity"),
        pytest.param("rollout = { percent = 100 }", None, "fast", "in", "in the 100%",
                     id="no-identity-at-100"),
    ],
)  # fmt: skip
def test_cohort_in_the_decision(
    tmp_path: Path, candidate: str, machine: str | None, impl: str, cohort: str, message: str
) -> None:
    """The decision falls through out of the cohort, with a rollout check saying why."""
    decision = _decision(tmp_path, f'impl = "fast"\n{candidate}', node(machine))
    assert decision.impl == impl
    fast = decision.candidates[0]
    assert fast.rollout is not None
    assert fast.rollout.cohort.value == cohort
    assert message in "\n".join(decision.reasons)
    if impl == "plain":
        assert [f.kind for f in fast.failures] == [CheckKind.ROLLOUT]
        assert decision.reason is Reason.FALLBACK
        assert not decision.warnings  # the policy's choice, not something to fix


def test_out_of_cohort_node_says_when_it_joins(tmp_path: Path) -> None:
    """An out-of-cohort node's reason names its bucket and the percent that takes it in."""
    out = next(i for i in IDENTITIES if i not in members("demo.kernel", "fast", 10))
    decision = _decision(tmp_path, 'impl = "fast"\nrollout = { percent = 10 }', node(out))
    assert decision.impl == "plain"
    assert "not in the 10% rollout cohort (bucket" in decision.reasons[-1]
    assert "in from" in decision.reasons[-1]


def test_explicit_request_wins_over_the_cohort(tmp_path: Path) -> None:
    """A switch set to on still gets the candidate out of the cohort (the rollout stages the
    default; [[disable]] forbids)."""
    candidate = (
        'impl = "fast"\nrollout = { percent = 0 }\n'
        'switches = [{ env = "KERNELPOLICY_DEMO_FAST", unset = "auto", true = "on", '
        'false = "off" }]'
    )
    decision = _decision(tmp_path, candidate, node(IDENTITIES[0]), KERNELPOLICY_DEMO_FAST="1")
    assert (decision.impl, decision.reason) == ("fast", Reason.REQUESTED)
    assert decision.reasons[0] == (
        "fast: requested by KERNELPOLICY_DEMO_FAST=1, and supported; its rollout would keep it "
        "off (rollout at 0%: switched off on every node (kill switch))"
    )


def test_a_force_says_which_rollout_it_overrides(tmp_path: Path) -> None:
    """Forced onto a node out of the candidate's cohort: the reason says the rollout would have
    kept it off, so the node is not taken for one of the rollout's."""
    out = next(i for i in IDENTITIES if i not in members("demo.kernel", "fast", 10))
    decision = _decision(tmp_path, 'impl = "fast"\nrollout = { percent = 10 }', node(out),
                         KERNELPOLICY_FORCE_DEMO_KERNEL="fast")  # fmt: skip
    assert decision.reason is Reason.FORCED
    assert (
        "; its rollout would keep it off (not in the 10% rollout cohort (" in (decision.reasons[0])
    )


def test_fingerprint_follows_the_cohort(tmp_path: Path) -> None:
    """Two nodes of one kind in different cohorts differ in fingerprint; in the same, agree."""
    policies = policy(tmp_path, 'impl = "fast"\nrollout = { percent = 50 }')
    inside = sorted(members("demo.kernel", "fast", 50))[:2]
    outside = next(i for i in IDENTITIES if i not in set(inside) and i not in members(
        "demo.kernel", "fast", 50))  # fmt: skip
    prints = [resolve_policies(node(i), {}, policies).fingerprint for i in (*inside, outside)]
    assert prints[0] == prints[1] != prints[2]


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        pytest.param(
            "{ percent = -1 }",
            "percent -1 is out of range; expected a number from 0 to 100",
            id="negative",
        ),
        pytest.param("{ percent = 100.5 }", "percent 100.5 is out of range", id="over-100"),
        pytest.param("{ percent = nan }", "percent nan is out of range", id="nan"),
        pytest.param("{ percent = inf }", "percent inf is out of range", id="infinite"),
        pytest.param("{ percent = 1.234 }", "at most two decimals", id="three-decimals"),
        pytest.param(
            '{ percent = "10" }', "percent '10' is a string; expected a number", id="string"
        ),
        pytest.param('{ percent = "50%" }', "percent '50%' is a string", id="percent-sign"),
        pytest.param("{ percent = true }", "percent True is a boolean", id="boolean"),
        pytest.param("{ }", "percent", id="missing"),
        pytest.param('{ percent = 5, salt = "a b" }', "salt", id="bad-salt"),
        pytest.param("{ percent = 5, share = 1 }", "share", id="unknown-key"),
    ],
)
def test_check_validates_the_rollout(tmp_path: Path, rollout: str, message: str) -> None:
    """A bad rollout is a policy error naming the key."""
    with pytest.raises(PolicyError, match=message):
        policy(tmp_path, f'impl = "fast"\nrollout = {rollout}')


def test_check_command_names_the_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kernelpolicy check`` reports a percent out of range with file and key, exit 1 or 2."""
    with pytest.raises(PolicyError):
        policy(tmp_path, 'impl = "fast"\nrollout = { percent = 101 }')
    assert main(["check", str(tmp_path / "demo.kernel.toml")]) != 0
    err = capsys.readouterr()
    assert "rollout.percent" in err.out + err.err


def test_fallback_cannot_be_rolled_out(tmp_path: Path) -> None:
    """The always-available fallback with a rollout is refused: it would not always be there."""
    path = tmp_path / "p.toml"
    path.write_text(
        'schema = "kernelpolicy.policy/v1"\n[features."demo.kernel"]\ndescription = "d"\n'
        'fallback = "plain"\nin_process = false\n[[features."demo.kernel".candidates]]\n'
        'impl = "plain"\nrollout = { percent = 50 }\n'
    )
    with pytest.raises(PolicyError, match="fallback 'plain' has requirements"):
        load_policies([path])


def test_labels_say_the_cohort(tmp_path: Path) -> None:
    """Node labels carry the cohort per rolled-out candidate and the node's identity, valid
    for Kubernetes."""
    policies = policy(tmp_path, 'impl = "fast"\nrollout = { percent = 0 }')
    labels = node_labels(resolve_policies(node(IDENTITIES[0]), {}, policies))
    assert labels[f"{PREFIX}/rollout.demo.kernel.fast"] == "off"
    assert labels[f"{PREFIX}/node.identity"] == IDENTITIES[0]
    render_nfd(labels)  # raises on any invalid key or value


@pytest.mark.parametrize(
    ("raw", "valid"),
    [
        pytest.param("5a2b" * 8 + "\n", True, id="file-content"),
        pytest.param("5A2B" * 8, True, id="upper-case"),
        pytest.param("5a2b5a2b-5a2b-5a2b-5a2b-5a2b5a2b5a2b", True, id="uuid-dashes"),
        pytest.param("", False, id="empty"),
        pytest.param("uninitialized\n", False, id="uninitialized"),
        pytest.param("0" * 32, False, id="zero"),
        pytest.param("5a2b" * 7, False, id="short"),
    ],
)
def test_app_specific_machine_id(raw: str, valid: bool) -> None:
    """The raw machine ID never leaves the host: an HMAC of it, or nothing for a non-ID."""
    found = app_specific_id(raw)
    assert (found is not None) == valid
    if found is not None:
        assert len(found) == 32
        assert "5a2b" not in found
        assert found == app_specific_id("5a2b" * 8)


def test_probe_reads_the_machine_id(tmp_path: Path) -> None:
    """The probe writes the app-specific ID; a root without one gives a snapshot without it."""
    assert "machine_id" not in probe(root=tmp_path, nvml=None, amdsmi=None, environ={}).to_dict()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("5a2b" * 8 + "\n")
    assert read_machine_id(tmp_path) == app_specific_id("5a2b" * 8)
    snapshot = probe(root=tmp_path, nvml=None, amdsmi=None, environ={})
    assert snapshot.to_dict()["machine_id"] == app_specific_id("5a2b" * 8)
    assert Platform.from_dict(snapshot.to_dict()).identity == snapshot.machine_id


@pytest.mark.parametrize(
    ("machine_id", "devices", "expected"),
    [
        pytest.param("ab" * 16, ["GPU-1"], "ab" * 16, id="machine-id-first"),
        pytest.param(None, ["GPU-2", "GPU-1"], node_identity(None, ["GPU-1", "GPU-2"]),
                     id="uuids-sorted"),
        pytest.param(None, [], None, id="none"),
    ],
)  # fmt: skip
def test_node_identity(machine_id: str | None, devices: list[str], expected: str | None) -> None:
    """The machine ID, else the sorted GPU UUIDs hashed, else nothing."""
    assert node_identity(machine_id, devices) == expected


def test_snapshot_machine_id_is_validated() -> None:
    """A machine_id that is not 32 hex characters is a snapshot error naming the key."""
    from kernelpolicy.errors import PlatformFileError

    data = {**fixture("cpu").to_dict(), "machine_id": "not-hex"}
    with pytest.raises(PlatformFileError, match="machine_id"):
        Platform.from_dict(data)
