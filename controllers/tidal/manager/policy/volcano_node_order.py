# SPDX-License-Identifier: Apache-2.0
"""Node-affinity scoring in Volcano's scheduler configuration (pure).

The admission webhook gives pods *preferred* node affinities (BE pods towards oversold or
colocation nodes, online pods away from oversold ones). Volcano scores preferred node affinity in
its ``nodeorder`` plugin, with ``arguments["nodeaffinity.weight"]`` as the multiplier (Volcano's
default is 1; 0 turns the scoring off, and without the plugin nothing scores it at all).

Tidal ensures, in ``volcano-scheduler.conf``:

* the ``nodeorder`` plugin is present (added to the last tier when missing, where Volcano's own
  default configuration has it);
* its ``nodeaffinity.weight`` is a positive integer: `NODE_AFFINITY_WEIGHT` when absent, zero,
  negative or not an integer. A positive value the user chose is kept.

Everything else — the plugin's other weights, other plugins, tiers, comments — stays as the user
wrote it (ruamel.yaml round trip).
"""
from __future__ import annotations

import io

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

__all__ = ["NODE_AFFINITY_WEIGHT", "PLUGIN", "WEIGHT_ARGUMENT", "VolcanoConfigError", "render"]

PLUGIN = "nodeorder"
WEIGHT_ARGUMENT = "nodeaffinity.weight"
#: Twice Volcano's default: a BE pod's 50-weight preference then counts as much as the
#: least-requested score (0-100) among the plugin's other scores.
NODE_AFFINITY_WEIGHT = 2


class VolcanoConfigError(ValueError):
    pass


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def _positive_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def render(text: str, weight: int = NODE_AFFINITY_WEIGHT) -> str:
    """The configuration ``text`` with ``nodeorder`` scoring node affinity; the same text when
    nothing changes.

    Raises:
        VolcanoConfigError: the text is not YAML, or not a mapping with a list of tiers.
    """
    if not _positive_integer(weight):
        raise ValueError(f"nodeaffinity.weight must be a positive integer, got {weight!r}")
    yaml = _yaml()
    try:
        conf = yaml.load(text) if text.strip() else CommentedMap()
    except Exception as err:
        raise VolcanoConfigError(f"Volcano scheduler configuration is not valid YAML: {err}") from err
    if not isinstance(conf, dict):
        raise VolcanoConfigError("Volcano scheduler configuration: must be a mapping")
    tiers = conf.setdefault("tiers", [])
    if not isinstance(tiers, list) or not all(isinstance(t, dict) for t in tiers):
        raise VolcanoConfigError("Volcano scheduler configuration: tiers must be a list of {plugins: [...]}")
    plugin = next((p for t in tiers for p in t.get("plugins") or []
                   if isinstance(p, dict) and p.get("name") == PLUGIN), None)
    if plugin is None:
        if not tiers:
            tiers.append(CommentedMap(plugins=[]))
        if tiers[-1].get("plugins") is None:
            tiers[-1]["plugins"] = []
        plugin = CommentedMap(name=PLUGIN)
        tiers[-1]["plugins"].append(plugin)
    arguments = plugin.get("arguments")
    if arguments is None:
        arguments = plugin["arguments"] = CommentedMap()
    elif not isinstance(arguments, dict):
        raise VolcanoConfigError(f"Volcano scheduler configuration: plugin {PLUGIN}: arguments must be a mapping")
    if not _positive_integer(arguments.get(WEIGHT_ARGUMENT)):
        arguments[WEIGHT_ARGUMENT] = weight
    out = io.StringIO()
    yaml.dump(conf, out)
    rendered = out.getvalue()
    return text if text.strip() == rendered.strip() else rendered
