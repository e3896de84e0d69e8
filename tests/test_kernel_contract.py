"""The sampler contract, kernelpolicy.kernels.TopKTopP: every implementation of
``sampler.top_k_top_p`` the bundled policies name, and its serving form, is called with the
contract's signature, and is declared with it (``top_k_top_p_entry``) where mypy checks it."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.kernels import TopKTopP
from kernelpolicy.policy.entries import load_entry, parse_entry
from kernelpolicy.policy.loader import load_policies
from kernelpolicy.policy.names import builtin_entry
from kernelpolicy.settings.readers import bundled_policy_dir

FEATURE = "sampler.top_k_top_p"
BUGGY = "kernelpolicy.testing.buggy_kernels"
NEEDS = {"kernelpolicy.kernels.sampling_triton": "triton"}  # entry module -> what it imports


def bundled_entries() -> list[str]:
    """The entry of every candidate of the feature in the bundled policies."""
    feature = load_policies([bundled_policy_dir()]).features[FEATURE]
    entries = [c.spec.entry or builtin_entry(FEATURE, c.impl) for c in feature.candidates]
    assert None not in entries
    return [str(e) for e in entries]


ENTRIES = bundled_entries()
PLANTED = [f"{BUGGY}:{name}" for name in ("top_k_ignores_k", "sampler_fails_when_called")]


def contract() -> inspect.Signature:
    """TopKTopP.__call__'s signature, without ``self``."""
    signature = inspect.signature(TopKTopP.__call__)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def forms(entry: str) -> list[tuple[str, Callable[..., Any]]]:
    """The entry's callable and its serving form, where it has one."""
    module = parse_entry(entry).module
    if module in NEEDS and importlib.util.find_spec(NEEDS[module]) is None:
        pytest.skip(f"{NEEDS[module]} is not installed")
    function = load_entry(entry)
    found = [(entry, function)]
    if hasattr(function, "nonblocking"):
        found.append((f"{entry}.nonblocking", function.nonblocking))
    return found


def test_the_bundled_policies_name_every_built_in_implementation() -> None:
    """The table below is the bundled policies' (torch, triton, flashinfer, aiter)."""
    assert len(ENTRIES) == 4
    assert len(set(ENTRIES)) == 4


@pytest.mark.parametrize("entry", [*ENTRIES, *PLANTED, f"{BUGGY}:top_k_top_p_fails_float16"])
def test_each_implementation_has_the_contracts_signature(entry: str) -> None:
    """inspect.signature of each implementation and serving form is the contract's: names,
    kinds, defaults and annotations (an adapter no longer shows its kernel's (logits, k, p))."""
    for name, function in forms(entry):
        assert inspect.signature(function) == contract(), name


def _decorated(tree: ast.Module, name: str) -> bool:
    """Whether the module-level function ``name`` is declared with the contract: decorated by
    ``top_k_top_p_entry``, or by a function of the module that returns ``TopKTopP``."""
    returns = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.returns is not None
        and ast.unparse(node.returns) == "TopKTopP"
    }
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return any(
                isinstance(d, ast.Name) and d.id in {"top_k_top_p_entry", *returns}
                for d in node.decorator_list
            )
    return False


def _serving_declared(tree: ast.Module, name: str) -> bool:
    """Whether ``name.nonblocking`` is assigned a declared function, or through
    ``top_k_top_p_entry(...)``."""
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        target = node.targets[0]
        if ast.unparse(target) != f"{name}.nonblocking":
            continue
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "top_k_top_p_entry":
            return True
        return isinstance(value, ast.Name) and _decorated(tree, value.id)
    return False


@pytest.mark.parametrize("entry", [*ENTRIES, *PLANTED])
def test_each_implementation_is_declared_with_the_contract(entry: str) -> None:
    """Each is declared with the contract in its source, so that mypy checks it against
    TopKTopP (a signature that drifts fails ``mypy kernelpolicy``)."""
    module, attribute = parse_entry(entry)
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    assert _decorated(tree, attribute), entry
    for name, _ in forms(entry)[1:]:
        assert _serving_declared(tree, attribute), name
