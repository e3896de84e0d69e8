"""docs/design.md's "Caches" table and the package's caches are the same set: every module its
owner column names exists, and every module of kernelpolicy that keeps a cache is named there.
A module keeps a cache when its file's name says so (``cache``, ``memo``), or it defines a class
named ``*Cache`` or a module-level ``*CACHE*`` value that is no constant (a limit is one)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernelpolicy"
DESIGN = ROOT / "docs/design.md"

_TICKED = re.compile(r"`(kernelpolicy/[\w/.]+\.py)`")
COLUMNS = ["what it keeps", "owner module", "key", "invalidation", "bound", "trust rule"]


def _table() -> list[list[str]]:
    """The cells of each row of the Caches section's table, its header first."""
    text = DESIGN.read_text()
    start = text.index("## Caches\n")
    end = text.find("\n## ", start + 1)
    lines = text[start:end].splitlines()
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in lines
        if line.startswith("|") and not line.startswith("|---")
    ]


def _owners() -> set[str]:
    """The modules the owner column names, relative to the repository."""
    return {path for row in _table()[1:] for path in _TICKED.findall(row[1])}


def _keeps_a_cache(path: Path) -> bool:
    if "cache" in path.stem or "memo" in path.stem:
        return True
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Cache"):
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            constant = isinstance(node.value, ast.Constant | ast.BinOp)
            if not constant and any("CACHE" in n and "LOCK" not in n for n in names):
                return True
    return False


@functools.cache
def _cache_modules() -> frozenset[str]:
    return frozenset(
        path.relative_to(ROOT).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_generated" not in path.parts and _keeps_a_cache(path)
    )


def test_the_table_has_its_columns_and_a_cell_in_each() -> None:
    """Key, owner, invalidation, bound and trust rule, for every row."""
    header, *rows = _table()
    assert header == COLUMNS
    assert rows
    for row in rows:
        assert len(row) == len(COLUMNS), row[0]
        assert all(row), row[0]
        assert _TICKED.search(row[1]), row[0]


def test_every_owner_module_named_exists() -> None:
    missing = sorted(path for path in _owners() if not (ROOT / path).is_file())
    assert missing == []


def test_every_cache_module_of_the_package_is_in_the_table() -> None:
    """A new cache (or a module renamed) gets its row."""
    assert sorted(_cache_modules() - _owners()) == []


def test_the_rule_finds_the_caches_it_should() -> None:
    """The finder is no empty net: it finds a cache by each of its three marks."""
    found = _cache_modules()
    assert "kernelpolicy/policy/packcache.py" in found  # the file's name
    assert "kernelpolicy/server/state.py" in found  # class AnswerCache
    assert "kernelpolicy/inputs.py" in found  # _POLICY_CACHE = {}
