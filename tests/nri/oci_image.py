"""A one-layer OCI image (an OCI layout tarball) from a static binary, for containerd to import.

No registry is reachable from the test machine, so test 2's pod sandbox ("pause") image and
container image are this: the static ``sleeper`` binary as ``/sleeper``, its entrypoint.
"""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
    tar.addfile(info)


def build_oci_layout(binary: Path, out: Path, name: str) -> Path:
    """Write ``out`` (a tar of an OCI image layout) holding image ``name`` with ``binary``."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for d in ("dev", "proc", "sys", "etc", "tmp"):
            _dir(layer, d)
        _add(layer, "sleeper", binary.read_bytes(), 0o755)
    layer_bytes = layer_buf.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/sleeper"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer_bytes)}],
    }, sort_keys=True).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                       "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}],
    }, sort_keys=True).encode()
    with tarfile.open(out, "w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _dir(tar, "blobs")
        _dir(tar, "blobs/sha256")
        for digest, data in ((layer_digest, layer_bytes), (config_digest, config), (manifest_digest, manifest)):
            _add(tar, f"blobs/sha256/{digest.split(':')[1]}", data)
        _add(tar, "index.json", index)
    return out
