"""docs/design.md's layout table and stage list are the package as it is: every module of
kernelpolicy is in the table (a package's ``__init__.py`` is the package's row; the generated
``server/_generated/`` and the data in ``fixtures/`` are named by their folders), every path the
table names exists and means one file, and every package docstring that numbers its stage
agrees with the stage list."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernelpolicy"
DESIGN = ROOT / "docs/design.md"

_TICKED = re.compile(r"`([^`]+)`")
_FILE_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)*(\.py|/)$")
_STAGE_ITEM = re.compile(r"^(\d+)\. (.*?)(?=^\d+\. |\n\n|\Z)", re.M | re.S)
_STAGE_CLAIM = re.compile(r"^Stage (\d+) of the flow\b")


def _section(heading: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows() -> list[tuple[list[str], str]]:
    """(the paths of the first column, the second column) of each row of the layout table.

    A bare name in the first column (`settings.py` after `kernelpolicy/api.py`) is in the folder
    of the full path before it."""
    rows = []
    for line in _section("Layout").splitlines():
        cells = line.strip().strip("|").split("|", 1)
        if not line.startswith("| `") or len(cells) != 2:
            continue
        paths: list[str] = []
        for name in _TICKED.findall(cells[0]):
            bare = "/" not in name.rstrip("/") and paths and "/" in paths[0].rstrip("/")
            paths.append(paths[0].rstrip("/").rsplit("/", 1)[0] + "/" + name if bare else name)
        rows.append((paths, cells[1]))
    return rows


def _packages() -> list[Path]:
    """Every package of kernelpolicy, but none inside a private one (generated stubs)."""
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        inside = folder.relative_to(PACKAGE).parts[:-1]
        if folder != PACKAGE and not any(part.startswith("_") for part in inside):
            found.append(folder)
    return found


@functools.cache
def _named_in_table() -> frozenset[str]:
    """Paths relative to the repository: each row's paths, and the `name/` or `name.py` its
    second column names inside the row's folder."""
    named: set[str] = set()
    for paths, text in _rows():
        named.update(path.rstrip("/") for path in paths)
        if not paths[0].endswith("/"):
            continue
        for name in _TICKED.findall(text):
            if _FILE_NAME.match(name):
                named.update(_under(ROOT / paths[0], name.rstrip("/")))
    return frozenset(named)


def _under(folder: Path, name: str) -> list[str]:
    """What ``name`` (``wide.py``, ``schema/``) means in a row of ``folder``: ``folder/name``
    where it exists, else every file or folder of that name inside ``folder``'s folders (one,
    for a name that means one file), else, for a path from the repository's root
    (``scripts/gen_protos.py``), that."""
    if (folder / name).exists():
        return [str((folder / name).relative_to(ROOT))]
    inside = [path for path in folder.rglob(name) if "__pycache__" not in path.parts]
    if not inside and "/" in name and (ROOT / name).exists():
        inside = [ROOT / name]
    return sorted(str(path.relative_to(ROOT)) for path in inside)


def _modules() -> list[str]:
    """Every module of kernelpolicy but ``__init__.py`` files, the generated stubs and the
    fixtures' data."""
    return [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "__init__.py"
        and not {"_generated", "fixtures", "bundled_policies"}
        & set(path.relative_to(PACKAGE).parts[:-1])
    ]


def test_the_table_has_rows() -> None:
    assert len(_rows()) > 10


def test_the_modules_are_found() -> None:
    """The finder below sees the package's modules, at every depth."""
    modules = _modules()
    assert len(modules) > 150
    assert "kernelpolicy/kernels/sampling_triton/bounds.py" in modules
    assert not [m for m in modules if "_generated" in m or m.endswith("__init__.py")]


@pytest.mark.parametrize("path", _modules())
def test_every_module_is_in_the_table(path: str) -> None:
    """In its folder's row, with what it does: a module that no row names is a job a newcomer
    cannot find."""
    assert path in _named_in_table(), f"{path} is not in docs/design.md's layout table"


@pytest.mark.parametrize(
    "path",
    [str(p.relative_to(ROOT)) for p in _packages()]
    + [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.glob("*.py"))],
)
def test_every_package_and_top_level_module_is_in_the_table(path: str) -> None:
    """A top-level package or module is a row of its own; a package inside one may be named
    in its parent's row instead."""
    named = _named_in_table()
    assert path in named, f"{path} is not in docs/design.md's layout table"


@pytest.mark.parametrize(
    ("row", "path"),
    [
        pytest.param(index, path, id=path)
        for index, (paths, _) in enumerate(_rows())
        for path in paths
    ],
)
def test_every_path_of_the_first_column_exists(row: int, path: str) -> None:
    assert (ROOT / path).exists(), f"row {row} of the layout table names {path}, which is gone"


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        pytest.param(paths[0], name, id=f"{paths[0]}{name}")
        for paths, text in _rows()
        if paths[0].endswith("/")
        for name in _TICKED.findall(text)
        if _FILE_NAME.match(name)
    ],
)
def test_every_file_a_row_names_exists_in_its_folder(folder: str, name: str) -> None:
    """And means one file: a name two subfolders share (``common.py``) is named in the row of
    its own subfolder."""
    found = _under(ROOT / folder, name.rstrip("/"))
    assert found, f"{folder} has no {name}"
    assert len(found) == 1, f"{name} in the row of {folder} could be any of {found}"


def _stage_list() -> dict[str, int]:
    """Package folder (``kernelpolicy/engine``) -> its stage, from the numbered list in "The
    data flow"."""
    stages = {}
    for number, text in _STAGE_ITEM.findall(_section("The data flow")):
        for name in _TICKED.findall(text):
            if name.endswith("/"):
                stages[f"kernelpolicy/{name.rstrip('/')}"] = int(number)
    return stages


def _claimed_stages() -> dict[str, int]:
    """Package folder -> the stage its docstring's first line names ("Stage 4 of the flow")."""
    claims = {}
    for folder in _packages():
        docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        match = _STAGE_CLAIM.match(docstring)
        if match:
            claims[str(folder.relative_to(ROOT))] = int(match.group(1))
    return claims


def test_the_stage_list_names_packages_that_exist() -> None:
    stages = _stage_list()
    assert len(stages) >= 6
    assert [name for name in stages if not (ROOT / name / "__init__.py").exists()] == []


@pytest.mark.parametrize(("package", "stage"), sorted(_claimed_stages().items()))
def test_a_package_docstring_names_the_stage_design_md_gives_it(package: str, stage: int) -> None:
    assert _stage_list().get(package) == stage, (
        f"{package}'s docstring says stage {stage}; docs/design.md's stage list says "
        f"{_stage_list().get(package)}"
    )


def test_every_documented_stage_is_claimed_by_a_package() -> None:
    """Each stage of the list is named by some package's docstring, so the numbers a reader
    meets in the code are the list's."""
    assert sorted(set(_claimed_stages().values())) == sorted(set(_stage_list().values()))
