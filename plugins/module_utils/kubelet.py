# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KubeletConfiguration keys Tidal owns (CPU manager, reservations, topology manager) and
their structural edit (pure; the module does the file I/O).

The file is parsed with ruamel.yaml's round-trip loader, so every key Tidal does not own keeps
its value, order and comments.
"""

from __future__ import annotations

import io
import re
import traceback

try:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    HAS_RUAMEL = True
    RUAMEL_IMPORT_ERROR = None
except ImportError:
    HAS_RUAMEL = False
    RUAMEL_IMPORT_ERROR = traceback.format_exc()

CPU_MANAGER_POLICIES = ("none", "static")
TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_MANAGER_SCOPES = ("container", "pod")
KIND = "KubeletConfiguration"

# What a CPU list may look like (kubelet's cpuset syntax): "0", "0-1", "0,2-3".
_CPU_LIST = re.compile(r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$")
_CPU_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")
# A Kubernetes quantity as the kubelet's reservations take it for memory and ephemeral storage
# (ASCII digits: Python's \d would let other scripts' digits through to the kubelet).
_BYTE_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([eE][0-9]+|[kMGTPE]i?|m)?$")
_PID_COUNT = re.compile(r"^[0-9]+$")
#: what systemReserved and kubeReserved may reserve (the kubelet's reservable resources)
RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")


class KubeletConfigError(ValueError):
    """Settings or a file the kubelet would refuse; the message names the field and the rule."""


def _cpu_millicores(quantity):
    text = str(quantity).strip()
    if not _CPU_QUANTITY.match(text):
        raise ValueError(text)
    return int(text[:-1]) if text.endswith("m") else int(round(float(text) * 1000))


def desired_keys(cpu_manager_policy=None, reserved_system_cpus=None, system_reserved=None,
                 kube_reserved=None, topology_manager_policy=None, topology_manager_scope=None,
                 cpu_manager_reconcile_period=None):
    """The top-level keys to set, from the module options (None: leave the key as it is).

    Raises KubeletConfigError for values the kubelet would refuse.
    """
    keys = {}
    if cpu_manager_policy is not None:
        if cpu_manager_policy not in CPU_MANAGER_POLICIES:
            raise KubeletConfigError("cpuManagerPolicy: must be one of %s, got %r"
                                     % (", ".join(CPU_MANAGER_POLICIES), cpu_manager_policy))
        keys["cpuManagerPolicy"] = cpu_manager_policy
    if reserved_system_cpus is not None:
        if reserved_system_cpus != "" and not _CPU_LIST.match(str(reserved_system_cpus)):
            raise KubeletConfigError("reservedSystemCPUs: must be a CPU list such as 0-1 or 0,2, got %r"
                                     % (reserved_system_cpus,))
        keys["reservedSystemCPUs"] = str(reserved_system_cpus)
    for name, reservation in (("systemReserved", system_reserved), ("kubeReserved", kube_reserved)):
        if reservation is None:
            continue
        for resource, quantity in reservation.items():
            if resource not in RESERVABLE:
                raise KubeletConfigError("%s: cannot reserve %r; the kubelet reserves %s"
                                         % (name, resource, ", ".join(RESERVABLE)))
            if isinstance(quantity, (dict, list, bool)) or quantity is None:
                raise KubeletConfigError("%s.%s: must be a quantity, got %r" % (name, resource, quantity))
            if resource == "cpu":
                try:
                    _cpu_millicores(quantity)
                except ValueError:
                    raise KubeletConfigError("%s.cpu: must be a CPU quantity such as 500m or 1, got %r"
                                             % (name, quantity))
            elif resource == "pid" and not _PID_COUNT.match(str(quantity).strip()):
                raise KubeletConfigError("%s.pid: must be a number of process IDs such as 1000, got %r"
                                         % (name, quantity))
            elif resource != "pid" and not _BYTE_QUANTITY.match(str(quantity).strip()):
                raise KubeletConfigError("%s.%s: must be a quantity such as 1Gi or 500Mi, got %r"
                                         % (name, resource, quantity))
        keys[name] = {str(k): str(v) for k, v in reservation.items()}
    if topology_manager_policy is not None:
        if topology_manager_policy not in TOPOLOGY_MANAGER_POLICIES:
            raise KubeletConfigError("topologyManagerPolicy: must be one of %s, got %r"
                                     % (", ".join(TOPOLOGY_MANAGER_POLICIES), topology_manager_policy))
        keys["topologyManagerPolicy"] = topology_manager_policy
    if topology_manager_scope is not None:
        if topology_manager_scope not in TOPOLOGY_MANAGER_SCOPES:
            raise KubeletConfigError("topologyManagerScope: must be one of %s, got %r"
                                     % (", ".join(TOPOLOGY_MANAGER_SCOPES), topology_manager_scope))
        keys["topologyManagerScope"] = topology_manager_scope
    if cpu_manager_reconcile_period is not None:
        keys["cpuManagerReconcilePeriod"] = cpu_manager_reconcile_period
    return keys


def check_static_reservation(config):
    """The static CPU manager needs CPUs kept back for system daemons: the kubelet refuses to
    start with ``cpuManagerPolicy: static`` and no CPU reservation at all."""
    if config.get("cpuManagerPolicy") != "static":
        return
    if str(config.get("reservedSystemCPUs") or "").strip():
        return
    reserved = 0
    for name in ("systemReserved", "kubeReserved"):
        quantity = (config.get(name) or {}).get("cpu")
        if quantity is not None:
            try:
                reserved += _cpu_millicores(quantity)
            except ValueError:
                raise KubeletConfigError("%s.cpu: must be a CPU quantity such as 500m or 1, got %r"
                                         % (name, quantity))
    if reserved <= 0:
        raise KubeletConfigError(
            "cpuManagerPolicy: static requires a CPU reservation: set reservedSystemCPUs, or "
            "systemReserved.cpu / kubeReserved.cpu greater than 0")


def _yaml():
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def load(text):
    """The parsed (round-trip) KubeletConfiguration; raises KubeletConfigError."""
    try:
        config = _yaml().load(text) if text.strip() else None
    except YAMLError as err:
        raise KubeletConfigError("kubelet config: not valid YAML: %s" % err)
    if config is None:
        raise KubeletConfigError("kubelet config: the file is empty; the kubelet needs at least "
                                 "apiVersion and kind")
    if not isinstance(config, dict):
        raise KubeletConfigError("kubelet config: must be a mapping, got %s" % type(config).__name__)
    if config.get("kind") != KIND:
        raise KubeletConfigError("kind: must be %s, got %r" % (KIND, config.get("kind")))
    return config


def edit(text, keys):
    """``(new_text, before, after)``: ``text`` with ``keys`` set; ``before``/``after`` hold the
    owned keys' values. Maps (``systemReserved``...) are merged: resources not named keep theirs."""
    config = load(text)
    before = {key: _plain(config.get(key)) for key in keys}
    for key, value in keys.items():
        if isinstance(value, dict):
            current = config.get(key)
            if not isinstance(current, dict):
                config[key] = dict(value)
            else:
                for sub_key, sub_value in value.items():
                    if current.get(sub_key) != sub_value:
                        current[sub_key] = sub_value
        elif config.get(key) != value:
            config[key] = value
    check_static_reservation(config)
    after = {key: _plain(config.get(key)) for key in keys}
    if before == after:
        return text, before, after
    stream = io.StringIO()
    _yaml().dump(config, stream)
    return stream.getvalue(), before, after


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
