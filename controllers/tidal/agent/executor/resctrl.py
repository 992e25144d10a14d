# SPDX-License-Identifier: Apache-2.0
"""resctrl writes: the agent's groups (created, their schemata set), their members (threads
moved in, one TID per write), and removing every group the agent owns.

Only groups whose name starts with the intent's ``prefix`` (``tidal-``) directly under the
resctrl root are ever created, written or removed (:func:`_check_group`); the root group's
schemata is never written. Nothing is journalled: the state is in the group names, so removing
``<root>/<prefix>*`` undoes everything (the kernel moves the threads back to the default group).
"""
from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.qos.resctrl_schemata import parse_schemata, render, satisfied

__all__ = ["ResctrlExecutor", "ResctrlGroup", "ResctrlMembers", "ResctrlRemoveGroups", "UnsafeGroupError",
           "remove_groups"]

log = logging.getLogger(__name__)


class UnsafeGroupError(ValueError):
    """A resctrl group outside the agent's own (``<root>/<prefix>*``)."""


@dataclass(frozen=True)
class ResctrlGroup:
    """Group ``<root>/<name>`` exists and its schemata satisfies ``lines``."""

    root: Path
    name: str
    lines: Mapping[str, Mapping[str, str]]
    prefix: str = "tidal-"

    @property
    def key(self) -> str:
        return f"{self.root}/{self.name}/schemata"


@dataclass(frozen=True)
class ResctrlMembers:
    """Every thread listed in ``thread_files`` (a cgroup's ``tasks`` / ``cgroup.threads``) is in
    group ``<root>/<name>``."""

    root: Path
    name: str
    thread_files: tuple[Path, ...]
    prefix: str = "tidal-"

    @property
    def key(self) -> str:
        return f"{self.root}/{self.name}/tasks"


@dataclass(frozen=True)
class ResctrlRemoveGroups:
    """No ``<root>/<prefix>*`` group is left."""

    root: Path
    prefix: str = "tidal-"

    @property
    def key(self) -> str:
        return f"{self.root}/{self.prefix}*"


def _check_group(root: Path, name: str, prefix: str) -> None:
    if not prefix or not name.startswith(prefix) or "/" in name or name in (".", ".."):
        raise UnsafeGroupError(f"{root}/{name}: not a group of the agent ({prefix}*)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def remove_groups(root: Path, prefix: str = "tidal-", remove: Callable[[Path], None] = Path.rmdir) -> list[tuple[str, str]]:
    """Remove every ``<prefix>*`` group (its threads return to the default group). ``remove`` is
    ``rmdir`` (a resctrl group directory goes with its files); tests of recorded trees pass
    ``shutil.rmtree``."""
    problems = []
    try:
        groups = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    except OSError:
        return []
    for group in groups:
        _check_group(root, group.name, prefix)
        try:
            remove(group)
            log.info("resctrl group %s removed", group.name)
        except OSError as err:
            problems.append((str(group), err.strerror or str(err)))
    return problems


class ResctrlExecutor:
    def __init__(self, remove: Callable[[Path], None] = Path.rmdir) -> None:
        self.remove = remove
        self.moved = 0

    def execute(self, intents: Sequence[object], done: set[str], problems: list[tuple[str, str]]) -> None:
        for intent in intents:
            if isinstance(intent, (ResctrlGroup, ResctrlMembers)):
                _check_group(intent.root, intent.name, intent.prefix)
        members: dict[str, set[str]] = {}
        for intent in intents:
            if isinstance(intent, ResctrlRemoveGroups):
                found = remove_groups(intent.root, intent.prefix, self.remove)
                problems += found
                if not found:
                    done.add(intent.key)
            elif isinstance(intent, ResctrlGroup):
                group = intent.root / intent.name
                try:
                    group.mkdir(exist_ok=True)
                    if not satisfied(parse_schemata(_read(group / "schemata") or ""), intent.lines):
                        (group / "schemata").write_text(render(intent.lines))
                        log.info("resctrl group %s: %s", intent.name, render(intent.lines).strip().replace("\n", " "))
                    done.add(intent.key)
                except (OSError, ValueError) as err:
                    problems.append((str(group / "schemata"), str(getattr(err, "strerror", None) or err)))
            elif isinstance(intent, ResctrlMembers):
                wanted: set[str] = set()
                for file in intent.thread_files:
                    wanted.update((_read(file) or "").split())
                if not wanted:
                    continue
                tasks = intent.root / intent.name / "tasks"
                if intent.key not in members:
                    members[intent.key] = set((_read(tasks) or "").split())
                have = members[intent.key]
                for tid in sorted(wanted - have, key=int):
                    try:
                        with open(tasks, "a", encoding="ascii") as f:
                            f.write(tid)
                        have.add(tid)
                        self.moved += 1
                    except OSError as err:
                        if err.errno != errno.ESRCH:  # thread exited meanwhile: nothing to move
                            problems.append((str(tasks), err.strerror or str(err)))
