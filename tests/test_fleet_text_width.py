"""diff's text keeps node names within 80 columns: a list of names that would carry its line past
them (a class's head, a rollout step's joining nodes, the daemons of one host) goes on the lines
below it, one name a line, the first three, then how many more. With Kubernetes node names of a
managed pool (55-61 characters) a step's line was 208 columns wide. A class's summary (the
hardware and versions) and a daemon's reload error are not names, and keep their length."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.diff_cmd import WIDTH, named_lines
from tests.helpers import FIXTURES, ROOT

OLD, NEW = ROOT / "docs/rollout/step-0", ROOT / "docs/rollout/step-50"
POOL = "gke-inference-pool-{}-us-central1-a-7f9c8d6b5-xk2lp"  # a GKE node's name, 55+ chars


@pytest.mark.parametrize(
    ("head", "names", "opening", "closing", "expected"),
    [
        pytest.param("  50%: 2 nodes; 2 join", ["b200", "h200"], ": ", "  (the policy)",
                     ["  50%: 2 nodes; 2 join: b200 and h200  (the policy)"], id="fits: inline"),
        pytest.param("  gpu-7: 2 daemons", ["unix:/a.sock", "unix:/b.sock"], " (", ")",
                     ["  gpu-7: 2 daemons (unix:/a.sock and unix:/b.sock)"], id="fits: brackets"),
        pytest.param("  50%: 2 nodes; 2 join", [POOL.format("b200"), POOL.format("h200")], ": ",
                     "  (the policy)",
                     ["  50%: 2 nodes; 2 join (the policy):", "      " + POOL.format("b200"),
                      "      " + POOL.format("h200")], id="too-long: the names below"),
        pytest.param("  gpu-7: 2 daemons", ["unix:/" + "d" * 40, "unix:/" + "e" * 40], " (", ")",
                     ["  gpu-7: 2 daemons:", "      unix:/" + "d" * 40, "      unix:/" + "e" * 40],
                     id="too-long: a closing bracket is dropped"),
        pytest.param("  100%: 5 nodes; 5 join", [f"{'n' * 20}{i}" for i in range(5)], ": ", "",
                     ["  100%: 5 nodes; 5 join:", *(f"      {'n' * 20}{i}" for i in range(3)),
                      "      and 2 more"], id="too-long: three, then how many more"),
        pytest.param("x", ["n" * 100], " ", "", ["x:", "    " + "n" * 100],
                     id="a name longer than a line: whole"),
    ],
)  # fmt: skip
def test_named_lines(
    head: str, names: list[str], opening: str, closing: str, expected: list[str]
) -> None:
    """Inline where it fits WIDTH, else the names below, indented past the line's indent."""
    assert named_lines(head, names, opening, closing) == expected


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The fixtures as snapshots named as a managed pool's nodes, and those names."""
    root = tmp_path_factory.mktemp("pool")
    names = []
    for path in sorted(FIXTURES.glob("*.json")):
        names.append(POOL.format(path.stem))
        shutil.copy(path, root / f"{names[-1]}.json")
    return root, names


def test_long_node_names_stay_within_80_columns(
    pool: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every line of step-0 -> step-50 that names a node fits WIDTH; each changed class's
    nodes and each step's joining nodes are still named."""
    root, names = pool
    argv = ["diff", "--policies", f"+{OLD}", "--against", f"+{NEW}", "--steps", "10,50,100"]
    assert main([*argv, "--platforms", str(root)]) == 0
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if any(name in line for name in names)]
    assert named
    assert [line for line in named if len(line) > WIDTH] == []
    assert f"\n  1 node; changes on {POOL.format('b200')}\n" in out
    assert "\n  50%: 2 nodes; 2 join (the policy):\n" in out
    assert f"\n      {POOL.format('h200')}\n" in out
