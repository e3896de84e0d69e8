"""The policy digest: which policy files a node runs, equal on every node that runs the same
files whatever its hardware (the fingerprint is not), shown by explain (header and --json),
status (text and --json), the ``policy.digest`` label and ``kernelpolicy_policy_info``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kernelpolicy.api import resolve
from kernelpolicy.cli import main
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.labels import PREFIX, node_labels
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.server.metrics import ResolutionCollector
from kernelpolicy.testing.daemon import running_daemon
from tests import hostile_daemon as shared
from tests.helpers import ROOT, fixture, promtool_check_metrics
from tests.hostile_daemon import FakeDaemon, Honest, serving
from tests.metrics_helpers import samples

honest = shared.honest  # the shared fixture, found here by its name

NODES = ["h100-sxm", "mi300x", "cpu"]  # an NVIDIA, an AMD and a GPU-less node
HEADER = re.compile(r"^fingerprint (\w+)  \(.*; policy digest (\w+), (\d+) policy files\)$")


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The same policy files mounted at a different path on each node (a ConfigMap's)."""
    made = []
    for node in NODES:
        target = tmp_path_factory.mktemp(node) / "policies.d"
        shutil.copytree(ROOT / "policies", target)
        made.append(target)
    return made


def _resolutions(copies: list[Path]) -> list[Resolution]:
    return [
        resolve(fixture(node), env={}, policies=[path])
        for node, path in zip(NODES, copies, strict=True)
    ]


def _info(resolution: Resolution) -> str:
    registry = CollectorRegistry()
    registry.register(ResolutionCollector(lambda: resolution))
    return generate_latest(registry).decode()


def test_same_files_on_different_hardware_show_one_digest(copies: list[Path]) -> None:
    """Nodes of different vendors on the same files (at different paths): different
    fingerprints, one digest, shown alike by the label, the metric and explain --json."""
    resolutions = _resolutions(copies)
    digests = {r.policies.digest for r in resolutions}
    assert len(digests) == 1
    assert len({r.fingerprint for r in resolutions}) == len(NODES)
    (digest,) = digests
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    for resolution in resolutions:
        assert resolution.to_dict()["policy_digest"] == digest
        assert node_labels(resolution)[f"{PREFIX}/policy.digest"] == digest
        assert node_labels(resolution)[f"{PREFIX}/policy.fingerprint"] == resolution.fingerprint
        found = samples(_info(resolution))
        assert found[("kernelpolicy_policy_info", (("digest", digest),))] == 1.0


def test_other_files_show_another_digest(copies: list[Path], tmp_path: Path) -> None:
    """One line added to one file of the set changes the digest (on the same hardware)."""
    changed = tmp_path / "policies.d"
    shutil.copytree(copies[0], changed)
    (changed / "90-ops.toml").write_text(
        'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "mhc"\nimpl = "aiter"\n'
        'reason = "r"\n'
    )
    before = resolve(fixture("h100-sxm"), env={}, policies=[copies[0]])
    after = resolve(fixture("h100-sxm"), env={}, policies=[changed])
    assert before.policies.digest != after.policies.digest


@pytest.mark.parametrize("node", NODES)
def test_explain_shows_the_digest(
    copies: list[Path], capsys: pytest.CaptureFixture[str], node: str
) -> None:
    """explain's header names the digest before the file count; --json carries it."""
    snapshot = str(fixture_dir() / f"platforms/{node}.json")
    argv = ["explain", "--platform", snapshot, "--policies", str(copies[0])]
    assert main(argv) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    matched = HEADER.match(header)
    assert matched is not None, header
    assert matched.group(1) == document["fingerprint"]
    assert matched.group(2) == document["policy_digest"]
    expected = resolve(fixture(node), env={}, policies=[copies[1]]).policies.digest
    assert document["policy_digest"] == expected


def test_metric_passes_promtool(copies: list[Path]) -> None:
    """The new info metric is valid exposition, lint included."""
    promtool_check_metrics(_info(_resolutions(copies)[0]))


def test_status_shows_the_daemons_digest(
    copies: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """status names the digest of the files the daemon serves, in text and --json, and
    explain --address shows the same one."""
    local = resolve(fixture("mi300x"), env={}, policies=[copies[2]])
    with running_daemon(fixture("h100-sxm"), [copies[0]], watch=False) as running:
        address = running.daemon.bound[0]
        assert main(["status", "--address", address]) == 0
        text = capsys.readouterr().out
        assert main(["status", "--address", address, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert main(["explain", "--address", address, "--json", "mhc"]) == 0
        explained = json.loads(capsys.readouterr().out)
    digest = local.policies.digest
    assert re.search(f": SERVING, revision 1, fingerprint \\w+, policy digest {digest}\n", text)
    assert report["policy_digest"] == digest
    assert explained["policy_digest"] == digest


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_status_of_a_daemon_that_sends_no_digest(
    capsys: pytest.CaptureFixture[str], honest: Honest, as_json: bool
) -> None:
    """A daemon of before the digest (its Explain document has none) is answered, the digest
    unknown; one that sends a digest that is not a string is refused, as any bad shape."""
    document = honest.resolution.to_dict()
    document.pop("policy_digest")
    flag = ["--json"] if as_json else []
    with serving(FakeDaemon(explain=honest.explain_response(json=json.dumps(document)))) as at:
        assert main(["status", "--address", at, *flag]) == 0
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out)["policy_digest"] is None
    else:
        assert out.splitlines()[0].endswith(", policy digest unknown")
    document["policy_digest"] = 7
    with serving(FakeDaemon(explain=honest.explain_response(json=json.dumps(document)))) as at:
        assert main(["status", "--address", at, *flag]) == 2
    captured = capsys.readouterr()
    assert "policy_digest: expected a string, got a number" in captured.out + captured.err
