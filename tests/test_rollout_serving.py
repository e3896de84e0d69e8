"""The rollout cohort in the daemon's outputs, from a real ``kernelpolicy serve``: OFREP and
flagd flag metadata and ``/metrics`` say which cohort the node is in for each candidate with a
rollout (in, out, off, no-identity) and why (the percent and the node's bucket)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy.rollout import Cohort, compile_rollout
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2_grpc as f1_grpc
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from tests.helpers import FIXTURES, promtool_check_metrics
from tests.http_helpers import call, post
from tests.metrics_helpers import samples
from tests.serve_process import Served, serve

FEATURE = "demo.kernel"
POLICY = f"""schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "a staged rollout"
fallback = "plain"
in_process = false
[[features."{FEATURE}".candidates]]
impl = "killed"
rollout = {{ percent = 0 }}
[[features."{FEATURE}".candidates]]
impl = "half"
rollout = {{ percent = 50 }}
[[features."{FEATURE}".candidates]]
impl = "plain"
"""
PERCENTS = {"killed": 0.0, "half": 50.0}


def expected(platform: str) -> dict[str, tuple[str, int | None]]:
    """impl -> (cohort, bucket), from the rollout's own hash of the snapshot's identity."""
    identity = load_platform(FIXTURES / f"{platform}.json").identity
    placed = {}
    for impl, percent in PERCENTS.items():
        rollout = compile_rollout(FEATURE, impl, SimpleNamespace(percent=percent, salt=""))
        assert rollout is not None
        cohort, bucket = rollout.place(identity)
        placed[impl] = (cohort.value, bucket)
    return placed


@pytest.fixture(params=["h100-sxm", "cpu"], ids=["identity", "no-identity"])
def node(request: pytest.FixtureRequest) -> Iterator[tuple[str, Served]]:
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        (root / "policies").mkdir()
        (root / "policies" / "demo.toml").write_text(POLICY)
        with serve(root / "n", FIXTURES / f"{request.param}.json", [root / "policies"]) as served:
            yield request.param, served
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_metadata(metadata: dict[str, Any], platform: str) -> None:
    """``rollout.<impl>.cohort``, ``.percent`` and ``.bucket`` (absent without an identity)."""
    for impl, (cohort, bucket) in expected(platform).items():
        assert metadata[f"rollout.{impl}.cohort"] == cohort, impl
        assert metadata[f"rollout.{impl}.percent"] == PERCENTS[impl], impl
        assert metadata.get(f"rollout.{impl}.bucket") == bucket, impl
    assert not any(key.startswith("rollout.plain.") for key in metadata)


def test_the_cohorts_are_the_closed_set_expected() -> None:
    """The identity node is off for the kill switch; the node without one is no-identity."""
    assert expected("h100-sxm")["killed"][0] == Cohort.OFF.value
    assert expected("h100-sxm")["half"][0] in (Cohort.IN.value, Cohort.OUT.value)
    assert expected("cpu") == {"killed": ("off", None), "half": ("no-identity", None)}


def test_ofrep_metadata_carries_the_cohort(node: tuple[str, Served]) -> None:
    """One flag and the bulk evaluation carry each rolled-out candidate's cohort and why."""
    platform, served = node
    one = post(served.url, f"/ofrep/v1/evaluate/flags/{FEATURE}", {"context": {}})
    assert one.status == 200
    answer = one.json()
    half_in = expected(platform)["half"][0] == "in"
    assert answer["value"] == ("half" if half_in else "plain")
    check_metadata(answer["metadata"], platform)
    bulk = post(served.url, "/ofrep/v1/evaluate/flags", {"context": {}}).json()
    (flag,) = [f for f in bulk["flags"] if f["key"] == FEATURE]
    check_metadata(flag["metadata"], platform)
    assert not any(key.startswith("rollout.") for key in bulk["metadata"])


@pytest.mark.parametrize(
    ("messages", "stub"), [pytest.param(f1, f1_grpc, id="v1"), pytest.param(f2, f2_grpc, id="v2")]
)
def test_flagd_metadata_carries_the_cohort(
    node: tuple[str, Served], messages: Any, stub: Any
) -> None:
    """flagd's ResolveString (v1 and v2) and ResolveAll (v1) carry the same metadata."""
    platform, served = node
    with grpc.insecure_channel(served.address) as channel:
        service = stub.ServiceStub(channel)
        answer = service.ResolveString(messages.ResolveStringRequest(flag_key=FEATURE), timeout=30)
        check_metadata(dict(answer.metadata), platform)
        if messages is f1:
            every = service.ResolveAll(f1.ResolveAllRequest(), timeout=30)
            check_metadata(dict(every.flags[FEATURE].metadata), platform)


def test_metrics_show_the_cohort_and_pass_promtool(node: tuple[str, Served]) -> None:
    """kernelpolicy_rollout_cohort is 1 for the node's cohort and 0 for the rest of the closed
    set; the percent and the bucket are series of their own; promtool accepts the output."""
    platform, served = node
    reply = call(served.url, "GET", "/metrics")
    assert reply.status == 200
    text = reply.body.decode()
    found = samples(text)
    for impl, (cohort, bucket) in expected(platform).items():
        for value in Cohort:
            key = ("kernelpolicy_rollout_cohort",
                   (("cohort", value.value), ("feature", FEATURE), ("impl", impl)))  # fmt: skip
            assert found[key] == (1.0 if value.value == cohort else 0.0), (impl, value)
        labels = (("feature", FEATURE), ("impl", impl))
        assert found[("kernelpolicy_rollout_percent", labels)] == PERCENTS[impl]
        got = found.get(("kernelpolicy_rollout_bucket_index", labels))
        assert got == (None if bucket is None else float(bucket)), impl
    assert not any(name.startswith("kernelpolicy_rollout") and ("impl", "plain") in labels
                   for name, labels in found)  # fmt: skip
    promtool_check_metrics(text)
