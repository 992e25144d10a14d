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

import io
from collections.abc import Mapping

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from tidal.api.policy import LoadAwareScheduling

__all__ = ["VolcanoConfigError", "render"]

PLUGIN = "usage"


class VolcanoConfigError(ValueError):
    pass


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def render(text: str, load_aware: LoadAwareScheduling, metrics: Mapping[str, str] | None = None) -> str:
    """The configuration ``text`` with Tidal's keys set; the same text when nothing changes."""
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
    plugin = next((p for t in tiers for p in t.get("plugins") or [] if isinstance(p, dict) and p.get("name") == PLUGIN),
                  None)
    if plugin is None:
        if not tiers:
            tiers.append(CommentedMap(plugins=[]))
        plugin = CommentedMap(name=PLUGIN)
        tiers[-1].setdefault("plugins", []).append(plugin)
    plugin["enablePredicate"] = bool(load_aware.enabled)
    arguments = plugin.setdefault("arguments", CommentedMap())
    thresholds = arguments.setdefault("thresholds", CommentedMap())
    thresholds["cpu"] = int(load_aware.cpu_threshold_percent)
    thresholds["mem"] = int(load_aware.memory_threshold_percent)
    if metrics:
        section = conf.setdefault("metrics", CommentedMap())
        for key, value in metrics.items():
            section[key] = value
    out = io.StringIO()
    yaml.dump(conf, out)
    rendered = out.getvalue()
    # the same content dumps identically, so callers can compare texts to skip no-op writes
    return text if _same(text, rendered) else rendered


def _same(a: str, b: str) -> bool:
    return a.strip() == b.strip()
