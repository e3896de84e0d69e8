"""The house keeps its shape: no import cycle among kernelpolicy's modules, each package
importing only the layers below it (the order docs/design.md states under "Layers"), and no
module importing another package's private name. Imports inside functions and under
``TYPE_CHECKING`` count: they are dependencies all the same."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernelpolicy"
SKIPPED = ("_generated", "fixtures", "bundled_policies")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(part in SKIPPED for part in path.relative_to(PACKAGE).parts):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module imported, the name taken from it or None) for each kernelpolicy import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kernelpolicy":
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "kernelpolicy":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield (submodule, None) if submodule in MODULES else (target, alias.name)


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for imported, _ in _imports(name, path):
            target = imported
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                edges[name].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, children_of_root in edges.items():
        if root in index:
            continue
        work = [(root, iter(sorted(children_of_root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _layers() -> dict[str, int]:
    """Top-level package or module -> its layer, read from docs/design.md's "Layers" list."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for number, line in re.findall(r"^(\d+)\. (.+)$", section, flags=re.M):
        for name in re.findall(r"`([\w.]+)`", line):
            layers[name] = int(number)
    return layers


LAYERS = _layers()


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_layers_name_every_top_level_package_and_module() -> None:
    tops = {_top(name) for name in MODULES} | {"__main__"}
    assert sorted(tops - set(LAYERS)) == []
    assert sorted(set(LAYERS) - tops) == []


def test_no_import_cycle() -> None:
    assert _cycles(_edges()) == []


def _up_arrows() -> list[str]:
    found = []
    for name, targets in _edges().items():
        for target in sorted(targets):
            if LAYERS[_top(target)] > LAYERS[_top(name)]:
                found.append(f"{name} (layer {LAYERS[_top(name)]}) imports {target} "
                             f"(layer {LAYERS[_top(target)]})")  # fmt: skip
    return found


def test_no_package_imports_a_higher_layer() -> None:
    assert _up_arrows() == []


def test_no_module_imports_another_packages_private_name() -> None:
    found = []
    for name, path in MODULES.items():
        for target, taken in _imports(name, path):
            private = taken is not None and taken.startswith("_") and not taken.startswith("__")
            if private and _top(target) != _top(name):
                found.append(f"{name} imports {target}.{taken}")
    assert found == []


CASES = {
    "a cycle of two": ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    "a cycle of three beside a chain": (
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}},
        [["a", "b", "c"]],
    ),
    "a chain": ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    "a diamond": ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, []),
}


@pytest.mark.parametrize(("edges", "cycles"), list(CASES.values()), ids=list(CASES))
def test_the_cycle_finder(edges: dict[str, set[str]], cycles: list[list[str]]) -> None:
    """The finder the house test relies on finds what is there and nothing else."""
    assert sorted(_cycles(edges)) == cycles


def test_the_import_reader_counts_function_and_type_checking_imports(tmp_path: Path) -> None:
    """An import inside a function and one under TYPE_CHECKING are both read."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kernelpolicy.engine.model import Decision\n"
        "def f():\n    from kernelpolicy.cli import main\n    import kernelpolicy.api\n"
    )
    found = set(_imports("kernelpolicy.m", module))
    assert ("kernelpolicy.engine.model", "Decision") in found
    assert ("kernelpolicy.api", None) in found
    assert any(target == "kernelpolicy.cli" for target, _ in found)
