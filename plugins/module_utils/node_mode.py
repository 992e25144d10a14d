# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's colocation mode from its labels: the rule of ``tidal.api.node_mode`` (which modules
cannot import on a managed host), its two switches only. A unit test
(tests/ansible/test_vendored.py) checks that it agrees with ``tidal.api.node_mode`` on a table of
label and annotation sets.

Two labels, each with a Volcano alias read when Tidal's label is absent (Tidal's wins):
``colocation.tidal.io/colocation`` (``volcano.sh/colocation``) and
``colocation.tidal.io/oversubscription`` (``volcano.sh/oversubscription``, not counted when
tidal-manager wrote it itself, as its marker annotation says). A value other than ``true`` or
``false`` counts as absent.
"""

from __future__ import annotations

from ansible_collections.tidal.colocation.plugins.module_utils import names

OFF = "off"
COLOCATION = "colocation"
OVERSUBSCRIPTION = "oversubscription"
COLOCATION_OVERSUBSCRIPTION = "colocation+oversubscription"
MODES = (OFF, COLOCATION, OVERSUBSCRIPTION, COLOCATION_OVERSUBSCRIPTION)

_SWITCHES = ((names.COLOCATION_NODE_LABEL, names.VOLCANO_COLOCATION_LABEL),
             (names.OVERSUBSCRIPTION_NODE_LABEL, names.VOLCANO_OVERSUBSCRIPTION_LABEL))


def label_value(labels, key):
    """True or False for a label set to ``true`` or ``false`` (spaces ignored); None otherwise."""
    raw = (labels or {}).get(key)
    if raw is None:
        return None
    value = raw.strip()
    if value in ("true", "false"):
        return value == "true"
    return None


def switches(labels, annotations=None):
    """(colocation, oversubscription) after the aliases."""
    labels = dict(labels or {})
    if (annotations or {}).get(names.VOLCANO_LABEL_WRITTEN_ANNOTATION) == "true":
        labels.pop(names.VOLCANO_OVERSUBSCRIPTION_LABEL, None)  # tidal-manager's output, not an input
    result = []
    for own, alias in _SWITCHES:
        value = label_value(labels, own)
        result.append(bool(label_value(labels, alias)) if value is None else value)
    return tuple(result)


def mode_name(colocation, oversubscription):
    """``off``, ``colocation``, ``oversubscription`` or ``colocation+oversubscription``."""
    if colocation and oversubscription:
        return COLOCATION_OVERSUBSCRIPTION
    if colocation:
        return COLOCATION
    if oversubscription:
        return OVERSUBSCRIPTION
    return OFF


def node_mode(labels, annotations=None):
    """The mode's name for a node's labels and annotations."""
    return mode_name(*switches(labels, annotations))
