# SPDX-License-Identifier: Apache-2.0
"""Every Event reason Tidal's components write is in the contract's list, which the console lists
Events by (one field-selected list per reason): an Event whose reason is missing there is one no
one sees in the console."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import tidal
from tidal.api.events import EVENT_REASONS
from tidal.console.overview import TIDAL_EVENT_REASONS

ROOT = Path(tidal.__file__).resolve().parent
REASON = re.compile(r"^(Tidal[A-Z][A-Za-z]+|BatchResourcesDropped)$")


def names_exported(tree: ast.Module) -> set[str]:
    """The strings of a module's ``__all__`` (class names such as ``TidalNRIPlugin``, not reasons)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            out.update(c.value for c in ast.walk(node.value)
                       if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return out


def reasons_written(component: str) -> dict[str, str]:
    """Every string literal shaped like one of Tidal's Event reasons in a component's code ->
    the file it is in."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / component).rglob("*.py")):
        tree = ast.parse(path.read_text())
        exported = names_exported(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and REASON.match(node.value):
                if node.value not in exported:
                    found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def test_every_reason_the_agent_and_the_manager_write_is_listed():
    written = {**reasons_written("agent"), **reasons_written("manager")}
    # the scan finds them: the agent's CPU interference Events and the manager's one
    assert {"TidalBECPUThrottled", "TidalEvicted", "BatchResourcesDropped"} <= set(written)
    missing = {reason: where for reason, where in written.items() if reason not in EVENT_REASONS}
    assert not missing, f"Event reasons written but not in tidal.api.events.EVENT_REASONS: {missing}"


def test_the_console_lists_events_by_the_contract_s_reasons():
    assert TIDAL_EVENT_REASONS is EVENT_REASONS
    assert all(description.startswith(("tidal-agent: ", "tidal-manager: ")) for description in EVENT_REASONS.values())
