# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every Tidal module supports, on top of ``ansible.builtin.action_common_attributes`` (which
describes the attributes): ``tidal.colocation.attributes.changes`` for a module that changes
something, ``tidal.colocation.attributes.reads`` for one that only reads."""

from __future__ import annotations


class ModuleDocFragment:

    # A module that changes a file, sysfs or the cluster: predicts its change in check mode, shows it in diff mode.
    CHANGES = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

    # A module that only reads.
    READS = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
