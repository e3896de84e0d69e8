"""Where kernelpolicy keeps what it writes for later processes, by default: the cache directory.

Read by the compiled-code cache before anything else of kernelpolicy is imported (its classes'
methods are what it keeps), so this module imports nothing of the package.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kernelpolicy``, else ``~/.cache/kernelpolicy``: the evidence store and
    the compiled-pack cache live under it unless ``KERNELPOLICY_CACHE_DIR`` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelpolicy"
