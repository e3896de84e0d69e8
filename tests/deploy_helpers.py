"""deploy/'s Kubernetes manifests as the deploy tests read them (tests/test_deploy.py,
tests/test_deploy_warm.py): every object, one found by kind and name, one container of a
workload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import ROOT

DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of one manifest file, empty ones left out."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def objects() -> Iterator[dict[str, Any]]:
    """Every object of every manifest under deploy/kubernetes."""
    for path in MANIFESTS:
        yield from documents(path)


def find(kind: str, name: str, namespace: str = "kernelpolicy") -> dict[str, Any]:
    """The manifest object of that kind, name and namespace; fails naming it if none."""
    for obj in objects():
        meta = obj["metadata"]
        if (obj["kind"], meta["name"], meta.get("namespace")) == (kind, name, namespace):
            return obj
    raise AssertionError(f"no {kind} {namespace}/{name} in deploy/kubernetes")


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    """The container (or init container) ``name`` of a workload's pod template."""
    spec = workload["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)
