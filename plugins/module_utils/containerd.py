# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""containerd's NRI settings: version rules and a structural edit of config.toml (pure).

The file is parsed with tomlkit, which keeps every other table, key, comment and the layout; only
the ``[plugins."io.containerd.nri.v1.nri"]`` table is set, as a whole.
"""

from __future__ import annotations

import re
import traceback

try:
    import tomlkit
    HAS_TOMLKIT = True
    TOMLKIT_IMPORT_ERROR = None
except ImportError:
    HAS_TOMLKIT = False
    TOMLKIT_IMPORT_ERROR = traceback.format_exc()

#: The NRI plugin's table; the same ID in config schema 2 (containerd 1.7) and 3 (2.x).
NRI_PLUGIN = "io.containerd.nri.v1.nri"
#: NRI became usable (and configurable under this plugin ID) in containerd 1.7.
MINIMUM_CONTAINERD = (1, 7)
SUPPORTED_SCHEMAS = (2, 3)

NRI_DEFAULTS = {
    "disable": False,
    "disable_connections": False,
    "plugin_config_path": "/etc/nri/conf.d",
    "plugin_path": "/opt/nri/plugins",
    "plugin_registration_timeout": "5s",
    "plugin_request_timeout": "2s",
    "socket_path": "/var/run/nri/nri.sock",
}

_VERSION = re.compile(r"\bv?(\d+)\.(\d+)(?:\.(\d+))?")


class ContainerdConfigError(ValueError):
    """The version or the file cannot be configured; the message names the field and the rule."""


def parse_containerd_version(text):
    """``(major, minor, patch)`` from ``containerd --version`` output or a bare ``1.7.13``.

    ``containerd github.com/containerd/containerd v1.7.13 7c3aca7`` and
    ``containerd containerd.io 1.6.21 3dce8eb`` (Docker's package) both work.
    """
    for token in str(text).split():
        match = _VERSION.fullmatch(token.strip())
        if match:
            return tuple(int(part or 0) for part in match.groups())
    raise ContainerdConfigError("containerd_version: cannot find a version number in %r" % (text,))


def check_containerd_version(version):
    """Raise unless ``version`` (a tuple) supports NRI."""
    if tuple(version[:2]) < MINIMUM_CONTAINERD:
        raise ContainerdConfigError(
            "containerd_version: containerd %s has no NRI support; NRI needs containerd >= %d.%d"
            % (".".join(str(part) for part in version), MINIMUM_CONTAINERD[0], MINIMUM_CONTAINERD[1]))


def expected_schema(version):
    """The config schema version containerd ``version`` writes by default (2 or 3)."""
    return 3 if version[0] >= 2 else 2


def schema_of(document):
    """The ``version`` key of a parsed config.toml; absent means schema 1."""
    value = document.get("version", 1)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ContainerdConfigError("version: must be an integer, got %r" % (value,))


def check_schema(schema, containerd_version=None):
    if schema not in SUPPORTED_SCHEMAS:
        raise ContainerdConfigError(
            "version: config schema %s is not supported; NRI is configured in schema 2 (containerd "
            "1.7) or 3 (containerd 2.x): run `containerd config migrate`" % schema)
    if containerd_version is not None and schema == 3 and containerd_version[0] < 2:
        raise ContainerdConfigError(
            "version: config schema 3 needs containerd >= 2.0, this node has %s"
            % ".".join(str(part) for part in containerd_version))


def nri_settings(**overrides):
    """The whole NRI table: the defaults with ``overrides`` (None keeps a default)."""
    settings = dict(NRI_DEFAULTS)
    for key, value in overrides.items():
        if key not in NRI_DEFAULTS:
            raise ContainerdConfigError("%s: not an NRI setting; known: %s" % (key, ", ".join(NRI_DEFAULTS)))
        if value is not None:
            settings[key] = value
    return settings


def current_nri(document):
    """The NRI table of a parsed config as a plain dict, or None when it has none."""
    plugins = document.get("plugins")
    if plugins is None or NRI_PLUGIN not in plugins:
        return None
    return {key: _plain(value) for key, value in plugins[NRI_PLUGIN].items()}


def set_nri(text, settings, containerd_version=None):
    """``(new_text, before, after)``: config.toml text with the NRI table set to ``settings``.

    ``before``/``after`` are the NRI tables as dicts (``before`` is None when there was none).
    An empty file starts a schema of the containerd version's default. Raises
    ContainerdConfigError for a schema NRI cannot be configured in.
    """
    if not text.strip():
        schema = expected_schema(containerd_version) if containerd_version else 2
        document = tomlkit.document()
        document["version"] = schema
    else:
        try:
            document = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as err:
            raise ContainerdConfigError("config.toml: not valid TOML: %s" % err)
    check_schema(schema_of(document), containerd_version)
    before = current_nri(document)
    if before == settings:
        return text, before, settings
    plugins = document.get("plugins")
    if plugins is None:
        plugins = tomlkit.table(is_super_table=True)
        document["plugins"] = plugins
    table = tomlkit.table()
    for key, value in settings.items():
        table[key] = value
    if NRI_PLUGIN in plugins:
        # Replace the values in place so the table keeps its position and comments.
        existing = plugins[NRI_PLUGIN]
        for key in list(existing.keys()):
            if key not in settings:
                del existing[key]
        for key, value in settings.items():
            existing[key] = value
    else:
        plugins[NRI_PLUGIN] = table
    return tomlkit.dumps(document), before, dict(settings)


def _plain(value):
    return value.unwrap() if hasattr(value, "unwrap") else value
