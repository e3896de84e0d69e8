"""A real daemon's hypothetical answers (a request's own platform_json or env): the evidence and
overrides they use, and that they are what ``kernelpolicy.resolve()`` answers for the same
platform and environment on this node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import kernelpolicy
from kernelpolicy.engine import CheckKind
from kernelpolicy.errors import SettingsError
from kernelpolicy.evidence.store import platform_key, store_evidence
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.client import connect
from kernelpolicy.testing.daemon import running_daemon
from tests.evidence_helpers import CANDIDATE, GREEDY, HEAD, RESULT
from tests.helpers import fixture

PASSED = RESULT
VERIFIED = HEAD + "".join(
    CANDIDATE.format(impl=i, extra=e) for i, e in (("fast", "verified = true"), ("torch", ""))
)
THREE = HEAD + "".join(CANDIDATE.format(impl=i, extra="") for i in ("fast", "mid", "torch"))
VERIFIED_HERE = "verified by kernelpolicy verify on node-run"
NODE = "cpu"  # the daemon's own platform
OTHER = "mi300x"  # another machine (another evidence key)


def _policy(directory: Path, text: str) -> Path:
    path = directory / "policy.toml"
    path.write_text(text)
    return path


def _request(platform: str | None, env: dict[str, str] | None) -> pb.ResolveRequest:
    request = pb.ResolveRequest(features=[GREEDY])
    if platform is not None:
        request.platform_json = fixture(platform).to_json()
    if env is not None:
        request.env.update(env)
        request.hypothetical_env = True
    return request


def _local(platform: str | None, env: dict[str, str], policy: Path) -> kernelpolicy.Resolution:
    """What ``kernelpolicy.resolve()`` answers here for the request's platform and env."""
    return kernelpolicy.resolve(fixture(platform or NODE), env, [policy])


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This node's evidence store (the daemon's and kernelpolicy.resolve()'s default)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kernelpolicy"


@pytest.fixture
def verified_daemon(tmp_path: Path, store: Path) -> Iterator[tuple[object, Path]]:
    """A daemon on NODE whose ``fast`` passed verify here."""
    store_evidence(fixture(NODE), [PASSED], "node-run", store)
    policy = _policy(tmp_path, VERIFIED)
    with running_daemon(fixture(NODE), [policy], watch=False) as running:
        yield running.daemon, policy


@pytest.mark.parametrize(
    ("platform", "env", "impl", "evidence"),
    [
        pytest.param(None, {}, "fast", VERIFIED_HERE, id="env-only"),
        pytest.param(NODE, {}, "fast", VERIFIED_HERE, id="same-key"),
        pytest.param(OTHER, {}, "torch", "not verified on this platform", id="another-platform"),
    ],
)
def test_evidence_counts_only_for_its_platform(
    verified_daemon: tuple[object, Path],
    platform: str | None,
    env: dict[str, str],
    impl: str,
    evidence: str,
) -> None:
    """This node's verify runs count for an answer about a platform with its evidence key (the
    node itself), never for another machine's; the answer is kernelpolicy.resolve()'s there."""
    daemon, policy = verified_daemon
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        response = pb_grpc.KernelPolicyStub(channel).Resolve(_request(platform, env))
    decision = response.decisions[0]
    assert decision.impl == impl
    fast = decision.candidates[0]
    said = [*decision.reasons, *fast.notes, *(c.message for c in fast.failures)]
    assert any(evidence in line for line in said), said
    if impl != "fast":
        assert fast.failures[0].kind == CheckKind.EVIDENCE.value
    assert response.fingerprint == _local(platform, env, policy).fingerprint


def test_client_rebuilds_an_answer_for_another_platform(
    verified_daemon: tuple[object, Path],
) -> None:
    """connect().resolve(platform_json=...) rebuilds the daemon's answer from the inputs it
    sends (the evidence that answer used: none of this node's), with the same fingerprint."""
    daemon, policy = verified_daemon
    other = fixture(OTHER)
    with connect(daemon.bound[0]) as client:  # type: ignore[attr-defined]
        remote = client.resolve(platform_json=other.to_json(), env={})
        node = client.resolve()
    assert remote.decision(GREEDY).impl == "torch"
    assert remote.fingerprint == _local(OTHER, {}, policy).fingerprint
    assert node.decision(GREEDY).impl == "fast"


