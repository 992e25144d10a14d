# SPDX-License-Identifier: Apache-2.0
"""Where Tidal's builds keep what they reuse (the lab's binaries, the web console's bundle, the
controllers' image): ``$TIDAL_LAB_CACHE``, else ``$XDG_CACHE_HOME/tidal/lab`` (``~/.cache/tidal/lab``)."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$TIDAL_LAB_CACHE`` or ``$XDG_CACHE_HOME/tidal/lab`` (``~/.cache/tidal/lab``)."""
    if os.environ.get("TIDAL_LAB_CACHE"):
        return Path(os.environ["TIDAL_LAB_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tidal" / "lab"
