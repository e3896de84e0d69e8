"""The evidence the engine's inputs carry (kernelpolicy/inputs.py): the store is read where the
policies read it (``verified = true``) or where a front end shows it (the node labels), and
counts in an answer only where the policies read it, so that ``labels``, which always loads it,
gives the fingerprint ``explain`` gives; a node's evidence counts only for its own platform."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.evidence.store import store_evidence
from kernelpolicy.inputs import evidence_for, given, platform_evidence
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.loader import load_policy_sources
from tests.evidence_helpers import CANDIDATE, GREEDY, HEAD
from tests.helpers import FIXTURES, fixture

PLAIN = HEAD + CANDIDATE.format(impl="torch", extra="")
VERIFIED = HEAD + "".join(
    CANDIDATE.format(impl=i, extra=e) for i, e in (("fast", "verified = true"), ("torch", ""))
)
PACKS = {"a pack without verified = true": PLAIN, "a pack with verified = true": VERIFIED}
RESULTS = [
    {"feature": GREEDY, "impl": impl, "status": "passed", "checks": []}
    for impl in ("fast", "torch")
]
NODE = "h100-sxm"


def _policies(text: str) -> PolicySet:
    return load_policy_sources([("policy.toml", text)])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A cache directory whose evidence store holds a passed result of each candidate on NODE."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    store_evidence(fixture(NODE), RESULTS, "node-run", cache)
    return cache


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        pytest.param(PLAIN, False, id="not-read-by-the-policies"),
        pytest.param(VERIFIED, True, id="read-by-the-policies"),
    ],
)  # fmt: skip
def test_evidence_counts_only_where_the_policies_read_it(
    text: str, counts: bool, store: Path
) -> None:
    """Evidence given to policies that never read it leaves the answer and its fingerprint as
    without it (a front end that loads it anyway, for the labels, answers as the others); where
    they read it, it is part of the answer."""
    platform, policies = fixture(NODE), _policies(text)
    evidence = evidence_for(policies, platform, store, allow_untrusted=False, always=True)
    assert evidence is not None
    assert evidence.entries  # the store was read
    with_it = given(platform, {}, policies, {}, evidence).resolve()
    without = given(platform, {}, policies, {}, None).resolve()
    assert (with_it.fingerprint != without.fingerprint) is counts


@pytest.mark.parametrize("pack", list(PACKS))
def test_labels_give_the_fingerprint_explain_gives(
    pack: str, store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """labels loads the store whether or not the policies read it (the labels show it); its
    fingerprint is still explain's, which loads it only where they read it."""
    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(store))
    monkeypatch.setenv("KERNELPOLICY_PACK_CACHE", "0")
    policy = tmp_path / "policy.toml"
    policy.write_text(PACKS[pack])
    given_files = ["--platform", str(FIXTURES / f"{NODE}.json"), "--policies", str(policy)]
    assert main(["explain", "--json", *given_files]) == 0
    explained = json.loads(capsys.readouterr().out)["fingerprint"]
    assert main(["labels", *given_files]) == 0
    assert explained in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "always", "loaded"),
    [
        pytest.param(PLAIN, False, False, id="not-read-not-asked"),
        pytest.param(PLAIN, True, True, id="not-read-asked-always"),
        pytest.param(VERIFIED, False, True, id="read-by-the-policies"),
    ],
)  # fmt: skip
def test_the_store_is_read_where_the_policies_read_it_or_always(
    text: str, always: bool, loaded: bool, store: Path
) -> None:
    evidence = evidence_for(
        _policies(text), fixture(NODE), store, allow_untrusted=False, always=always
    )
    assert (evidence is not None) is loaded


@pytest.mark.parametrize(
    ("platform", "kept"),
    [
        pytest.param(NODE, True, id="its-own-platform"),
        pytest.param("mi300x", False, id="another-platform"),
    ],
)  # fmt: skip
def test_a_nodes_evidence_counts_only_for_its_platform(
    platform: str, kept: bool, store: Path
) -> None:
    evidence = evidence_for(_policies(VERIFIED), fixture(NODE), store, allow_untrusted=False)
    assert (platform_evidence(evidence, fixture(platform)) is evidence) is kept
    assert platform_evidence(None, fixture(platform)) is None