@pytest.fixture
def overriding_daemon(tmp_path: Path, store: Path) -> Iterator[tuple[object, Path]]:
    """A daemon whose own overrides force ``mid`` (``fast`` otherwise wins)."""
    policy = _policy(tmp_path, THREE)
    with running_daemon(fixture(NODE), [policy], watch=False, overrides={GREEDY: "mid"}) as d:
        yield d.daemon, policy


def _overrides(impl: str) -> dict[str, str]:
    return {"KERNELPOLICY_OVERRIDES": f'{{"{GREEDY}": "{impl}"}}'}


@pytest.mark.parametrize(
    ("platform", "env", "impl"),
    [
        pytest.param(None, None, "mid", id="node-answer"),
        pytest.param(OTHER, None, "mid", id="platform-only-keeps-the-daemons"),
        pytest.param(None, {}, "fast", id="own-env-without-overrides"),
        pytest.param(OTHER, {}, "fast", id="platform-and-own-env"),
        pytest.param(None, _overrides("torch"), "torch", id="own-env-overrides"),
        pytest.param(None, {"KERNELPOLICY_FORCE_SAMPLER_GREEDY": "torch"}, "torch", id="force"),
    ],
)
def test_overrides_go_with_the_environment(
    overriding_daemon: tuple[object, Path],
    platform: str | None,
    env: dict[str, str] | None,
    impl: str,
) -> None:
    """A request's own env brings its own KERNELPOLICY_OVERRIDES (none when it sets none), as
    kernelpolicy.resolve(env=...) does; without one, the daemon's environment and overrides."""
    daemon, policy = overriding_daemon
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        response = pb_grpc.KernelPolicyStub(channel).Resolve(_request(platform, env))
    assert response.decisions[0].impl == impl
    if env is not None:  # without one the answer has the daemon's environment
        assert response.fingerprint == _local(platform, env, policy).fingerprint


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"KERNELPOLICY_OVERRIDES": "{"}, id="overrides-not-json"),
        pytest.param({"KERNELPOLICY_OVERRIDES": "[]"}, id="overrides-not-an-object"),
        pytest.param(_overrides("nope"), id="override-unknown-impl"),
        pytest.param({"KERNELPOLICY_OVERRIDES": '{"nope": "x"}'}, id="override-unknown-feature"),
        pytest.param({"KERNELPOLICY_FORCE_NOPE": "x"}, id="force-unknown-feature"),
    ],
)
def test_a_bad_force_in_the_env_is_refused_as_resolve_refuses_it(
    overriding_daemon: tuple[object, Path], env: dict[str, str]
) -> None:
    """A force or override the policies lack is INVALID_ARGUMENT naming the env and what
    kernelpolicy.resolve(env=...) says of it (it raises); the daemon keeps serving."""
    daemon, policy = overriding_daemon
    with pytest.raises(SettingsError) as local:
        _local(None, env, policy)
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        stub = pb_grpc.KernelPolicyStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Resolve(_request(None, env))
        assert stub.Resolve(_request(None, None)).decisions[0].impl == "mid"
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert details.startswith("env: ")
    assert str(local.value).split(":")[0] in details


def test_the_requests_other_settings_are_not_the_daemons(
    overriding_daemon: tuple[object, Path], tmp_path: Path
) -> None:
    """Of a request's KERNELPOLICY_* settings only the overrides are the answer's: its cache
    directory, trust and log format stay the daemon's (nothing is written where it names, and
    a value the daemon would not take is no refusal)."""
    daemon, _ = overriding_daemon
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"KERNELPOLICY_CACHE_DIR": str(elsewhere), "KERNELPOLICY_LOG_FORMAT": "bogus"}
    with grpc.insecure_channel(daemon.bound[0]) as channel:  # type: ignore[attr-defined]
        response = pb_grpc.KernelPolicyStub(channel).Resolve(_request(None, env))
    assert response.decisions[0].impl == "fast"
    assert list(elsewhere.iterdir()) == []


def test_the_two_platforms_have_different_evidence_keys() -> None:
    """The cases above rely on it: OTHER's evidence is not NODE's."""
    assert platform_key(fixture(NODE)) != platform_key(fixture(OTHER))
