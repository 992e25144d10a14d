# SPDX-License-Identifier: Apache-2.0
"""OCI image layouts as tar archives, written with :mod:`tarfile` (no Docker, no registry).

containerd imports such an archive with ``ctr images import``. A layer is written once, streamed
to a file while its two digests are computed: the diff ID (sha256 of the uncompressed tar, what
the image config lists) and the blob digest (sha256 of the bytes stored, gzip-compressed or not).
Layer entries keep their modes, owners, symlinks, hard links and extended attributes; device
nodes, FIFOs and sockets are left out (container runtimes create ``/dev`` themselves). Entries
are written in a fixed order and gzip gets no timestamp, so the same tree gives the same bytes.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Mapping, Sequence

__all__ = [
    "LAYER_MEDIA_TYPE", "LAYER_GZIP_MEDIA_TYPE", "Layer", "LayerWriter", "layer_from_directory",
    "layer_from_tar", "image_config", "write_oci_archive",
]

OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
_SKIPPED_TYPES = (tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE)


@dataclass(frozen=True)
class Layer:
    """A written layer blob: ``path`` holds the bytes whose sha256 is ``digest``."""

    path: Path
    digest: str
    diff_id: str
    size: int
    media_type: str

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to ``target``."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target, self.sha, self.size = target, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        self.target.write(view)
        return len(view)

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


class LayerWriter:
    """Writes one layer tar to ``path``; ``add`` entries, then ``close()`` returns the :class:`Layer`.

    ``compresslevel`` None stores the tar as is; 1-9 gzips it (no name, no timestamp in the
    gzip header, so the blob depends on the entries only).
    """

    def __init__(self, path: Path, compresslevel: int | None = None) -> None:
        self.path = Path(path)
        self._file = open(self.path, "wb")
        self._stored = _HashingWriter(self._file)
        self._gzip = None
        inner: IO[bytes] = self._stored
        if compresslevel is not None:
            self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=self._stored,
                                       compresslevel=compresslevel, mtime=0)
            inner = self._gzip
        self._plain = _HashingWriter(inner)
        self._tar = tarfile.open(fileobj=self._plain, mode="w|", format=tarfile.PAX_FORMAT)
        self.media_type = LAYER_GZIP_MEDIA_TYPE if compresslevel is not None else LAYER_MEDIA_TYPE
        self._layer: Layer | None = None

    def add(self, info: tarfile.TarInfo, fileobj: IO[bytes] | None = None) -> None:
        """Add an entry; regular files need ``fileobj`` with ``info.size`` bytes."""
        self._tar.addfile(info, fileobj)

    def add_bytes(self, name: str, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, gid, 0
        self.add(info, io.BytesIO(data))

    def add_dir(self, name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, mode, uid, gid, 0
        self.add(info)

    def close(self) -> Layer:
        if self._layer is None:
            self._tar.close()
            if self._gzip is not None:
                self._gzip.close()
            self._file.close()
            self._layer = Layer(self.path, self._stored.digest(), self._plain.digest(), self._stored.size,
                                self.media_type)
        return self._layer

    def __enter__(self) -> "LayerWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result, Path]]:
    """Every path under ``root`` (not ``root`` itself) in sorted, parents-first order, unfollowed."""
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries)
        subdirs = []
        for name in names:
            path = directory / name
            st = path.lstat()
            rel = f"{prefix}{name}"
            yield rel, st, path
            if stat.S_ISDIR(st.st_mode):
                subdirs.append((path, rel + "/"))
        stack.extend(reversed(subdirs))


def _xattrs(path: Path) -> dict[str, str]:
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return out
    for name in sorted(names):
        try:
            value = os.getxattr(path, name, follow_symlinks=False)
        except OSError:
            continue
        # tarfile encodes pax values as UTF-8 strings; surrogateescape keeps binary values intact
        out[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return out


def layer_from_directory(root: Path, out: Path, compresslevel: int | None = None) -> Layer:
    """A layer holding the tree under ``root`` as found (owners, modes, links, mtimes, xattrs)."""
    root = Path(root)
    first_of_inode: dict[tuple[int, int], str] = {}
    with LayerWriter(out, compresslevel) as writer:
        for rel, st, path in _walk(root):
            mode = st.st_mode
            info = tarfile.TarInfo(rel)
            info.mode, info.uid, info.gid = stat.S_IMODE(mode), st.st_uid, st.st_gid
            info.mtime = int(st.st_mtime)
            info.uname = info.gname = ""
            fileobj = None
            if stat.S_ISDIR(mode):
                info.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            elif stat.S_ISREG(mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in first_of_inode:
                    info.type, info.linkname = tarfile.LNKTYPE, first_of_inode[key]
                else:
                    if st.st_nlink > 1:
                        first_of_inode[key] = rel
                    info.size = st.st_size
                    fileobj = open(path, "rb")
            else:
                continue  # device nodes, FIFOs, sockets
            xattrs = _xattrs(path) if not stat.S_ISLNK(mode) else {}
            if xattrs:
                info.pax_headers = xattrs
            try:
                writer.add(info, fileobj)
            finally:
                if fileobj is not None:
                    fileobj.close()
        return writer.close()


def layer_from_tar(src: Path, out: Path, compresslevel: int | None = None, exclude=None) -> Layer:
    """A layer from a root-filesystem tarball (e.g. mmdebstrap's): entries and their order kept,
    names made relative (``./usr`` -> ``usr``), the root entry, device nodes and FIFOs dropped.
    ``exclude(name)`` may drop more entries (``name`` without the leading ``./``)."""
    with tarfile.open(src, "r|*") as source, LayerWriter(out, compresslevel) as writer:
        for info in source:
            name = info.name
            while name.startswith("./"):
                name = name[2:]
            name = name.strip("/")
            if name in ("", ".") or info.type in _SKIPPED_TYPES or (exclude is not None and exclude(name)):
                continue
            info.name = name
            if info.type == tarfile.LNKTYPE:
                target = info.linkname
                while target.startswith("./"):
                    target = target[2:]
                info.linkname = target.lstrip("/")
            info.uname = info.gname = ""
            info.mtime = int(info.mtime)
            # the pax header has priority over the fields: keep only the extended attributes
            info.pax_headers = {k: v for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr.")}
            writer.add(info, source.extractfile(info) if info.isreg() else None)
        return writer.close()


def image_config(layers: Sequence[Layer], *, entrypoint: Sequence[str] | None = None,
                 cmd: Sequence[str] | None = None, env: Sequence[str] | None = None,
                 user: str | None = None, working_dir: str = "/", labels: Mapping[str, str] | None = None,
                 architecture: str = "amd64", os_name: str = "linux", created: str | None = None) -> dict:
    """The OCI image configuration for ``layers`` (only the fields given are set)."""
    config: dict = {"WorkingDir": working_dir}
    if entrypoint is not None:
        config["Entrypoint"] = list(entrypoint)
    if cmd is not None:
        config["Cmd"] = list(cmd)
    if env:
        config["Env"] = list(env)
    if user is not None:
        config["User"] = user
    if labels:
        config["Labels"] = dict(labels)
    out = {"architecture": architecture, "os": os_name, "config": config,
           "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]}}
    if created is not None:
        out["created"] = created
    return out


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
    tar.addfile(info)


def _json(data) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def write_oci_archive(out: Path, layers: Sequence[Layer], config: dict, name: str,
                      annotations: Mapping[str, str] | None = None) -> Path:
    """Write ``out``: a tar of an OCI image layout with one image, ``name`` (``repo:tag``).

    The index entry carries ``io.containerd.image.name`` (the name ``ctr images import`` gives the
    image) and ``org.opencontainers.image.ref.name`` (the tag). ``config`` is the image
    configuration (see :func:`image_config`); its ``rootfs.diff_ids`` must match ``layers``.
    ``annotations`` go on the manifest. Written to a temporary name first, then renamed.
    """
    out = Path(out)
    if config.get("rootfs", {}).get("diff_ids") != [layer.diff_id for layer in layers]:
        raise ValueError("the image config's rootfs.diff_ids do not match the layers")
    config_bytes = _json(config)
    config_digest = _digest(config_bytes)
    manifest: dict = {
        "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config_bytes)},
        "layers": [layer.descriptor() for layer in layers],
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    manifest_bytes = _json(manifest)
    manifest_digest = _digest(manifest_bytes)
    tag = name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = _json({
        "schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{"mediaType": MANIFEST_MEDIA_TYPE, "digest": manifest_digest, "size": len(manifest_bytes),
                       "platform": {"architecture": config.get("architecture", "amd64"),
                                    "os": config.get("os", "linux")},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": tag}}],
    })
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, "oci-layout", OCI_LAYOUT)
            _add_dir(tar, "blobs")
            _add_dir(tar, "blobs/sha256")
            written = set()
            for layer in layers:
                if layer.digest in written:
                    continue
                written.add(layer.digest)
                info = tarfile.TarInfo(f"blobs/sha256/{layer.digest.split(':', 1)[1]}")
                info.size, info.mode, info.mtime = layer.size, 0o644, 0
                with open(layer.path, "rb") as blob:
                    tar.addfile(info, blob)
            for digest, data in ((config_digest, config_bytes), (manifest_digest, manifest_bytes)):
                _add_bytes(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", data)
            _add_bytes(tar, "index.json", index)
        tmp.rename(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
