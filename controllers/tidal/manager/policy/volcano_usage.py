# SPDX-License-Identifier: Apache-2.0
"""Load-aware scheduling in Volcano's scheduler configuration (pure).

Tidal owns, in ``volcano-scheduler.conf``:

* the ``usage`` plugin's ``enablePredicate`` (the policy's ``loadAwareScheduling.enabled``) and
  its ``arguments.thresholds.cpu`` / ``.mem`` (the policy's thresholds, percent); the plugin is
  added to the last tier when missing;
* with a Prometheus address configured, ``metrics.type`` (``prometheus``), ``metrics.address``
  and ``metrics.interval`` — where Volcano reads node usage from.

Everything else — actions, other plugins and their arguments, tiers, comments, the usage
plugin's weights — stays as the user wrote it (ruamel.yaml round trip).
"""
from __future__ import annotations

from collections.abc import Mapping

from ruamel.yaml.comments import CommentedMap

from tidal.api.policy import LoadAwareScheduling

from .volcano_conf import VolcanoConfigError, dump, load, plugin as find_plugin

__all__ = ["VolcanoConfigError", "render"]

PLUGIN = "usage"


def render(text: str, load_aware: LoadAwareScheduling, metrics: Mapping[str, str] | None = None) -> str:
    """The configuration ``text`` with Tidal's keys set; the same text when nothing changes."""
    conf = load(text)
    plugin = find_plugin(conf, PLUGIN)
    plugin["enablePredicate"] = bool(load_aware.enabled)
    arguments = plugin.setdefault("arguments", CommentedMap())
    thresholds = arguments.setdefault("thresholds", CommentedMap())
    thresholds["cpu"] = int(load_aware.cpu_threshold_percent)
    thresholds["mem"] = int(load_aware.memory_threshold_percent)
    if metrics:
        section = conf.setdefault("metrics", CommentedMap())
        for key, value in metrics.items():
            section[key] = value
    return dump(text, conf)
