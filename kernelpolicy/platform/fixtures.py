"""The platform snapshots that ship with kernelpolicy: ``fixtures/platforms/<name>.json``.

One per machine of :mod:`kernelpolicy.testing.machines` (``scripts/gen_fixtures.py`` writes them
by probing each through the real code path). ``kernelpolicy check`` resolves policies on every
one, ``matrix`` and ``diff`` take them as their default inventory, and tests load them.
"""

from __future__ import annotations

from pathlib import Path

from kernelpolicy.platform.model import Platform, load_platform


def fixture_dir() -> Path:
    """The shipped fixtures: ``platforms/<name>.json`` and ``roots/<name>/`` fake trees."""
    return Path(__file__).resolve().parent.parent / "fixtures"


def fixture_platforms() -> list[tuple[str, Platform]]:
    """(name, platform) of every bundled platform fixture (``fixtures/platforms/*.json``)."""
    paths = sorted((fixture_dir() / "platforms").glob("*.json"))
    return [(path.stem, load_platform(path)) for path in paths]
