"""The readers tests/test_layers.py relies on (tests/layer_readers.py), on small made-up
modules: the cycle finder, the import reader, the private-name reader and the lazy-map check
find what is there and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import layer_readers as readers

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
    assert sorted(readers.cycles(edges)) == cycles


def test_the_import_reader_counts_function_and_type_checking_imports(tmp_path: Path) -> None:
    """An import inside a function and one under TYPE_CHECKING are both read."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kernelpolicy.engine.model import Decision\n"
        "def f():\n    from kernelpolicy.cli import main\n    import kernelpolicy.api\n"
    )
    found = set(readers.imports("kernelpolicy.m", module))
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
    found = readers.private_uses("kernelpolicy.policy.fake", module)
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
    found = readers.lazy_problems("kernelpolicy.policy.fake", module, exports)
    assert [problem.split(": ", 1)[1].split(" under")[0] for problem in found] == problems
