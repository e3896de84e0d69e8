"""What counts as a release reading a variable (scripts/engine_reads.py, which makes the knob
tables' ``read``): code that uses it, not a comment, a docstring, a message or a value stored
where nothing uses it. Each case is a small release tree written as real files."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFINITION = "pkg/envs.py"


def reads_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_reads", ROOT / "scripts/engine_reads.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# name -> (the release's other module, whether VLLM_X counts as read there)
CASES = {
    "a condition": ("from pkg import envs\nif envs.VLLM_X:\n    run()\n", True),
    "a call's argument": ('import os\nuse(os.getenv("VLLM_X"))\n', True),
    "os.environ read": ('import os\nflag = os.environ["VLLM_X"] == "1"\nprint(flag)\n', True),
    "imported by name": ("from pkg.envs import VLLM_X\nwhile VLLM_X:\n    pass\n", True),
    "a comment": ("# set VLLM_X=1 to turn it on\nx = 1\n", False),
    "a module docstring": ('"""VLLM_X"""\n', False),
    "a function docstring": ('def f():\n    """VLLM_X"""\n    return 1\n', False),
    "a message naming it": ('print("set VLLM_X to turn it on")\n', False),
    "written for a child": ('import os\nos.environ["VLLM_X"] = "1"\n', False),
    "deleted": ('import os\ndel os.environ["VLLM_X"]\n', False),
    "stored, never used": ("from pkg import envs\n_FLAG = envs.VLLM_X\n", False),
    "stored, then used": ("from pkg import envs\n_FLAG = envs.VLLM_X\nif _FLAG:\n    go()\n", True),
    "class attribute behind an uncalled method": (
        """
        from pkg import envs
        class Ops:
            _ON = envs.VLLM_X
            @classmethod
            def refresh(cls):
                cls._ON = envs.VLLM_X
            @classmethod
            def is_on(cls):
                return cls._ON
        """,
        False,
    ),
    "class attribute behind a called method": (
        """
        from pkg import envs
        class Ops:
            _ON = envs.VLLM_X
            @classmethod
            def is_on(cls):
                return cls._AITER and cls._ON
        if Ops.is_on():
            go()
        """,
        True,
    ),
    "a property": (
        """
        from pkg import envs
        class Config:
            @property
            def fast(self):
                return envs.VLLM_X
        def pick(config):
            return "fast" if config.fast else "slow"
        print(pick(None))
        """,
        True,
    ),
    "a lambda stored and called": (
        "from pkg import envs\nread = lambda: envs.VLLM_X\nif read():\n    go()\n",
        True,
    ),
    "a lambda stored, never called": ("from pkg import envs\nread = lambda: envs.VLLM_X\n", False),
    "a bare expression": ("from pkg import envs\nenvs.VLLM_X\n", False),
    "a store feeding a store feeding a use": (
        "from pkg import envs\na = envs.VLLM_X\nb = not a\nassert b\n",
        True,
    ),
    "imported under another name, then used": (
        "from pkg.envs import VLLM_X as on\nif on:\n    go()\n",
        True,
    ),
    "imported under another name, never used": ("from pkg.envs import VLLM_X as on\n", False),
    "a function returning it, imported under another name and called": (
        """
        from pkg import envs
        def enabled():
            return envs.VLLM_X
        from pkg.user import enabled as on
        if on():
            go()
        """,
        True,
    ),
    "a cycle of stores, never used": (
        "from pkg import envs\na = envs.VLLM_X\nb = a\na = b\n",
        False,
    ),
}


@pytest.mark.parametrize(("text", "read"), list(CASES.values()), ids=list(CASES))
def test_what_counts_as_a_read(tmp_path: Path, text: str, read: bool) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "envs.py").write_text('VLLM_X = bool(os.getenv("VLLM_X"))\n')
    (package / "user.py").write_text(textwrap.dedent(text))
    reads = reads_module()
    source = reads.source_of(tmp_path, sorted(package.glob("*.py")))
    assert source.read_in("VLLM_X", DEFINITION) == (["pkg/user.py"] if read else [])


def test_the_definition_itself_is_not_a_read(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "envs.py").write_text('import os\nif os.getenv("VLLM_X"):\n    pass\n')
    reads = reads_module()
    source = reads.source_of(tmp_path, [package / "envs.py"])
    assert source.read_in("VLLM_X", DEFINITION) == []
    assert source.read_in("VLLM_X", "another.py") == [DEFINITION]


def test_a_file_this_python_cannot_parse_is_skipped(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "broken.py").write_text("if VLLM_X\n")
    (package / "user.py").write_text("from pkg import envs\nif envs.VLLM_X:\n    pass\n")
    reads = reads_module()
    source = reads.source_of(tmp_path, sorted(package.glob("*.py")))
    assert source.read_in("VLLM_X", DEFINITION) == ["pkg/user.py"]
