"""No test module imports another: what tests share lives in tests/*_helpers.py (or helpers.py),
so running one test file never collects, or depends on, another's tests."""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

TESTS = sorted((ROOT / "tests").glob("test_*.py"))


def _imported(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        pytest.param("from tests.test_x import y\n", {"tests.test_x"}, id="from-import"),
        pytest.param("import tests.test_x\n", {"tests.test_x"}, id="import"),
        pytest.param("def f():\n    from tests.test_x import y\n", {"tests.test_x"}, id="inside"),
        pytest.param("from tests.x_helpers import y\n", {"tests.x_helpers"}, id="a-helper"),
    ],
)  # fmt: skip
def test_imports_are_read(source: str, found: set[str]) -> None:
    assert _imported(source) == found


def test_no_test_module_imports_another() -> None:
    importing = {
        path.name: sorted(m for m in _imported(path.read_text()) if m.startswith("tests.test_"))
        for path in TESTS
    }
    assert {name: found for name, found in importing.items() if found} == {}
