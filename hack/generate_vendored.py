# SPDX-License-Identifier: Apache-2.0
"""Generate plugins/module_utils/policy_model.py from controllers/tidal/api/policy.py.

Modules run on a managed host, where the `tidal` package is usually not installed, so the
collection carries its own copy of the ColocationPolicy model: the `policy` module then rejects
exactly what tidal-manager, tidal-agent and the CRD reject, with the same field paths and rules.
The copy is generated, never edited (``make generate``; tests/unit/test_generated.py fails when
it is stale).

The only changes: the source's SPDX licence line gives way to the header (plugins/ is
GPL-3.0-or-later), the one import from `tidal.api.qos` becomes a constant, and `enum.StrEnum`
(Python 3.11) becomes the equivalent `str, enum.Enum` so the module runs on Python 3.9 too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _generated import ROOT, run

SOURCE = ROOT / "controllers" / "tidal" / "api" / "policy.py"
TARGET = ROOT / "plugins" / "module_utils" / "policy_model.py"

HEADER = """\
# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# (This copy is licensed as the rest of plugins/; its source in controllers/ is Apache-2.0.)
#
# GENERATED from controllers/tidal/api/policy.py by hack/generate_vendored.py: do not edit.
# Regenerate with `make generate`; tests/unit/test_generated.py fails when it is stale.
# The field() calls in the FieldSpec helpers below are inside dataclass bodies at their call sites.
# pylint: disable=invalid-field-call
"""


def policy_model() -> str:
    from tidal.api import qos

    text = SOURCE.read_text(encoding="utf-8")
    # The source's licence line (Apache-2.0, as controllers/); the copy's is in HEADER.
    text = text.removeprefix("# SPDX-License-Identifier: Apache-2.0\n")
    replacements = {
        "from tidal.api.qos import API_GROUP_VERSION\n":
            f'API_GROUP_VERSION = "{qos.API_GROUP_VERSION}"  # tidal.api.qos.API_GROUP_VERSION\n',
        "(enum.StrEnum):": "(str, enum.Enum):",
    }
    for old, new in replacements.items():
        if old not in text:
            raise SystemExit(f"{SOURCE.relative_to(ROOT)}: expected {old!r}; update {Path(__file__).name}")
        text = text.replace(old, new)
    return HEADER + text


def outputs() -> dict[Path, str]:
    return {TARGET: policy_model()}


if __name__ == "__main__":
    sys.exit(run(__doc__.splitlines()[0], outputs))
