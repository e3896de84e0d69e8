"""explain --address: what a running daemon decides for its node, shown as explain shows a
local answer (the same document and fingerprint), with where each value came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.cli import main
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

pytestmark = pytest.mark.xdist_group("explain-daemon")

DAEMON_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "KERNELPOLICY_FORCE_MHC": "torch"}


def test_explain_the_daemons_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """Its decisions and fingerprint are the daemon's (this shell's environment plays no part),
    each value named as the daemon's own; --json is the document explain prints locally."""
    platform = fixture("h100-sxm")
    local = resolve(platform, {**DAEMON_ENV, "KERNELPOLICY_LOG_FORMAT": "off"})
    with running_daemon(platform, [ROOT / "policies"], DAEMON_ENV, watch=False,
                        overrides={"topk_per_row": "torch"}) as running:  # fmt: skip
        address = running.daemon.bound[0]
        assert main(["explain", "--address", address]) == 0
        text = capsys.readouterr().out
        assert main(["explain", "--address", address, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
    assert "switch: VLLM_USE_FLASHINFER_SAMPLER=0 in the daemon's environment: off" in text
    assert "force: KERNELPOLICY_FORCE_MHC=torch in the daemon's environment" in text
    assert (
        document["decisions"]["sampler.top_k_top_p"]["impl"]
        == local.decision("sampler.top_k_top_p").impl
    )
    sources = {s["variable"]: s for s in document["decisions"]["topk_per_row"]["sources"]}
    assert sources["KERNELPOLICY_OVERRIDES"]["from"] == "override"
    assert sources["KERNELPOLICY_OVERRIDES"]["set_in"] == "daemon"
    assert set(document) == {
        "fingerprint",
        "policy_digest",
        "decisions",
        "engines",
        "revision",
        "policy_error",
    }


MISUSES = [
    pytest.param(["--address", "127.0.0.1:9", "--platform", "x.json"],
                 "--address with --platform: the daemon answers with its own snapshot",
                 id="with-platform"),
    pytest.param(["--address", "127.0.0.1:9", "--env", "A=1"], "--address with --env",
                 id="with-env"),
    pytest.param(["--tls-ca", "ca.pem"], "say how to reach --address; give --address too",
                 id="tls-without-address"),
    pytest.param(["--address", "bogus"], "--address 'bogus': no HOST:PORT", id="bad-address"),
    pytest.param(["--address", "127.0.0.1:1"], "127.0.0.1:1: not answering", id="nothing-there"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), MISUSES)
def test_explain_address_misuse(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["explain", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err


HOSTILE = {
    "policy": ("reason \x1b[1A\x1b[2K hidden", {}, {}),
    "halt": (None, {"sampler.top_k_top_p/flashinfer": "boom \x1b[2J cleared"}, {}),
    "env": (None, {}, {"KERNELPOLICY_FORCE_MHC": "\x1b[31mred"}),
}


@pytest.mark.parametrize(("reason", "halts", "env"), HOSTILE.values(), ids=list(HOSTILE))
def test_a_daemons_text_cannot_drive_the_terminal(
    capsys: pytest.CaptureFixture[str],
    reason: str | None,
    halts: dict[str, str],
    env: dict[str, str],
) -> None:
    """Escape sequences a (fake) daemon puts in its policy texts, halt reasons or environment
    reach the table shown, never sent: `\\x1b[2J` is printed as those characters."""
    from kernelpolicy.engine import resolve_policies
    from kernelpolicy.policy.loader import load_policy_sources
    from kernelpolicy.server.convert import inputs_message, resolve_response
    from tests.hostile_daemon import FakeDaemon, serving

    sources = [(str(p), p.read_text()) for p in sorted((ROOT / "policies").glob("*.toml"))]
    if reason is not None:
        sources.append(("99-hostile.toml", _policy_with_issue(reason)))
    resolution = resolve_policies(fixture("h100-sxm"), env, load_policy_sources(sources),
                                  halts=halts)  # fmt: skip
    inputs = inputs_message(resolution, sources, None)
    answer = resolve_response(resolution, revision=1, inputs=inputs)
    with serving(FakeDaemon(resolve=answer)) as address:
        main(["explain", "--address", address])
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\\x1b[" in out


def _policy_with_issue(reason: str) -> str:
    escaped = reason.replace("\x1b", "\\u001b")
    return f"""schema = "kernelpolicy.policy/v1"
[features."demo"]
description = "demo"
fallback = "torch"
[[features."demo".candidates]]
impl = "fast"
entry = "json:dumps"
[[features."demo".candidates.known_issues]]
reason = "{escaped}"
reference = "r"
[[features."demo".candidates]]
impl = "torch"
entry = "json:loads"
"""


INCIDENT = """schema = "kernelpolicy.policy/v1"
[[disable]]
feature = "sampler.greedy"
impl = "aiter"
reason = "incident 7"
"""


def test_a_daemons_policy_file_is_named_by_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A [[disable]]'s file is named by the path the daemon read (as a local explain and
    status name it), where --address named its base name alone (first-day review, finding 13);
    the fingerprint is still the daemon's."""
    directory = tmp_path / "pol"
    directory.mkdir()
    (directory / "incident.toml").write_text(INCIDENT)
    incident = directory / "incident.toml"
    env = {"SGLANG_USE_AITER": "1"}  # the disable is then the one reason aiter is rejected
    with running_daemon(fixture("mi300x"), [ROOT / "policies", directory], env,
                        watch=False) as running:  # fmt: skip
        address = running.daemon.bound[0]
        assert main(["explain", "--address", address, "sampler.greedy", "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert main(["explain", "--address", address, "sampler.greedy"]) == 0
        text = capsys.readouterr().out
        fingerprint = running.daemon.state.snapshot.resolution.fingerprint
    assert document["fingerprint"] == fingerprint
    assert f"disabled by policy ({incident}:2)" in text
    assert f"hint: remove the [[disable]] entry in {incident}" in text
