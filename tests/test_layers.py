"""The house keeps its shape: no import cycle among kernelpolicy's modules, each package
importing only the layers below it (the order docs/design.md states under "Layers"), no module
using another module's private name (imported by name, or read as an attribute of a module it
imported; within a package too), and every name a package loads on first use (its lazy map)
imported under ``TYPE_CHECKING`` as well, from a layer it may import. Imports inside functions
and under ``TYPE_CHECKING`` count: they are dependencies all the same."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator, Mapping
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


def _imports(
    name: str, path: Path, nodes: list[ast.stmt] | None = None
) -> Iterator[tuple[str, str | None]]:
    """(module imported, the name taken from it or None) for each kernelpolicy import of the
    file at ``path`` (of ``nodes`` alone, where given)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    roots = nodes if nodes is not None else [ast.parse(path.read_text(encoding="utf-8"))]
    for node in (child for root in roots for child in ast.walk(root)):
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


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_aliases(name: str, path: Path, tree: ast.Module) -> dict[str, str]:
    """Local name -> the kernelpolicy module it is bound to by an import in the file."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kernelpolicy":
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else "kernelpolicy"
        elif isinstance(node, ast.ImportFrom):
            imported = list(_imports(name, path, [node]))  # one per alias, or none at all
            for alias, (target, taken) in zip(node.names, imported, strict=bool(imported)):
                if taken is None:  # a module
                    aliases[alias.asname or alias.name] = target
    return aliases


def _attribute_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None unless the chain starts at a plain name."""
    attributes: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        attributes.insert(0, current.attr)
        current = current.value
    return (current.id, attributes) if isinstance(current, ast.Name) else None


def _private_uses(name: str, path: Path) -> set[str]:
    """Every other module's private name this module takes: ``from m import _x``, and
    ``m._x`` where ``m`` is a module it imported (``import kernelpolicy.a.b`` then
    ``kernelpolicy.a.b._x`` too). Its own private names and dunder names are its to use."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {
        f"{target}.{taken}"
        for target, taken in _imports(name, path)
        if taken is not None and _private(taken) and target != name
    }
    aliases = _module_aliases(name, path, tree)
    for node in ast.walk(tree):
        chain = _attribute_chain(node) if isinstance(node, ast.Attribute) else None
        if chain is None or chain[0] not in aliases:
            continue
        module = aliases[chain[0]]
        for attribute in chain[1]:
            if f"{module}.{attribute}" not in MODULES:
                if _private(attribute) and module != name:
                    found.add(f"{module}.{attribute}")
                break
            module = f"{module}.{attribute}"
    return found


def test_no_module_uses_another_modules_private_name() -> None:
    """Across modules, within a package too: a name another module needs is public there."""
    found = [
        f"{name} uses {used}"
        for name, path in MODULES.items()
        for used in _private_uses(name, path)
    ]
    assert sorted(found) == []


def _defines_module_getattr(path: Path) -> bool:
    """Whether the module has a module-level ``__getattr__`` (PEP 562): a lazy map's reader."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(n, ast.Name) and n.id == "__getattr__" for n in names):
            return True
    return False


def _lazy_maps() -> dict[str, dict[str, str]]:
    """Module -> its lazy map (name -> the module the name is loaded from on first use), read
    from its ``__getattr__``: the ``exports`` that ``kernelpolicy._lazy.lazy_exports`` closes
    over, or the ``_EXPORTS`` global it reads (``kernelpolicy/__init__.py``)."""
    maps = {}
    for name, path in MODULES.items():
        if not _defines_module_getattr(path):
            continue
        seen = inspect.getclosurevars(importlib.import_module(name).__getattr__)
        exports = seen.nonlocals.get("exports", seen.globals.get("_EXPORTS"))
        assert isinstance(exports, Mapping), f"{name}'s __getattr__ reads no map this test reads"
        maps[name] = dict(exports)
    return maps


def _type_checking_imports(name: str, path: Path) -> set[tuple[str, str]]:
    """(module, name) of each ``from module import name`` under a module-level ``if
    TYPE_CHECKING:`` (``from m import x as y`` binds ``y``: it counts only where ``y`` is
    ``x``)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom):
                imported = list(_imports(name, path, [statement]))
                for alias, (target, _) in zip(statement.names, imported, strict=bool(imported)):
                    if alias.asname in (None, alias.name):
                        found.add((target, alias.name))
    return found


def _lazy_problems(name: str, path: Path, exports: Mapping[str, str]) -> list[str]:
    """What is wrong with ``name``'s lazy map: an entry the module does not also import under
    TYPE_CHECKING from the same module (so that type checkers, and the layer and cycle tests,
    see the dependency), or one that loads from a module that is not there or from a layer
    above the module's."""
    typed = _type_checking_imports(name, path)
    problems = []
    for exported, module in sorted(exports.items()):
        if module not in MODULES:
            problems.append(f"{name}: {exported} loads from {module}, which is no module")
        elif LAYERS[_top(module)] > LAYERS[_top(name)]:
            problems.append(f"{name}: {exported} loads from {module}, a higher layer")
        if (module, exported) not in typed:
            problems.append(
                f"{name}: {exported} loads from {module} but is not imported from there "
                "under TYPE_CHECKING"
            )
    return problems


