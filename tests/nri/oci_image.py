"""A one-layer OCI image (an OCI layout tarball) from a static binary, for containerd to import.

No registry is reachable from the test machine, so test 2's pod sandbox ("pause") image and
container image are this: the static ``sleeper`` binary as ``/sleeper``, its entrypoint. The
writer is the project's (``tidal_dev.lab.oci``, which also writes the controllers' image).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from tidal_dev.lab import oci


def build_oci_layout(binary: Path, out: Path, name: str) -> Path:
    """Write ``out`` (a tar of an OCI image layout) holding image ``name`` with ``binary``."""
    with tempfile.TemporaryDirectory(prefix="oci-layer-", dir=Path(out).parent) as tmp:
        with oci.LayerWriter(Path(tmp) / "layer.tar") as writer:
            for d in ("dev", "proc", "sys", "etc", "tmp"):
                writer.add_dir(d)
            writer.add_bytes("sleeper", Path(binary).read_bytes(), 0o755)
        layer = writer.close()
        config = oci.image_config([layer], entrypoint=["/sleeper"], working_dir="/")
        return oci.write_oci_archive(Path(out), [layer], config, name)
