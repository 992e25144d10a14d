# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A structural edit of Volcano's scheduler configuration (``volcano-scheduler.conf``), pure.

The configuration is YAML: ``actions`` (a comma-separated string), ``tiers`` (a list of
``{plugins: [...]}``), and optional ``configurations``. Tidal sets the actions, places the
plugins it needs in the tiers it needs and sets the plugin keys it owns; every other plugin,
argument, tier and comment is kept (ruamel.yaml round trip).
"""

from __future__ import annotations

import io
import traceback

try:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError
    HAS_RUAMEL = True
    RUAMEL_IMPORT_ERROR = None
except ImportError:
    HAS_RUAMEL = False
    RUAMEL_IMPORT_ERROR = traceback.format_exc()

KNOWN_ACTIONS = ("enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle")


#: The highest tier a plugin may be placed in: Volcano's configurations have two to four tiers,
#: and a tier far beyond would add as many empty tiers to the file.
MAX_TIER = 10


class SchedulerConfigError(ValueError):
    """A request or a configuration that cannot be applied; names the field and the rule."""


def _yaml():
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=2, offset=0)
    return yaml


def load(text):
    try:
        conf = _yaml().load(text) if text and text.strip() else None
    except YAMLError as err:
        raise SchedulerConfigError("scheduler configuration: not valid YAML: %s" % err)
    if conf is None:
        conf = CommentedMap()
    if not isinstance(conf, dict):
        raise SchedulerConfigError("scheduler configuration: must be a mapping")
    tiers = conf.get("tiers")
    if tiers is not None and (not isinstance(tiers, list)
                              or not all(isinstance(t, dict) and isinstance(t.get("plugins", []), list)
                                         for t in tiers)):
        raise SchedulerConfigError("tiers: must be a list of {plugins: [...]}")
    return conf


def actions_of(conf):
    return [a.strip() for a in str(conf.get("actions") or "").split(",") if a.strip()]


def _merge(target, values):
    """Deep-merge ``values`` into the mapping ``target``, writing only what differs."""
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif key not in target or target[key] != value:
            target[key] = value


def _find(tiers, name):
    for tier_index, tier in enumerate(tiers):
        for plugin_index, plugin in enumerate(tier.get("plugins") or []):
            if plugin.get("name") == name:
                return tier_index, plugin_index
    return None


def validate_request(actions, plugins):
    if actions is not None:
        if not actions:
            raise SchedulerConfigError("actions: must list at least one action")
        unknown = [a for a in actions if a not in KNOWN_ACTIONS]
        if unknown:
            raise SchedulerConfigError("actions: unknown %s; Volcano's actions are %s"
                                       % (", ".join(unknown), ", ".join(KNOWN_ACTIONS)))
        if len(set(actions)) != len(actions):
            raise SchedulerConfigError("actions: must not repeat an action, got %s" % ", ".join(actions))
    for index, plugin in enumerate(plugins or []):
        if not plugin.get("name"):
            raise SchedulerConfigError("plugins[%d].name: is required" % index)
        tier = plugin.get("tier")
        if tier is not None and not 1 <= int(tier) <= MAX_TIER:
            raise SchedulerConfigError("plugins[%d].tier: must be 1 to %d (tiers count from 1), got %s"
                                       % (index, MAX_TIER, tier))
        if "name" in (plugin.get("settings") or {}):
            raise SchedulerConfigError("plugins[%d].settings: must not set name (it would rename the plugin); "
                                       "use plugins[%d].name" % (index, index))


def edit(text, actions=None, plugins=None):
    """``(new_text, before, after)`` where before/after are plain dicts of the configuration.

    ``plugins``: a list of ``{name, state (present|absent), tier (1-based), first (bool),
    settings (dict merged into the plugin entry, e.g. enablePreemptable, arguments)}``. A present
    plugin without ``tier`` stays where it is, or joins the last tier when it is new.
    """
    validate_request(actions, plugins)
    conf = load(text)
    before = plain(conf)
    if actions is not None and actions_of(conf) != list(actions):
        conf["actions"] = ", ".join(actions)
    if plugins:
        if conf.get("tiers") is None:
            conf["tiers"] = []
        tiers = conf["tiers"]
        for plugin in plugins:
            _place(tiers, plugin)
    after = plain(conf)
    if before == after:
        return text, before, after
    stream = io.StringIO()
    _yaml().dump(conf, stream)
    return stream.getvalue(), before, after


def _place(tiers, request):
    name = request["name"]
    found = _find(tiers, name)
    if request.get("state", "present") == "absent":
        if found:
            del tiers[found[0]]["plugins"][found[1]]
        return
    wanted_tier = request.get("tier")
    if found is None:
        entry = CommentedMap()
        entry["name"] = name
    else:
        entry = tiers[found[0]]["plugins"][found[1]]
    _merge(entry, request.get("settings") or {})
    tier_index = (int(wanted_tier) - 1) if wanted_tier is not None else (
        found[0] if found else max(len(tiers) - 1, 0))
    while len(tiers) <= tier_index:
        tiers.append(CommentedMap([("plugins", [])]))
    target = tiers[tier_index].setdefault("plugins", [])
    first = bool(request.get("first"))
    if found is not None:
        moves = found[0] != tier_index or (first and found[1] != 0)
        if not moves:
            return
        del tiers[found[0]]["plugins"][found[1]]
    if first:
        target.insert(0, entry)
    else:
        target.append(entry)


def plain(value):
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
