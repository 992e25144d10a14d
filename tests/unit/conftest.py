import os

import pytest

from tidal.agent.collector.cgroups import DEFAULT_CGROUP_ROOT, CgroupLayoutError, detect_hierarchy
from tidal_dev.testing.real_cgroups import RealCgroups


@pytest.fixture
def hierarchy():
    """This machine's cgroup hierarchy, for the tests that create real cgroups (skips without root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups and move processes into them")
    try:
        return detect_hierarchy(DEFAULT_CGROUP_ROOT)
    except CgroupLayoutError as error:
        pytest.skip(f"no usable cgroup hierarchy here: {error}")


@pytest.fixture
def real(tmp_path):
    cgroups = RealCgroups(tmp_path)
    try:
        yield cgroups
    finally:
        cgroups.cleanup()
        for path in set(cgroups.created) - set(cgroups.left_in_use):
            assert not path.exists(), f"{path} left behind"
