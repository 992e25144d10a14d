# SPDX-License-Identifier: Apache-2.0
"""The machine's DAMON: what its page-out schemes took, and pausing them for a run.

A kernel may run DAMON (``/sys/kernel/mm/damon/admin``) with a ``pageout`` scheme, as the
development machine's does from boot (set up by its image, presumably to hand cold memory back to
its host): every page the scheme judges cold (not accessed for a while) is reclaimed whatever
cgroup it belongs to, with no memory pressure at all. A server's page cache read at random is exactly such memory — each of nginx's files is read
about once in 200 s in bench-memory — so on such a machine the server's misses come from DAMON as
well as from its neighbours, in every treatment alike. bench-memory reports what the schemes paged
out during each measured window (:func:`pageout_bytes`) and, with ``--pause-damon``, switches the
running kdamonds off for the run and back on at its end (:func:`pause`, :func:`resume`).
"""
from __future__ import annotations

from pathlib import Path

ADMIN = Path("/sys/kernel/mm/damon/admin/kdamonds")


def running(admin: Path = ADMIN) -> list[Path]:
    """The kdamond directories whose ``state`` is ``on``."""
    if not admin.is_dir():
        return []
    return sorted(d for d in admin.iterdir() if d.name.isdigit() and (d / "state").is_file()
                  and (d / "state").read_text().strip() == "on")


def pageout_schemes(kdamond: Path) -> list[Path]:
    """The scheme directories of ``kdamond`` whose action is ``pageout``."""
    return sorted(s for s in kdamond.glob("contexts/*/schemes/*")
                  if s.name.isdigit() and (s / "action").is_file() and (s / "action").read_text().strip() == "pageout")


def pageout_bytes(admin: Path = ADMIN) -> int:
    """Bytes the running kdamonds' page-out schemes have reclaimed (their ``sz_applied``, made
    current first with the ``update_schemes_stats`` command); 0 with none running. A kdamond
    switched off and on again starts from 0, so take differences within one state."""
    total = 0
    for kdamond in running(admin):
        (kdamond / "state").write_text("update_schemes_stats")
        total += sum(int((s / "stats" / "sz_applied").read_text()) for s in pageout_schemes(kdamond))
    return total


def pause(admin: Path = ADMIN) -> list[Path]:
    """Switches off every running kdamond that has a page-out scheme; returns them for :func:`resume`."""
    paused = [k for k in running(admin) if pageout_schemes(k)]
    for kdamond in paused:
        (kdamond / "state").write_text("off")
    return paused


def resume(paused: list[Path]) -> None:
    """Switches the kdamonds :func:`pause` switched off on again, with the parameters their files
    still hold (the kernel's sysfs interface keeps them)."""
    for kdamond in paused:
        (kdamond / "state").write_text("on")