LAZY_MAPS = _lazy_maps()


def test_the_lazy_maps_are_found() -> None:
    """The packages that load names on first use, each with a map to check."""
    packages = ("kernelpolicy", "kernelpolicy.platform", "kernelpolicy.policy")
    assert {*packages, "kernelpolicy.policy.schema"} <= set(LAZY_MAPS)
    assert all(LAZY_MAPS.values())


@pytest.mark.parametrize("name", sorted(LAZY_MAPS))
def test_every_lazy_name_is_imported_under_type_checking(name: str) -> None:
    assert _lazy_problems(name, MODULES[name], LAZY_MAPS[name]) == []


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


PRIVATE_USES = {
    "from-import": ("from kernelpolicy.policy.transpile import _tokens\n", {"transpile._tokens"}),
    "relative from-import": ("from .transpile import _tokens\n", {"transpile._tokens"}),
    "attribute of a module imported from its package": (
        "from kernelpolicy.verify import accuracy\nn = len(accuracy._topk_cases())\n",
        {"accuracy._topk_cases"},
    ),
    "attribute of a module imported under another name": (
        "import kernelpolicy.policy.transpile as t\nt._tokens('x')\n",
        {"transpile._tokens"},
    ),
    "attribute through the dotted path": (
        "import kernelpolicy.policy.transpile\nkernelpolicy.policy.transpile._tokens('x')\n",
        {"transpile._tokens"},
    ),
    "inside a function": (
        "def f():\n    from kernelpolicy.policy import transpile\n    return transpile._TOKEN\n",
        {"transpile._TOKEN"},
    ),
    "public names and dunders": (
        "from kernelpolicy.policy import transpile\n"
        "from kernelpolicy.policy.transpile import tokens\n"
        "transpile.tokens('x'), transpile.__name__, tokens.__doc__\n",
        set(),
    ),
    "its own private names": (
        "import kernelpolicy.policy.fake as me\n_x = 1\nme._x\n", set()
    ),
    "a private attribute of something else": ("class A:\n    _x = 1\nA._x, A()._x\n", set()),
}  # fmt: skip


@pytest.mark.parametrize(("source", "uses"), list(PRIVATE_USES.values()), ids=list(PRIVATE_USES))
def test_the_private_name_reader(tmp_path: Path, source: str, uses: set[str]) -> None:
    """A module of kernelpolicy.policy (``fake``) taking private names: imported by name, or
    read as an attribute of a module it imported, however that module was imported."""
    module = tmp_path / "fake.py"
    module.write_text(source)
    found = _private_uses("kernelpolicy.policy.fake", module)
    assert {used.removeprefix("kernelpolicy.").split(".", 1)[1] for used in found} == uses


LAZY = {
    "imported under TYPE_CHECKING": (
        "if TYPE_CHECKING:\n    from kernelpolicy.errors import PolicyError\n",
        {"PolicyError": "kernelpolicy.errors"},
        [],
    ),
    "imported under TYPE_CHECKING as itself": (
        "if TYPE_CHECKING:\n    from kernelpolicy.errors import PolicyError as PolicyError\n",
        {"PolicyError": "kernelpolicy.errors"},
        [],
    ),
    "not imported": (
        "",
        {"PolicyError": "kernelpolicy.errors"},
        ["PolicyError loads from kernelpolicy.errors but is not imported from there"],
    ),
    "imported at run time only": (
        "from kernelpolicy.errors import PolicyError\n",
        {"PolicyError": "kernelpolicy.errors"},
        ["PolicyError loads from kernelpolicy.errors but is not imported from there"],
    ),
    "imported from another module": (
        "if TYPE_CHECKING:\n    from kernelpolicy.policy.loader import PolicyError\n",
        {"PolicyError": "kernelpolicy.errors"},
        ["PolicyError loads from kernelpolicy.errors but is not imported from there"],
    ),
    "imported under another name": (
        "if TYPE_CHECKING:\n    from kernelpolicy.errors import PolicyError as Other\n",
        {"Other": "kernelpolicy.errors"},
        ["Other loads from kernelpolicy.errors but is not imported from there"],
    ),
    "from a higher layer": (
        "if TYPE_CHECKING:\n    from kernelpolicy.api import resolve\n",
        {"resolve": "kernelpolicy.api"},
        ["resolve loads from kernelpolicy.api, a higher layer"],
    ),
    "from no module": (
        "if TYPE_CHECKING:\n    from kernelpolicy.gone import thing\n",
        {"thing": "kernelpolicy.gone"},
        ["thing loads from kernelpolicy.gone, which is no module"],
    ),
}


@pytest.mark.parametrize(("source", "exports", "problems"), list(LAZY.values()), ids=list(LAZY))
def test_the_lazy_map_check(
    tmp_path: Path, source: str, exports: dict[str, str], problems: list[str]
) -> None:
    """A package of the policy layer (``kernelpolicy.policy.fake``) with a lazy map."""
    module = tmp_path / "__init__.py"
    module.write_text(f"from typing import TYPE_CHECKING\n{source}")
    found = _lazy_problems("kernelpolicy.policy.fake", module, exports)
    assert [problem.split(": ", 1)[1].split(" under")[0] for problem in found] == problems
