"""The policy digest (``PolicySet.digest``: which policy files a daemon serves) on every answer a
fleet reads from a real daemon on loopback: ``/readyz`` (200, and 503 while it serves stale
policies), the OFREP and flagd flag metadata (one flag and all), and the log events of its start
and of each reload, whether it loaded or failed (the last good set's digest then), and the NFD
feature file (its comment and its ``policy.digest`` label). Each surface is read at three
moments: at start, after a reload that changed the files, after one that failed."""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from kernelpolicy.policy.loader import load_policy_sources, read_policy_sources
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2_grpc as f1_grpc
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.testing.daemon import RunningDaemon, running_daemon
from tests.helpers import ROOT, fixture
from tests.http_helpers import call, post

FLAG = "sampler.top_k_top_p"
MOMENTS = ("start", "reloaded", "failed")
_Read = Callable[[RunningDaemon, grpc.Channel], list[str]]


def _readyz(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
    """The status and the digest: a failed reload is 503 here (ready_requires_current_policy)."""
    assert running.daemon.fleet.url is not None
    reply = call(running.daemon.fleet.url, "GET", "/readyz")
    return [str(reply.status), reply.json()["policy_digest"]]


def _ofrep_one(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
    assert running.daemon.fleet.url is not None
    answer = post(running.daemon.fleet.url, f"/ofrep/v1/evaluate/flags/{FLAG}", {}).json()
    return [answer["metadata"]["policy_digest"]]


def _ofrep_bulk(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
    """The answer's metadata, then the flag's."""
    assert running.daemon.fleet.url is not None
    document = post(running.daemon.fleet.url, "/ofrep/v1/evaluate/flags", {}).json()
    (flag,) = [f for f in document["flags"] if f["key"] == FLAG]
    return [document["metadata"]["policy_digest"], flag["metadata"]["policy_digest"]]


def _flagd(module: Any, stubs: Any) -> _Read:
    def read(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
        request = module.ResolveStringRequest(flag_key=FLAG)
        answer = stubs.ServiceStub(channel).ResolveString(request)
        return [json_format.MessageToDict(answer.metadata)["policy_digest"]]

    return read


def _flagd_all(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
    """The answer's metadata, then the flag's."""
    answer = f1_grpc.ServiceStub(channel).ResolveAll(f1.ResolveAllRequest())
    flag = answer.flags[FLAG].metadata
    return [json_format.MessageToDict(m)["policy_digest"] for m in (answer.metadata, flag)]


def _nfd_file(running: RunningDaemon, channel: grpc.Channel) -> list[str]:
    """The feature file's comment (its policy digest), then its label ``policy.digest``."""
    assert running.daemon.labels_dir is not None
    lines = (running.daemon.labels_dir / "kernelpolicy").read_text().splitlines()
    said = re.search(r"\bpolicy digest ([0-9a-f]+)\)", lines[0])
    (label,) = [line.split("=", 1)[1] for line in lines if "/policy.digest=" in line]
    return [said.group(1) if said else lines[0], label]


READERS: dict[str, _Read] = {
    "readyz": _readyz, "ofrep-one": _ofrep_one, "ofrep-bulk": _ofrep_bulk,
    "flagd-v1": _flagd(f1, f1_grpc), "flagd-v2": _flagd(f2, f2_grpc), "flagd-v1-all": _flagd_all,
    "nfd-file": _nfd_file,
}  # fmt: skip


def _digest(policies: Path) -> str:
    return load_policy_sources(read_policy_sources([policies])).digest


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One daemon serving a copy of the bundled pack (``/readyz`` not ready while a reload
    fails), each surface read at each of MOMENTS; the digests; its JSON log events."""
    home = tmp_path_factory.mktemp("digest")
    policies, labels = home / "policies", home / "features.d"
    shutil.copytree(ROOT / "policies", policies)
    labels.mkdir()
    log = io.StringIO()
    found: dict[str, Any] = {"digests": {}, "reads": {}, "fingerprints": {}}
    with (
        running_daemon(fixture("h100-sxm"), [policies], watch=False, http="127.0.0.1:0",
                       ready_requires_current_policy=True, labels_dir=labels,
                       log_format="json", log_stream=log) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as channel,
    ):  # fmt: skip
        for moment in MOMENTS:
            if moment == "reloaded":
                (policies / "95-ops.toml").write_text(
                    'schema = "kernelpolicy.policy/v1"\n# an operator\'s note: a new digest\n'
                )
            if moment == "failed":
                (policies / "99-bad.toml").write_text("this is not toml [")
            if moment != "start":
                running.call(running.daemon.reload("test"))
            if moment != "failed":
                found["digests"][moment] = _digest(policies)
            found["fingerprints"][moment] = running.daemon.state.snapshot.resolution.fingerprint
            found.setdefault("comments", {})[moment] = (
                (labels / "kernelpolicy").read_text().splitlines()[0]
            )
            found["reads"][moment] = {
                name: read(running, channel) for name, read in READERS.items()
            }
        found["log"] = [json.loads(line) for line in log.getvalue().splitlines() if line]
    return found


def test_the_digests_differ(seen: dict[str, Any]) -> None:
    """The reload changed the files, so the two digests the tests below expect differ."""
    assert seen["digests"]["start"] != seen["digests"]["reloaded"]


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        pytest.param("readyz", lambda d, ok: ["200" if ok else "503", d], id="readyz"),
        pytest.param("ofrep-one", lambda d, ok: [d], id="ofrep-one-flag"),
        pytest.param("ofrep-bulk", lambda d, ok: [d, d], id="ofrep-bulk: answer and flag"),
        pytest.param("flagd-v1", lambda d, ok: [d], id="flagd-v1-resolve-string"),
        pytest.param("flagd-v2", lambda d, ok: [d], id="flagd-v2-resolve-string"),
        pytest.param("flagd-v1-all", lambda d, ok: [d, d],
                     id="flagd-v1-resolve-all: answer and flag"),
        pytest.param("nfd-file", lambda d, ok: [d, d], id="nfd-file: comment and label"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("moment", MOMENTS)
def test_each_surface_says_the_digest_served(
    seen: dict[str, Any], surface: str, expected: Callable[[str, bool], list[str]], moment: str
) -> None:
    """The digest of the files served: the start's, the reloaded set's, and after a failed
    reload still the last good set's (``/readyz`` then 503, as the daemon was asked)."""
    digest = seen["digests"]["reloaded" if moment == "failed" else moment]
    assert seen["reads"][moment][surface] == expected(digest, moment != "failed")


@pytest.mark.parametrize(
    ("event", "key", "moment"),
    [
        pytest.param("kernelpolicy.serve.start", "policy_digest", "start", id="start"),
        pytest.param("kernelpolicy.reload", "policy_digest", "reloaded", id="reload"),
        pytest.param("kernelpolicy.reload.failed", "serving_policy_digest", "reloaded",
                     id="reload-failed: the last good set's"),
    ],
)  # fmt: skip
def test_load_and_reload_events_carry_the_digest(
    seen: dict[str, Any], event: str, key: str, moment: str
) -> None:
    """The structured log event of each load says which policies the daemon serves after it."""
    (logged,) = [line for line in seen["log"] if line.get("event") == event]
    assert logged[key] == seen["digests"][moment]


@pytest.mark.parametrize("moment", MOMENTS)
def test_the_feature_files_comment_says_what_it_carries(seen: dict[str, Any], moment: str) -> None:
    """Its comment names the resolution's fingerprint as the fingerprint and the policy files'
    digest as the policy digest (it said "policy fingerprint" of the resolution's)."""
    from kernelpolicy.versions import KERNELPOLICY_VERSION

    served = "reloaded" if moment == "failed" else moment  # the last good set's labels stay
    fingerprint, digest = seen["fingerprints"][served], seen["digests"][served]
    assert seen["comments"][moment] == (
        f"# Written by kernelpolicy {KERNELPOLICY_VERSION} (fingerprint {fingerprint}, "
        f"policy digest {digest}); rewritten on every new revision, do not edit."
    )
