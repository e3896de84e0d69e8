"""A hostile daemon (anyone who bound the TCP port first) against ``connect().resolve()``: the
inputs it reports are rebuilt, and whatever no daemon sends, or what it says, is one clear
DaemonError naming it, never a crash and never a control character it sent shown raw; entries
in policies it sent over plain TCP are not imported. The daemon: tests/hostile_daemon.py."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy import connect
from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_PLATFORM_FILE_BYTES
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server.convert import inputs_message, rebuild, resolve_response
from tests import hostile_daemon as shared
from tests.hostile_daemon import CLEAR, UP_ERASE, FakeDaemon, Honest, serving, shown_safely

honest = shared.honest  # the shared fixture, found here by its name


def _set(name: str, value: str) -> Callable[[pb.Inputs], None]:
    return lambda inputs: setattr(inputs, name, value)


def _snapshot_with(**extra: Any) -> Callable[[pb.Inputs], None]:
    def change(inputs: pb.Inputs) -> None:
        inputs.platform_json = json.dumps({**json.loads(inputs.platform_json), **extra})

    return change


def _policy(text: str, name: str = "99-hostile.toml") -> Callable[[pb.Inputs], None]:
    return lambda inputs: inputs.policies.add(name=name, text=text)


def _many_bad_policies(inputs: pb.Inputs) -> None:
    for index in range(100):
        inputs.policies.add(name=f"{index}{CLEAR}.toml", text=f"{CLEAR} = {index}\n")


HOSTILE_INPUTS = [
    pytest.param(_set("platform_json", "[" * 100_000),
                 "inputs.platform_json: nested", id="snapshot-100000-brackets"),
    pytest.param(_snapshot_with(x_note=float("nan")), "NaN is not a JSON number",
                 id="snapshot-nan"),
    pytest.param(_set("platform_json", '{"schema": '), "inputs.platform_json:1:12: not JSON",
                 id="snapshot-not-json"),
    pytest.param(_set("platform_json", "1" * 5000), "not acceptable JSON (Exceeds the limit",
                 id="snapshot-5000-digit-number"),
    pytest.param(_set("platform_json", "[]"), "expected a JSON object, got []",
                 id="snapshot-not-an-object"),
    pytest.param(_snapshot_with(vendor=CLEAR), "vendor: expected one of", id="snapshot-escapes"),
    pytest.param(_set("evidence_json", "[" * 100_000),
                 "evidence from the daemon: nested", id="evidence-100000-brackets"),
    pytest.param(_set("evidence_json", '{"key": NaN}'), "NaN is not a JSON number",
                 id="evidence-nan"),
    pytest.param(_set("evidence_json", json.dumps({"key": CLEAR})), "evidence from the daemon",
                 id="evidence-not-evidence"),
    pytest.param(_policy("a = " + "[" * 100_000), "inputs.policies: 99-hostile.toml: nested",
                 id="policy-100000-brackets"),
    pytest.param(_policy(f"{UP_ERASE} = 1\n", name=f"{CLEAR}.toml"),
                 "inputs.policies: \\x1b[2J.toml", id="policy-escapes"),
    pytest.param(_many_bad_policies, "...(and ", id="policy-100-bad-documents"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "said"), HOSTILE_INPUTS)
def test_resolve_refuses_hostile_inputs(
    honest: Honest, change: Callable[[pb.Inputs], None], said: str
) -> None:
    """Inputs no daemon sends: one DaemonError naming the daemon and what was wrong, cut and
    escaped (never a RecursionError, a ValueError or a loader's error without the address)."""
    daemon = FakeDaemon(resolve=honest.resolve_response(change))
    with (
        serving(daemon) as address,
        connect(address) as client,
        pytest.raises(DaemonError) as raised,
    ):
        client.resolve()
    message = str(raised.value)
    assert message.startswith(f"the daemon at {address} answered inputs this client cannot use")
    assert said in message
    assert shown_safely(message)
    assert message.count("\n") <= 21
    assert len(message) < 30_000


def _lying_fingerprint(response: pb.ResolveResponse) -> None:
    response.fingerprint = (CLEAR + UP_ERASE) * 100_000


HOSTILE_ANSWERS = [
    pytest.param(FakeDaemon(abort=f"boom{CLEAR}" + "x" * 4_000),
                 "Resolve failed: INTERNAL: boom\\x1b[2Jxxx", id="status-details-escapes"),
    pytest.param(None, "the daemon reported '\\x1b[2J\\x1b[1A\\x1b[2K", id="fingerprint-escapes"),
]  # fmt: skip


@pytest.mark.parametrize(("daemon", "said"), HOSTILE_ANSWERS)
def test_resolve_shows_what_a_daemon_said_escaped(
    honest: Honest, daemon: FakeDaemon | None, said: str
) -> None:
    """Text of the daemon's that goes into the client's error (a failed call's details, the
    fingerprint it claims) is cut and escaped, and the error names the daemon."""
    if daemon is None:
        response = honest.resolve_response()
        _lying_fingerprint(response)
        daemon = FakeDaemon(resolve=response)
    with (
        serving(daemon) as address,
        connect(address) as client,
        pytest.raises(DaemonError) as raised,
    ):
        client.resolve()
    message = str(raised.value)
    assert message.startswith(address)
    assert said in message
    assert shown_safely(message)
    assert len(message) < 5_000


def test_rebuild_refuses_an_oversized_snapshot(honest: Honest) -> None:
    """A snapshot over MAX_PLATFORM_FILE_BYTES is refused as a file of that size would be (it
    can reach rebuild() only where a channel takes messages over gRPC's 4 MiB)."""
    inputs = inputs_message(honest.resolution, honest.sources, None)
    inputs.platform_json += " " * MAX_PLATFORM_FILE_BYTES
    with pytest.raises(DaemonError, match="over MAX_PLATFORM_FILE_BYTES"):
        rebuild(inputs, daemon="127.0.0.1:1")


def _odd_env(inputs: pb.Inputs) -> None:
    inputs.env["VLLM_USE_FLASHINFER_SAMPLER"] = CLEAR * 10_000
    inputs.env["KERNELPOLICY_FORCE_MHC"] = UP_ERASE


def _odd_overrides(inputs: pb.Inputs) -> None:
    inputs.overrides.update({"no.such.feature": CLEAR, "topk_per_row": "x" * 100_000})


def _odd_halts(inputs: pb.Inputs) -> None:
    inputs.halted.update({"no/such": CLEAR, "mhc/torch": UP_ERASE * 10_000, "": ""})


ODD_BUT_CONSISTENT = [
    pytest.param(_odd_env, id="env-escapes-and-100000-chars"),
    pytest.param(_odd_overrides, id="overrides-unknown-and-huge"),
    pytest.param(_odd_halts, id="halts-unknown-and-huge"),
]


@pytest.mark.parametrize("change", ODD_BUT_CONSISTENT)
def test_resolve_takes_odd_maps_it_can_rebuild(
    honest: Honest, change: Callable[[pb.Inputs], None]
) -> None:
    """env, overrides and halted are maps of strings the engine carries as its own: whatever
    they hold, a daemon that reports the fingerprint of what it sent gets a Resolution."""
    inputs = inputs_message(honest.resolution, honest.sources, None)
    change(inputs)
    expected = rebuild(inputs)
    response = resolve_response(expected, revision=1, inputs=inputs)
    with serving(FakeDaemon(resolve=response)) as address, connect(address) as client:
        assert client.resolve().fingerprint == expected.fingerprint


ENTRY_POLICY = """schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "an implementation of the policy's own, then kernelpolicy's"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "mine"
entry = "json:dumps"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""


@pytest.mark.parametrize(
    ("over", "loaded"),
    [pytest.param("tcp", "torch", id="plain-tcp: not imported, the fallback serves"),
     pytest.param("unix", "mine", id="unix-socket: the daemon is checked, imported")],
)  # fmt: skip
def test_entries_from_a_plain_tcp_daemon_are_not_imported(
    tmp_path: Path, over: str, loaded: str
) -> None:
    """An `entry` names code to import: from policies a daemon sent over TCP without TLS (any
    local user who binds the port first could have written them) it is not imported, and the
    decision falls back as for an implementation that cannot load, saying why."""
    from kernelpolicy.server.client import connect
    from kernelpolicy.testing.daemon import running_daemon
    from tests.helpers import fixture

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "greedy.toml").write_text(ENTRY_POLICY)
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    listen = ("127.0.0.1:0", f"unix:{directory}/kp.sock")
    with running_daemon(fixture("cpu"), [tmp_path / "p"], watch=False, listen=listen) as running:
        address = running.daemon.bound[0] if over == "tcp" else running.daemon.bound[1]
        with connect(address) as client:
            resolution = client.resolve()
    assert resolution.decision("sampler.greedy").impl == "mine"
    function = resolution.impl("sampler.greedy")
    assert resolution.decision("sampler.greedy").impl == loaded
    if loaded == "mine":
        assert function("x") == '"x"'  # the policy's json.dumps, imported
    else:
        warnings = " ".join(resolution.decision("sampler.greedy").warnings)
        assert "sent over TCP without TLS" in warnings
