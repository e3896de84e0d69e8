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
    the compiled-pack cache live under it unless ``KERNELPOLICY_CACHE_DIR`` says otherwise.

    A relative ``XDG_CACHE_HOME`` is ignored, as the XDG base directory specification says.
    ``~`` is ``$HOME`` where that is an existing absolute directory, else the user's home in
    the password database (an empty ``HOME`` made the cache ``./.cache`` of whatever directory
    the command ran in, and a ``HOME`` that does not exist was created)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "kernelpolicy"
    return Path(_home()) / ".cache" / "kernelpolicy"


def _home() -> str:
    home = os.environ.get("HOME", "")
    if os.path.isabs(home) and os.path.isdir(home):
        return home
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:  # a uid without an entry (a container's): a private place under /tmp
        return f"/tmp/kernelpolicy-home-{os.geteuid()}"
