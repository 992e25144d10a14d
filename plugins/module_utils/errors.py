# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one exception Tidal's module helpers raise (as kubernetes.core's ``CoreException``).

Helpers raise `ModuleError` with the message for the user and the result keys that say what was
done before the failure (``changed``, ``nodes``, ...); the module's ``main`` catches it and calls
``module.fail_json(**err.result)`` in one place.
"""

from __future__ import annotations


class ModuleError(Exception):
    """A failure to report: ``msg`` and the extra result keys ``details``."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.msg = msg
        self.details = details

    @property
    def result(self):
        """The keyword arguments for ``module.fail_json``: ``msg`` plus the details."""
        return dict(self.details, msg=self.msg)
