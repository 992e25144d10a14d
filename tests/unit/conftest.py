import pytest

from tidal.testing.real_cgroups import RealCgroups


@pytest.fixture
def real(tmp_path):
    cgroups = RealCgroups(tmp_path)
    try:
        yield cgroups
    finally:
        cgroups.cleanup()
        for path in cgroups.created:
            assert not path.exists(), f"{path} left behind"
