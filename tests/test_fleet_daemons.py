"""kernelpolicy diff --daemons: live daemons as the inventory, each one's platform snapshot read
over gRPC; two real daemons on unix sockets serving different fixtures, one address where none
answers (reported and counted), none answering (exit 2), and the address list's forms."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import InventoryError
from kernelpolicy.fleet import daemon_addresses
from tests.helpers import FIXTURES, ROOT
from tests.serve_process import serve

OLD, NEW = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"
PLATFORMS = ("h200", "h100-sxm")  # at 50%, the h200 node takes the candidate; h100-sxm does not


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    # Short paths: a unix socket's path holds at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def daemons(root: Path) -> Iterator[list[str]]:
    """Two ``kernelpolicy serve --platform`` processes, one per fixture of PLATFORMS."""
    with (
        serve(root / "a", FIXTURES / f"{PLATFORMS[0]}.json", [ROOT / "policies"]) as a,
        serve(root / "b", FIXTURES / f"{PLATFORMS[1]}.json", [ROOT / "policies"]) as b,
    ):
        yield [a.address, b.address]


def diff(capsys: pytest.CaptureFixture[str], *inventory: str) -> tuple[int, Any, str]:
    """``diff --json`` of step-0 -> step-50 over ``inventory``: status, document, stderr."""
    code = main(["diff", "--policies", f"+{OLD}", "--against", f"+{NEW}", "--json", *inventory])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else None, err


def _classes(document: Any) -> list[tuple[str, int, Any]]:
    return sorted((c["class"], c["nodes"], c["changes"]) for c in document["classes"])


def test_daemons_diff_as_their_snapshots_do(
    daemons: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over two daemons: the same classes, changes and counts as over their snapshot files."""
    code, live, err = diff(capsys, "--daemons", ",".join(daemons))
    assert code == 0, err
    for name in PLATFORMS:
        shutil.copy(FIXTURES / f"{name}.json", tmp_path / f"{name}.json")
    _, files, _ = diff(capsys, "--platforms", str(tmp_path))
    assert (live["nodes"], live["changed_nodes"]) == (2, 1)
    assert live["unreachable_daemons"] == []
    assert _classes(live) == _classes(files)
    assert live["changes"] == files["changes"]
    named = dict(zip(PLATFORMS, daemons, strict=True))  # each step's nodes, by address
    for step in files["rollouts"][0]["steps"]:  # (the directory's order is by file name)
        step["node_names"] = sorted(named[name] for name in step["node_names"])
    assert live["rollouts"] == files["rollouts"]
    (changed,) = [c for c in live["classes"] if c["changes"]]
    assert changed["example"] == daemons[0]  # nodes are named by their address
    assert [(c["kind"], c["name"], c["new"]) for c in changed["changes"]] == [
        ("decision", "fleet.example", "candidate")
    ]


