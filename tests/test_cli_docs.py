"""docs/cli.md states the exit status of each example; each runs and exits with that status.

The output of the same examples is checked by tests/test_docs.py (every transcript of docs/).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.docs_helpers import gen_docs
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "cli.md"
_EXAMPLE = re.compile(r"<!-- exit: (\d+) -->\n```text\n\$ ([^\n]+)\n")
EXAMPLES = [
    pytest.param(command, int(code), id=command[:70])
    for code, command in _EXAMPLE.findall(PAGE.read_text())
]


def test_every_example_states_its_exit_status() -> None:
    """Every transcript on the page carries an exit status, and there are some."""
    transcripts = list(gen_docs.blocks(PAGE))
    assert len(EXAMPLES) == len(transcripts) >= 10


@pytest.mark.parametrize(("command", "code"), EXAMPLES)
def test_documented_exit_status(command: str, code: int) -> None:
    """The command exits with the status the page says, in the environment transcripts use."""
    with tempfile.TemporaryDirectory() as home:
        argv, env = gen_docs._split(command, gen_docs._environment(Path(home)))
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
        )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    if code == 2:
        assert done.stderr.strip().splitlines()[-1].startswith("kernelpolicy: error: ")
        assert done.stdout == ""
