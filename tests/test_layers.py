"""The house keeps its shape: no import cycle among kernelpolicy's modules, each package
importing only the layers below it (the order docs/design.md states under "Layers"), no module
using another module's private name (imported by name, or read as an attribute of a module it
imported; within a package too), and every name a package loads on first use (its lazy map)
imported under ``TYPE_CHECKING`` as well, from a layer it may import. Imports inside functions
and under ``TYPE_CHECKING`` count: they are dependencies all the same, and so is a module run
with ``python -m`` (a build process). One way in: only :mod:`kernelpolicy.inputs` loads the
evidence store or builds the engine's ``Inputs``. The readers: tests/layer_readers.py, tested in
tests/test_layers_readers.py (the ``-m`` reader here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import layer_readers as readers


def test_the_layers_name_every_top_level_package_and_module() -> None:
    tops = {readers.top(name) for name in readers.MODULES} | {"__main__"}
    assert sorted(tops - set(readers.LAYERS)) == []
    assert sorted(set(readers.LAYERS) - tops) == []


def test_no_import_cycle() -> None:
    assert readers.cycles(readers.edges()) == []


def test_no_package_imports_a_higher_layer() -> None:
    assert readers.up_arrows() == []


RUNS = {
    "python_command with a constant": (
        'argv = python_command(sys.executable, "kernelpolicy.cli.warm_child")\n',
        {"kernelpolicy.cli.warm_child"},
    ),
    "python_command with a module-level name, by keyword": (
        'MODULE = "kernelpolicy.a.b"\ndef f():\n    return build_process.python_command("py", '
        "module=MODULE)\n",
        {"kernelpolicy.a.b"},
    ),
    "a list with -m": (
        'argv = [sys.executable, "-P", "-m", "kernelpolicy.a"]\n',
        {"kernelpolicy.a"},
    ),
    "another package's module": ('argv = ["python", "-m", "pip", "kernelpolicy.a"]\n', set()),
    "a name that is no command": ('log("kernelpolicy.warm.start", "-m")\n', set()),
}


@pytest.mark.parametrize(("source", "found"), list(RUNS.values()), ids=list(RUNS))
def test_the_dash_m_reader(tmp_path: Path, source: str, found: set[str]) -> None:
    """The reader finds the modules a file runs with ``python -m``, and nothing else."""
    module = tmp_path / "m.py"
    module.write_text(source)
    assert readers.runs(module) == found


def test_the_modules_run_with_dash_m_are_found_and_exist() -> None:
    """The build processes are read (a layer they break is an up arrow), each a module."""
    runs = readers.run_edges()
    assert "kernelpolicy.kernels.warm_child" in runs["kernelpolicy.warming"]
    child = "kernelpolicy.kernels.sampling_triton.child"
    assert f"{child}_main" in runs[child]
    assert sorted(m for targets in runs.values() for m in targets if m not in readers.MODULES) == []


def test_no_module_uses_another_modules_private_name() -> None:
    """Across modules, within a package too: a name another module needs is public there."""
    found = [
        f"{name} uses {used}"
        for name, path in readers.MODULES.items()
        for used in readers.private_uses(name, path)
    ]
    assert sorted(found) == []


def test_the_lazy_maps_are_found() -> None:
    """The packages that load names on first use, each with a map to check."""
    packages = ("kernelpolicy", "kernelpolicy.platform", "kernelpolicy.policy")
    assert {*packages, "kernelpolicy.policy.schema"} <= set(readers.LAZY_MAPS)
    assert all(readers.LAZY_MAPS.values())


@pytest.mark.parametrize("name", sorted(readers.LAZY_MAPS))
def test_every_lazy_name_is_imported_under_type_checking(name: str) -> None:
    assert readers.lazy_problems(name, readers.MODULES[name], readers.LAZY_MAPS[name]) == []


CALLS = {
    "a name taken from a module": (
        "from kernelpolicy.inputs import Inputs\nInputs(1)\n",
        {"kernelpolicy.inputs.Inputs"},
    ),
    "a name taken under another name, in a function": (
        "def f():\n    from kernelpolicy.evidence.store import load_evidence as load\n"
        "    return load(p)\n",
        {"kernelpolicy.evidence.store.load_evidence"},
    ),
    "an attribute of a module taken from its package": (
        "from kernelpolicy.evidence import store\nstore.load_evidence(p)\n",
        {"kernelpolicy.evidence.store.load_evidence"},
    ),
    "an attribute of a module imported whole": (
        "import kernelpolicy.inputs\nkernelpolicy.inputs.Inputs(1)\n",
        {"kernelpolicy.inputs.Inputs"},
    ),
    "a message of the same name": (
        "from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb\n"
        "pb.Inputs(platform_json='')\n",
        set(),
    ),
    "a name only imported": ("from kernelpolicy.inputs import Inputs\nx: Inputs\n", set()),
}
ONE_WAY_IN = {"kernelpolicy.inputs.Inputs", "kernelpolicy.evidence.store.load_evidence"}
"""What gathers the engine's inputs: only :mod:`kernelpolicy.inputs` calls them."""


@pytest.mark.parametrize(("source", "found"), list(CALLS.values()), ids=list(CALLS))
def test_the_call_reader(tmp_path: Path, source: str, found: set[str]) -> None:
    """The reader names each call by where the name comes from, and nothing else as these."""
    module = tmp_path / "m.py"
    module.write_text(source)
    assert readers.calls("kernelpolicy.m", module) & ONE_WAY_IN == found


def test_only_inputs_loads_evidence_or_builds_inputs() -> None:
    """One way in (issue 28): every front end, the daemon included, takes the engine's inputs
    and the evidence store from :mod:`kernelpolicy.inputs`, so that none gathers them its own
    way (its own evidence rule, its own overrides reader)."""
    found = [
        f"{name} calls {called}"
        for name, path in readers.MODULES.items()
        if name != "kernelpolicy.inputs"
        for called in sorted(readers.calls(name, path) & ONE_WAY_IN)
    ]
    assert sorted(found) == []
