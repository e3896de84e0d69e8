"""kernelpolicy's settings are read by the settings package alone: no other module takes a
``KERNELPOLICY_*`` setting's variable out of an environment by name (``environ.get(NAME)``,
``os.getenv(NAME)``, ``env[NAME]``), where it would be parsed a second way (the CLI's check
read ``KERNELPOLICY_ALLOW_UNTRUSTED_FILES`` so); each goes through ``Settings`` or
``settings_from``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelpolicy.settings import VARIABLES

PACKAGE = Path(__file__).resolve().parent.parent / "kernelpolicy"
ENVIRONMENTS = ("environ", "env", "getenv")
"""The last name of what a read takes a variable from: an environment mapping, os.getenv."""


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module's string constants (``NAME = "KERNELPOLICY_..."``)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(value, str):
                    found[target.id] = value
    return found


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _read_of(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(what is read from, the key) of an ``x.get(KEY)``, ``getenv(KEY)`` or ``x[KEY]``."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "pop"):
            return func.value, node.args[0]
        if _last_name(func) == "getenv":
            return func, node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.value, node.slice
    return None


def settings_reads(source: str) -> list[str]:
    """The reads of a setting's variable from an environment in ``source``, as written."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found = []
    for node in ast.walk(tree):
        read = _read_of(node)
        if read is None or _last_name(read[0]) not in ENVIRONMENTS:
            continue
        key = read[1]
        name = key.value if isinstance(key, ast.Constant) else None
        name = constants.get(key.id) if isinstance(key, ast.Name) else name
        if name in VARIABLES:
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        pytest.param('os.environ.get("KERNELPOLICY_ALLOW_UNTRUSTED_FILES")', 1, id="environ-get"),
        pytest.param('os.getenv("KERNELPOLICY_CACHE_DIR", "")', 1, id="getenv"),
        pytest.param('env["KERNELPOLICY_LOG_FORMAT"]', 1, id="env-subscript"),
        pytest.param('V = "KERNELPOLICY_PACK_CACHE"\nself.env.get(V)', 1, id="module-constant"),
        pytest.param('env["KERNELPOLICY_OVERRIDES"] = "{}"', 0, id="a-write-is-no-read"),
        pytest.param('origins.get("KERNELPOLICY_OVERRIDES")', 0, id="not-an-environment"),
        pytest.param('os.environ.get("KERNELPOLICY_VLLM_PLUGIN")', 0, id="not-a-setting"),
        pytest.param('"KERNELPOLICY_POLICY_PATHS" in env', 0, id="membership-is-no-read"),
    ],
)  # fmt: skip
def test_the_scan_finds_a_read_of_a_setting(source: str, reads: int) -> None:
    """What counts as reading a setting's variable out of an environment, and what does not."""
    assert len(settings_reads(source)) == reads


def test_only_the_settings_package_reads_the_settings_variables() -> None:
    """Every module but kernelpolicy/settings/ takes its settings from Settings/settings_from."""
    found = {
        str(path.relative_to(PACKAGE.parent)): reads
        for path in sorted(PACKAGE.rglob("*.py"))
        if "settings" not in path.relative_to(PACKAGE).parts[:1]
        and (reads := settings_reads(path.read_text()))
    }
    assert found == {}
