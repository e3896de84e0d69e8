"""End to end: real daemons serving one staged ``[[disable]]`` answer differently on two node
identities, one in the disable's cohort and one out, over gRPC, OFREP, /metrics and labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.server.client import connect
from kernelpolicy.testing.daemon import running_daemon
from tests.http_helpers import call, post
from tests.rollout_helpers import FEATURE, FEATURE_TEXT, INSIDE, OUTSIDE, disable, node


@pytest.mark.parametrize(
    ("machine_id", "impl", "cohort"),
    [
        pytest.param(INSIDE, "plain", "in", id="in-the-cohort"),
        pytest.param(OUTSIDE, "fast", "out", id="out-of-the-cohort"),
    ],
)
def test_a_staged_disable_served(tmp_path: Path, machine_id: str, impl: str, cohort: str) -> None:
    """The node in the 50% cohort is switched off the candidate, the other runs it; each
    answer says where the node stands in the disable."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "demo.toml").write_text(FEATURE_TEXT)
    (policies / "ops.toml").write_text(
        'schema = "kernelpolicy.policy/v1"\n' + disable("{ percent = 50 }")
    )
    labels = tmp_path / "labels"
    labels.mkdir()
    with running_daemon(
        node(machine_id), [policies], watch=False, http="127.0.0.1:0", labels_dir=labels
    ) as running:
        address, url = running.daemon.bound[0], running.daemon.fleet.url
        with connect(address, timeout=10.0) as client:
            decision = client.resolve().decisions[FEATURE]
        assert decision.impl == impl
        said = "in the 50% cohort of this disable" if cohort == "in" else "does not apply here"
        assert any(said in line for line in decision.reasons), decision.reasons
        answer = post(url, f"/ofrep/v1/evaluate/flags/{FEATURE}", {"context": {}}).json()
        assert answer["value"] == impl
        assert answer["metadata"]["disable.fast.cohort"] == cohort
        metrics = call(url, "GET", "/metrics").body.decode()
        line = (
            f'kernelpolicy_disable_rollout_cohort{{cohort="{cohort}",feature="{FEATURE}",'
            'impl="fast"} 1.0'
        )
        assert line in metrics
    written = "".join(p.read_text() for p in labels.iterdir())
    assert f"/disable.{FEATURE}.fast={cohort}\n" in written
    assert f"/impl.{FEATURE}={impl}\n" in written
