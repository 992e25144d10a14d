"""The test helper `tidal_dev.testing.real_cgroups` when two test sessions share a parent level
(the unit suite run beside a flake hunt: both create their cgroups below the machine's same
cgroup): the first out leaves the level the other still uses, instead of failing on EBUSY."""
from __future__ import annotations

import secrets

from tidal_dev.testing.real_cgroups import RealCgroups


def test_a_parent_level_another_session_uses_is_left_not_an_error(hierarchy, tmp_path):
    shared = hierarchy.cpu_root / f"tidal-test-shared-{secrets.token_hex(4)}"
    first, second = RealCgroups(tmp_path / "a"), RealCgroups(tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        first.make(shared / first.name)
        second.make(shared / second.name)  # the level exists: created by the first
        assert first.created == [shared, shared / first.name] and second.created == [shared / second.name]
        first.cleanup()
        assert first.left_in_use == [shared] and not (shared / first.name).exists()
        assert (shared / second.name).is_dir()
        second.cleanup()
        assert not (shared / second.name).exists() and second.left_in_use == []
    finally:
        for path in (shared / first.name, shared / second.name, shared):
            if path.exists():
                path.rmdir()
