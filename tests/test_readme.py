"""The README's examples run as written."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_example_runs(index: int) -> None:
    """Each ```python block of the README runs; >>> blocks must print what they show."""
    block = BLOCKS[index]
    if block.lstrip().startswith(">>>"):
        parser = doctest.DocTestParser()
        test = parser.get_doctest(block, {}, f"README[{index}]", "README.md", 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0
    else:
        # A fresh interpreter per example: some import the OpenFeature flagd provider, whose
        # protobuf messages may not share a process with the daemon's (see the README).
        import subprocess
        import sys

        result = subprocess.run(
            [sys.executable, "-c", block], check=False, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
