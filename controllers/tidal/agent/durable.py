# SPDX-License-Identifier: Apache-2.0
"""Files the agent must find whole after a crash or a power loss: its journals and history.

:func:`write_durably` writes beside the file, syncs the data, renames over the file and syncs the
directory, so the path holds either the old content or the new, never a truncated one (a rename
alone is not enough on every filesystem: XFS, ext4 without ``auto_da_alloc`` can leave a
zero-length file after a power loss).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["tmp_path_of", "write_durably"]


def tmp_path_of(path: Path) -> Path:
    """The temporary file :func:`write_durably` writes before its rename."""
    return path.with_name(path.name + ".tmp")


def write_durably(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically and durably (OSError on failure, with
    the old content left in place and no temporary file)."""
    tmp = tmp_path_of(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:  # the rename itself survives a power loss once the directory is synced
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass
