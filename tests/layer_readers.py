"""The readers behind tests/test_layers.py (their own tests: tests/test_layers_readers.py):
kernelpolicy's modules, the imports of each (inside functions and under ``TYPE_CHECKING`` too),
the modules each runs with ``python -m``, the cycles among them, the layers docs/design.md states
under "Layers", the private names a module takes from another, the names each calls, and the lazy
maps packages load names from on first use."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernelpolicy"
SKIPPED = ("_generated", "fixtures", "bundled_policies")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(part in SKIPPED for part in path.relative_to(PACKAGE).parts):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def imports(
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


def edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for imported, _ in imports(name, path):
            target = imported
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                edges[name].add(target)
    return edges


def runs(path: Path) -> set[str]:
    """The kernelpolicy modules the file at ``path`` runs in a process of their own with
    ``python -m``: the module given to ``python_command(executable, module)``
    (:mod:`kernelpolicy.kernels.build_process`) and the item after ``"-m"`` in a list or tuple,
    each a string constant or a module-level name bound to one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }

    def text(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    named: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("python_command"):
            named += node.args[1:2] + [k.value for k in node.keywords if k.arg == "module"]
        elif isinstance(node, ast.List | ast.Tuple):
            named += [after for flag, after in itertools.pairwise(node.elts) if text(flag) == "-m"]
    return {
        module
        for module in map(text, named)
        if module is not None and module.split(".")[0] == "kernelpolicy"
    }


def run_edges() -> dict[str, set[str]]:
    """Module -> the kernelpolicy modules it runs with ``python -m``: a dependency for the layer
    order, but no import (the module runs in another process, so it may import its runner)."""
    return {name: runs(path) - {name} for name, path in MODULES.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
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


def layers() -> dict[str, int]:
    """Top-level package or module -> its layer, read from docs/design.md's "Layers" list."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for number, line in re.findall(r"^(\d+)\. (.+)$", section, flags=re.M):
        for name in re.findall(r"`([\w.]+)`", line):
            layers[name] = int(number)
    return layers


LAYERS = layers()


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def up_arrows() -> list[str]:
    """Each import of a higher layer, and each ``python -m`` run of one (:func:`runs`)."""
    found = []
    for verb, found_edges in (("imports", edges()), ("runs", run_edges())):
        for name, targets in found_edges.items():
            for target in sorted(targets):
                if target in MODULES and LAYERS[top(target)] > LAYERS[top(name)]:
                    found.append(f"{name} (layer {LAYERS[top(name)]}) {verb} {target} "
                                 f"(layer {LAYERS[top(target)]})")  # fmt: skip
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_aliases(name: str, path: Path, tree: ast.Module) -> dict[str, str]:
    """Local name -> the kernelpolicy module it is bound to by an import in the file."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kernelpolicy":
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else "kernelpolicy"
        elif isinstance(node, ast.ImportFrom):
            imported = list(imports(name, path, [node]))  # one per alias, or none at all
            for alias, (target, taken) in zip(node.names, imported, strict=bool(imported)):
                if taken is None:  # a module
                    aliases[alias.asname or alias.name] = target
    return aliases


def attribute_chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None unless the chain starts at a plain name."""
    attributes: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        attributes.insert(0, current.attr)
        current = current.value
    return (current.id, attributes) if isinstance(current, ast.Name) else None


def private_uses(name: str, path: Path) -> set[str]:
    """Every other module's private name this module takes: ``from m import _x``, and
    ``m._x`` where ``m`` is a module it imported (``import kernelpolicy.a.b`` then
    ``kernelpolicy.a.b._x`` too). Its own private names and dunder names are its to use."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {
        f"{target}.{taken}"
        for target, taken in imports(name, path)
        if taken is not None and private(taken) and target != name
    }
    aliases = module_aliases(name, path, tree)
    for node in ast.walk(tree):
        chain = attribute_chain(node) if isinstance(node, ast.Attribute) else None
        if chain is None or chain[0] not in aliases:
            continue
        module = aliases[chain[0]]
        for attribute in chain[1]:
            if f"{module}.{attribute}" not in MODULES:
                if private(attribute) and module != name:
                    found.add(f"{module}.{attribute}")
                break
            module = f"{module}.{attribute}"
    return found


def calls(name: str, path: Path) -> set[str]:
    """The names the module calls, each as where it comes from: ``f()`` after ``from
    kernelpolicy.m import f`` (``import f as g``: ``g()``) and ``m.f()`` after an import of the
    module ``m`` are ``kernelpolicy.m.f``; a name not imported is the module's own (``name.f``),
    and ``pb.Inputs()`` of a generated module is that module's (``..._pb2.Inputs``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported = list(imports(name, path, [node]))  # one per alias, or none at all
            for alias, (target, taken) in zip(node.names, imported, strict=bool(imported)):
                if taken is not None:
                    bound[alias.asname or alias.name] = f"{target}.{taken}"
    aliases = module_aliases(name, path, tree)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name):
            found.add(bound.get(node.func.id, f"{name}.{node.func.id}"))
            continue
        chain = attribute_chain(node.func) if isinstance(node.func, ast.Attribute) else None
        if chain is not None:
            start = aliases.get(chain[0], bound.get(chain[0], chain[0]))
            found.add(".".join([start, *chain[1]]))
    return found


def defines_module_getattr(path: Path) -> bool:
    """Whether the module has a module-level ``__getattr__`` (PEP 562): a lazy map's reader."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(n, ast.Name) and n.id == "__getattr__" for n in names):
            return True
    return False


def lazy_maps() -> dict[str, dict[str, str]]:
    """Module -> its lazy map (name -> the module the name is loaded from on first use), read
    from its ``__getattr__``: the ``exports`` that ``kernelpolicy._lazy.lazy_exports`` closes
    over, or the ``_EXPORTS`` global it reads (``kernelpolicy/__init__.py``)."""
    maps = {}
    for name, path in MODULES.items():
        if not defines_module_getattr(path):
            continue
        seen = inspect.getclosurevars(importlib.import_module(name).__getattr__)
        exports = seen.nonlocals.get("exports", seen.globals.get("_EXPORTS"))
        assert isinstance(exports, Mapping), f"{name}'s __getattr__ reads no map this test reads"
        maps[name] = dict(exports)
    return maps


def type_checking_imports(name: str, path: Path) -> set[tuple[str, str]]:
    """(module, name) of each ``from module import name`` under a module-level ``if
    TYPE_CHECKING:`` (``from m import x as y`` binds ``y``: it counts only where ``y`` is
    ``x``)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom):
                imported = list(imports(name, path, [statement]))
                for alias, (target, _) in zip(statement.names, imported, strict=bool(imported)):
                    if alias.asname in (None, alias.name):
                        found.add((target, alias.name))
    return found


def lazy_problems(name: str, path: Path, exports: Mapping[str, str]) -> list[str]:
    """What is wrong with ``name``'s lazy map: an entry the module does not also import under
    TYPE_CHECKING from the same module (so that type checkers, and the layer and cycle tests,
    see the dependency), or one that loads from a module that is not there or from a layer
    above the module's."""
    typed = type_checking_imports(name, path)
    problems = []
    for exported, module in sorted(exports.items()):
        if module not in MODULES:
            problems.append(f"{name}: {exported} loads from {module}, which is no module")
        elif LAYERS[top(module)] > LAYERS[top(name)]:
            problems.append(f"{name}: {exported} loads from {module}, a higher layer")
        if (module, exported) not in typed:
            problems.append(
                f"{name}: {exported} loads from {module} but is not imported from there "
                "under TYPE_CHECKING"
            )
    return problems


LAZY_MAPS = lazy_maps()
