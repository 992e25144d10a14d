# SPDX-License-Identifier: Apache-2.0
"""Reading and writing Volcano's ``volcano-scheduler.conf`` for Tidal's edits (pure).

One round trip (ruamel.yaml), shared by every part of the configuration Tidal owns
(:mod:`.volcano_usage`, :mod:`.volcano_node_order`): comments, order and everything Tidal does
not own stay as the user wrote them, and the same content gives the same text back, so callers
can compare texts to skip no-op writes.
"""
from __future__ import annotations

import io

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

__all__ = ["VolcanoConfigError", "dump", "load", "plugin"]


class VolcanoConfigError(ValueError):
    pass


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def load(text: str) -> CommentedMap:
    """The configuration as a round-trip mapping with a list of tiers.

    Raises:
        VolcanoConfigError: the text is not YAML, or not a mapping with a list of tiers.
    """
    try:
        conf = _yaml().load(text) if text.strip() else CommentedMap()
    except Exception as err:
        raise VolcanoConfigError(f"Volcano scheduler configuration is not valid YAML: {err}") from err
    if not isinstance(conf, dict):
        raise VolcanoConfigError("Volcano scheduler configuration: must be a mapping")
    tiers = conf.setdefault("tiers", [])
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        raise VolcanoConfigError("Volcano scheduler configuration: tiers must be a list of {plugins: [...]}")
    return conf


def plugin(conf: CommentedMap, name: str) -> CommentedMap:
    """The plugin ``name`` of any tier; added to the last tier (a new one when there is none)
    when missing."""
    tiers = conf["tiers"]
    found = next((p for t in tiers for p in t.get("plugins") or []
                  if isinstance(p, dict) and p.get("name") == name), None)
    if found is not None:
        return found
    if not tiers:
        tiers.append(CommentedMap(plugins=[]))
    if tiers[-1].get("plugins") is None:
        tiers[-1]["plugins"] = []
    found = CommentedMap(name=name)
    tiers[-1]["plugins"].append(found)
    return found


def dump(text: str, conf: CommentedMap) -> str:
    """``conf`` as text; ``text`` itself when the content is the same."""
    out = io.StringIO()
    _yaml().dump(conf, out)
    rendered = out.getvalue()
    return text if text.strip() == rendered.strip() else rendered
