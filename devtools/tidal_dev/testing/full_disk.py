# SPDX-License-Identifier: Apache-2.0
"""A real full disk for tests: a file written until its filesystem refuses (ENOSPC)."""

from __future__ import annotations

import errno
from pathlib import Path


def fill(path: Path) -> None:
    """Write ``path`` until its filesystem is full: whole MiBs, then the last pages, then the
    last bytes. Any error but ENOSPC is raised (a full disk is what the caller wants)."""
    with open(path, "wb", buffering=0) as out:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