def test_an_unreachable_daemon_is_named_and_counted(
    daemons: list[str], root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A socket where nothing listens is named on stderr, in --json and in the text; the rest
    is compared."""
    missing = f"unix:{root}/missing.sock"
    code, document, err = diff(capsys, "--daemons", f"{daemons[0]},{missing}")
    assert code == 0
    assert document["nodes"] == 1
    (why,) = document["unreachable_daemons"]
    assert missing in why
    assert "not answering" in why
    assert missing in err
    main(["diff", "--policies", f"+{OLD}", "--against", f"+{NEW}", "--daemons",
          f"{daemons[0]},{missing}"])  # fmt: skip
    text = capsys.readouterr().out
    assert text.startswith("2 daemons: 1 node in 1 class")
    assert "unreachable: 1 daemon, not counted" in text
    assert f"  {why}" in text


def test_a_daemon_that_never_answers_times_out(
    daemons: list[str], root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A socket that accepts and never speaks gRPC is given up on after --daemon-timeout."""
    path = root / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen(8)
        code, document, err = diff(
            capsys, "--daemons", f"unix:{path},{daemons[1]}", "--daemon-timeout", "0.5"
        )
    assert code == 0, err
    assert document["nodes"] == 1
    (why,) = document["unreachable_daemons"]
    assert why.startswith(f"unix:{path}: not answering")


def test_none_answering_is_exit_2(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a single answer there is nothing to compare: exit 2, every address named."""
    first, second = f"unix:{root}/none-1.sock", f"unix:{root}/none-2.sock"
    code, document, err = diff(capsys, "--daemons", f"{first},{second}")
    assert (code, document) == (2, None)
    assert "no daemon answered" in err
    assert first in err
    assert second in err


def test_addresses_from_a_file(
    daemons: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--daemons @FILE``: one address a line, comments and blank lines ignored."""
    listing = tmp_path / "daemons.txt"
    listing.write_text(f"# the nodes\n{daemons[0]}\n\n{daemons[1]}  # second\n")
    code, document, err = diff(capsys, "--daemons", f"@{listing}")
    assert code == 0, err
    assert (document["nodes"], document["changed_nodes"]) == (2, 1)


@pytest.mark.parametrize(
    ("text", "addresses"),
    [
        pytest.param("unix:/a.sock", ("unix:/a.sock",), id="one"),
        pytest.param("h1:50051, h2:50051,", ("h1:50051", "h2:50051"), id="spaces-trailing-comma"),
        pytest.param("h1:1,h1:1,h2:2", ("h1:1", "h2:2"), id="repeated-once"),
        pytest.param("", None, id="empty"),
        pytest.param(" , ", None, id="only-commas"),
        pytest.param("@/nonexistent/daemons.txt", None, id="missing-file"),
    ],
)  # fmt: skip
def test_daemon_addresses(text: str, addresses: tuple[str, ...] | None) -> None:
    """Comma-separated addresses in order, once each; none, or an unreadable file, is an
    InventoryError naming what was given."""
    if addresses is None:
        with pytest.raises(InventoryError):
            daemon_addresses(text)
    else:
        assert daemon_addresses(text) == addresses


def test_platforms_and_daemons_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    """One inventory at a time: argparse refuses both (exit 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(["diff", "--against", str(NEW), "--platforms", ".", "--daemons", "unix:/x"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


AS_SERVED = [
    pytest.param({}, {}, 1, id="nothing-set: the h200 node takes the candidate"),
    pytest.param({"KERNELPOLICY_FORCE_FLEET_EXAMPLE": "current"}, {}, 0,
                 id="a force in the daemon's environment"),
    pytest.param({}, {"fleet.example": "current"}, 0, id="a settings override"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "overrides", "changed"), AS_SERVED)
def test_daemons_are_diffed_as_they_resolve(
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    overrides: dict[str, str],
    changed: int,
) -> None:
    """A daemon's own environment and forces (``serve --env``, its settings) reach the
    snapshot ``diff --daemons`` reads, so the prediction is what the daemon will decide."""
    from kernelpolicy.platform.model import load_platform
    from kernelpolicy.testing.daemon import running_daemon

    platform = load_platform(FIXTURES / "h200.json")
    with running_daemon(platform, [ROOT / "policies", OLD], env, watch=False,
                        overrides=overrides) as running:  # fmt: skip
        code, document, err = diff(capsys, "--daemons", running.daemon.bound[0])
        with running_daemon(platform, [ROOT / "policies", NEW], env, watch=False,
                            overrides=overrides) as after:  # fmt: skip
            from kernelpolicy.server.client import connect

            with connect(after.daemon.bound[0]) as client:
                served = client.resolve().decision("fleet.example").impl
    assert code == 0, err
    assert document["changed_nodes"] == changed
    assert (served == "candidate") is (changed == 1)  # what the reloaded daemon decides


def test_the_served_snapshot_carries_the_daemons_values() -> None:
    """GetPlatform's env: the daemon's value of each variable its policies read (absent where
    the daemon has it unset, whatever the snapshot file said), other captured ones kept."""
    from kernelpolicy.platform.model import Platform
    from kernelpolicy.server.client import connect
    from kernelpolicy.testing.daemon import running_daemon

    snapshot = json.loads((FIXTURES / "h100-sxm.json").read_text())
    snapshot["env"] = {"VLLM_USE_FLASHINFER_SAMPLER": "1", "NCCL_DEBUG": "INFO"}
    platform = Platform.from_dict(snapshot)
    env = {"VLLM_ROCM_USE_AITER": "0", "UNREAD_BY_ANY_POLICY": "x"}
    with (
        running_daemon(platform, [ROOT / "policies"], env, watch=False) as running,
        connect(running.daemon.bound[0]) as client,
    ):
        served = json.loads(client.platform_json())
    assert served["env"] == {"VLLM_ROCM_USE_AITER": "0", "NCCL_DEBUG": "INFO"}
    assert set(served.pop("daemon")) == {"instance", "host"}  # tests/test_fleet_daemon_instances
    assert {**served, "env": snapshot["env"]} == snapshot  # nothing else changed
