# Copyright: Tidal maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a configuration file only when its content changed: check mode, diff, backup, mode."""

from __future__ import annotations

import os
import tempfile


def read_text(module, path, missing_ok=False):
    """The file's text, or None when it is missing and ``missing_ok``; fails the module otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        if missing_ok:
            return None
        module.fail_json(msg="path: %s does not exist" % path)
    except OSError as err:
        module.fail_json(msg="path: cannot read %s: %s" % (path, err))


def write_if_changed(module, path, before_text, after_text, result):
    """Write ``after_text`` to ``path`` when it differs (not in check mode), keeping a backup
    when ``backup`` is set, then apply the file attributes (mode, owner, group). Updates
    ``result`` with ``changed``, ``backup_file`` and, in diff mode, ``diff``."""
    changed = before_text != after_text
    if changed and module._diff:
        result["diff"] = {"before": before_text or "", "after": after_text,
                          "before_header": path, "after_header": path}
    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            module.fail_json(msg="path: directory %s does not exist" % directory)
        handle, temporary = tempfile.mkstemp(dir=module.tmpdir)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(after_text)
        # The file attributes go on the new content first: a mode, owner or group that cannot
        # be applied fails the module here, before the file (or a backup of it) is touched.
        module.set_fs_attributes_if_different(module.load_file_common_arguments(module.params, path=temporary), False)
        if module.params.get("backup") and before_text is not None:
            result["backup_file"] = module.backup_local(path)
        module.atomic_move(temporary, path, unsafe_writes=module.params.get("unsafe_writes", False))
    if os.path.exists(path):
        file_args = module.load_file_common_arguments(module.params, path=path)
        changed = module.set_fs_attributes_if_different(file_args, changed)
    result["changed"] = changed
    return changed
