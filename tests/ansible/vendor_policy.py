"""Generate plugins/module_utils/policy_model.py from controllers/tidal/api/policy.py.

Modules run on a managed host, where the `tidal` package is usually not installed, so the
collection carries its own copy of the ColocationPolicy model: the `policy` module then rejects
exactly what tidal-manager, tidal-agent and the CRD reject, with the same field paths and rules.
The copy is generated, never edited: `test_vendored_policy_model_matches_tidal_policy` fails when
it drifts, and `python tests/ansible/vendor_policy.py` rewrites it.

The only changes: the source's SPDX licence line gives way to the header (plugins/ is
GPL-3.0-or-later), the one import from `tidal.api.qos` becomes a constant, and `enum.StrEnum`
(Python 3.11) becomes the equivalent `str, enum.Enum` so the module runs on Python 3.9 too.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "controllers" / "tidal" / "api" / "policy.py"
TARGET = ROOT / "plugins" / "module_utils" / "policy_model.py"

HEADER = """\
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# (This copy is licensed as the rest of plugins/; its source in controllers/ is Apache-2.0.)
#
# GENERATED from controllers/tidal/api/policy.py by tests/ansible/vendor_policy.py: do not edit.
# Regenerate with `.venv/bin/python tests/ansible/vendor_policy.py`; a test fails on drift.
# The field() calls in the FieldSpec helpers below are inside dataclass bodies at their call sites.
# pylint: disable=invalid-field-call
"""


def generate() -> str:
    text = SOURCE.read_text(encoding="utf-8")
    # The source's licence line (Apache-2.0, as controllers/); the copy's is in HEADER.
    text = text.removeprefix("# SPDX-License-Identifier: Apache-2.0\n")
    replacements = {
        "from tidal.api.qos import API_GROUP_VERSION\n":
            'API_GROUP_VERSION = "colocation.tidal.io/v1alpha1"  # tidal.api.qos.API_GROUP_VERSION\n',
        "(enum.StrEnum):": "(str, enum.Enum):",
    }
    for old, new in replacements.items():
        if old not in text:
            raise SystemExit(f"{SOURCE}: expected {old!r}; update {__file__}")
        text = text.replace(old, new)
    return HEADER + text


if __name__ == "__main__":
    TARGET.write_text(generate(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
