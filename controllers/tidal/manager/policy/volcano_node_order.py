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

from ruamel.yaml.comments import CommentedMap

from .volcano_conf import VolcanoConfigError, dump, load, plugin as find_plugin

__all__ = ["NODE_AFFINITY_WEIGHT", "PLUGIN", "WEIGHT_ARGUMENT", "VolcanoConfigError", "render"]

PLUGIN = "nodeorder"
WEIGHT_ARGUMENT = "nodeaffinity.weight"
#: Twice Volcano's default: a BE pod's 50-weight preference then counts as much as the
#: least-requested score (0-100) among the plugin's other scores.
NODE_AFFINITY_WEIGHT = 2


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
    conf = load(text)
    plugin = find_plugin(conf, PLUGIN)
    arguments = plugin.get("arguments")
    if arguments is None:
        arguments = plugin["arguments"] = CommentedMap()
    elif not isinstance(arguments, dict):
        raise VolcanoConfigError(f"Volcano scheduler configuration: plugin {PLUGIN}: arguments must be a mapping")
    if not _positive_integer(arguments.get(WEIGHT_ARGUMENT)):
        arguments[WEIGHT_ARGUMENT] = weight
    return dump(text, conf)
