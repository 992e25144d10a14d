"""The OCI writer (tidal_dev.lab.oci) and the pure parts of the image recipe (tidal_dev.lab.image)."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tomllib
from pathlib import Path

import pytest

from tidal_dev.lab import image, oci

ROOT = Path(__file__).resolve().parents[2]


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def layer_members(blob: bytes) -> dict[str, tarfile.TarInfo]:
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {m.name: m for m in tar}


def small_layer(tmp_path: Path, compresslevel: int | None, name: str = "layer") -> oci.Layer:
    with oci.LayerWriter(tmp_path / name, compresslevel) as writer:
        writer.add_dir("etc")
        writer.add_bytes("etc/hello", b"hello\n", 0o640, uid=65532, gid=65532)
        writer.add_bytes("entry", b"#!/bin/sh\n", 0o755)
    return writer.close()


# --------------------------------------------------------------------------------------------
# the archive: blobs, digests, index

@pytest.mark.parametrize("compresslevel, media_type", [
    (None, oci.LAYER_MEDIA_TYPE),
    (1, oci.LAYER_GZIP_MEDIA_TYPE),
    (9, oci.LAYER_GZIP_MEDIA_TYPE),
])
def test_manifest_config_and_layer_digests_match_the_blobs(tmp_path, compresslevel, media_type):
    layer = small_layer(tmp_path, compresslevel)
    config = oci.image_config([layer], cmd=["entry"], env=["PATH=/bin"], user="65532:65532",
                              labels={"org.opencontainers.image.licenses": "Apache-2.0"})
    files = read_archive(oci.write_oci_archive(tmp_path / "img.tar", [layer], config, "localhost/t:1"))
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {name.removeprefix("blobs/sha256/"): data for name, data in files.items() if name.startswith("blobs/")}
    for digest, data in blobs.items():
        assert sha256(data) == f"sha256:{digest}"
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    manifest_bytes = blobs[entry["digest"].split(":")[1]]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    config_bytes = blobs[manifest["config"]["digest"].split(":")[1]]
    assert manifest["config"]["size"] == len(config_bytes)
    assert json.loads(config_bytes) == config
    (layer_desc,) = manifest["layers"]
    layer_bytes = blobs[layer_desc["digest"].split(":")[1]]
    assert layer_desc == {"mediaType": media_type, "digest": sha256(layer_bytes), "size": len(layer_bytes)}
    plain = gzip.decompress(layer_bytes) if compresslevel else layer_bytes
    assert json.loads(config_bytes)["rootfs"] == {"type": "layers", "diff_ids": [sha256(plain)]}
    assert set(layer_members(layer_bytes)) == {"etc", "etc/hello", "entry"}


@pytest.mark.parametrize("name, tag", [
    ("localhost/tidal:0.1.0", "0.1.0"),
    ("tidal.local/sleeper:1", "1"),
    ("localhost:5000/tidal", "latest"),
    ("registry.example.com:443/team/tidal:v2-rc.1", "v2-rc.1"),
])
def test_index_names_the_image_for_containerd_and_the_tag(tmp_path, name, tag):
    layer = small_layer(tmp_path, None)
    archive = oci.write_oci_archive(tmp_path / "img.tar", [layer], oci.image_config([layer]), name)
    (entry,) = json.loads(read_archive(archive)["index.json"])["manifests"]
    assert entry["annotations"] == {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert image.archive_image(archive) == (name, entry["digest"], "linux/amd64")


def test_the_same_entries_give_the_same_bytes(tmp_path):
    first, second = small_layer(tmp_path, 6, "a"), small_layer(tmp_path, 6, "b")
    assert first.path.read_bytes() == second.path.read_bytes()
    assert (first.digest, first.diff_id) == (second.digest, second.diff_id)


def test_a_config_for_other_layers_is_refused(tmp_path):
    layer = small_layer(tmp_path, None, "a")
    with oci.LayerWriter(tmp_path / "b") as writer:
        writer.add_bytes("other", b"")
    other = writer.close()
    with pytest.raises(ValueError, match="diff_ids"):
        oci.write_oci_archive(tmp_path / "img.tar", [layer], oci.image_config([other]), "localhost/t:1")
    assert not list(tmp_path.glob("img.tar*"))


@pytest.mark.parametrize("kwargs, expected", [
    ({}, {"WorkingDir": "/"}),
    ({"entrypoint": ["/sleeper"]}, {"WorkingDir": "/", "Entrypoint": ["/sleeper"]}),
    ({"cmd": ["tidal-manager"], "user": "65532:65532", "env": ["A=1"], "labels": {"k": "v"}, "working_dir": "/w"},
     {"WorkingDir": "/w", "Cmd": ["tidal-manager"], "User": "65532:65532", "Env": ["A=1"], "Labels": {"k": "v"}}),
])
def test_image_config_sets_only_the_fields_given(tmp_path, kwargs, expected):
    layer = small_layer(tmp_path, None)
    config = oci.image_config([layer], **kwargs)
    assert config["config"] == expected
    assert config["rootfs"]["diff_ids"] == [layer.diff_id]


# --------------------------------------------------------------------------------------------
# layers from a directory and from a root filesystem tarball

def test_layer_from_directory_keeps_symlinks_hardlinks_modes_and_skips_fifos(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_bytes(b"x" * 100)
    (root / "usr" / "bin" / "tool").chmod(0o4755)
    (root / "secret").write_text("s")
    (root / "secret").chmod(0o600)
    (root / "bin").symlink_to("usr/bin")
    (root / "dangling").symlink_to("/nowhere")
    os.link(root / "usr" / "bin" / "tool", root / "usr" / "bin" / "tool-alias")
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    os.mkfifo(root / "fifo")
    layer = oci.layer_from_directory(root, tmp_path / "layer.tar.gz", compresslevel=1)
    members = layer_members(layer.path.read_bytes())
    assert list(members) == ["bin", "dangling", "secret", "tmp", "usr", "usr/bin", "usr/bin/tool",
                             "usr/bin/tool-alias"]
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
    assert members["dangling"].issym() and members["dangling"].linkname == "/nowhere"
    assert members["usr/bin/tool"].isreg() and members["usr/bin/tool"].mode == 0o4755
    assert members["usr/bin/tool-alias"].islnk() and members["usr/bin/tool-alias"].linkname == "usr/bin/tool"
    assert members["secret"].mode == 0o600
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    owner = (os.getuid(), os.getgid())
    assert all((m.uid, m.gid) == owner for m in members.values())


def _rootfs_tar(path: Path) -> Path:
    """A tarball like mmdebstrap's: ./-prefixed names, a root entry, device nodes, owners, xattrs."""
    long_name = "./usr/lib/" + "/".join(["d" * 40] * 4) + "/file"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        def add(name, type_=tarfile.REGTYPE, data=b"", mode=0o644, uid=0, gid=0, linkname="", pax=None):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid, info.linkname = type_, mode, uid, gid, linkname
            info.uname, info.gname, info.mtime = "root", "root", 1700000000.25
            info.size = len(data)
            if pax:
                info.pax_headers = pax
            tar.addfile(info, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)
        add("./", tarfile.DIRTYPE, mode=0o755)
        add("./dev/", tarfile.DIRTYPE, mode=0o755)
        add("./dev/null", tarfile.CHRTYPE, mode=0o666)
        add("./dev/sda", tarfile.BLKTYPE, mode=0o660, gid=6)
        add("./dev/initctl", tarfile.FIFOTYPE, mode=0o600)
        add("./dev/fd", tarfile.SYMTYPE, mode=0o777, linkname="/proc/self/fd")
        add("./usr/", tarfile.DIRTYPE, mode=0o755)
        add("./usr/bin/ping", data=b"elf", mode=0o755, pax={"SCHILY.xattr.security.capability": "\x01\x00"})
        add("./usr/bin/ping4", tarfile.LNKTYPE, linkname="./usr/bin/ping")
        add("./var/mail/", tarfile.DIRTYPE, mode=0o2775, gid=8)
        add("./home/nonroot/", tarfile.DIRTYPE, mode=0o700, uid=65532, gid=65532)
        add("./etc/apt/sources.list", data=b"deb mirror")
        add(long_name, data=b"deep")
    return path


def test_layer_from_tar_normalises_names_and_drops_the_root_and_device_nodes(tmp_path):
    src = _rootfs_tar(tmp_path / "rootfs.tar")
    layer = oci.layer_from_tar(src, tmp_path / "layer.tar", exclude=lambda name: name.startswith("etc/apt/"))
    members = layer_members(layer.path.read_bytes())
    long_name = "usr/lib/" + "/".join(["d" * 40] * 4) + "/file"
    assert list(members) == ["dev", "dev/fd", "usr", "usr/bin/ping", "usr/bin/ping4", "var/mail", "home/nonroot",
                             long_name]
    assert members["dev/fd"].issym() and members["dev/fd"].linkname == "/proc/self/fd"
    assert members["usr/bin/ping4"].islnk() and members["usr/bin/ping4"].linkname == "usr/bin/ping"
    assert members["usr/bin/ping"].pax_headers.get("SCHILY.xattr.security.capability") == "\x01\x00"
    assert members["var/mail"].mode == 0o2775 and members["var/mail"].gid == 8
    assert (members["home/nonroot"].uid, members["home/nonroot"].gid, members["home/nonroot"].mode) == \
        (65532, 65532, 0o700)
    assert members[long_name].size == 4
    assert all(m.uname == "" and m.mtime == 1700000000 for m in members.values())
    assert layer.diff_id == layer.digest == sha256(layer.path.read_bytes())


# --------------------------------------------------------------------------------------------
# the recipe

def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_image_reference_is_localhost_tidal_at_the_project_version():
    assert image.image_reference() == f"localhost/tidal:{pyproject_version()}"
    assert image.labels()["org.opencontainers.image.version"] == pyproject_version()


def test_the_containerfile_builds_the_same_image():
    text = (ROOT / "Containerfile").read_text()
    assert re.search(r"^ARG VERSION=(\S+)$", text, re.M).group(1) == pyproject_version()
    assert re.search(r"^USER (\S+)$", text, re.M).group(1) == f"{image.USER_ID}:{image.USER_ID}"
    assert f"COPY --from=web /out {image.WEB_DIR}" in text
    for env in image.ENV:
        key, value = env.split("=", 1)
        assert re.search(rf"^(ENV |    ){key}={re.escape(value)}( \\)?$", text, re.M), env
    for key, value in image.labels().items():
        if key != "org.opencontainers.image.version":
            assert f'{key}="{value}"' in text
    assert f"CMD {json.dumps(list(image.CMD))}" in text
    assert "iproute2" in text and "npm ci" in text
    galaxy = (ROOT / "galaxy.yml").read_text()
    assert f"repository: {image.SOURCE_URL}" in galaxy


def test_the_build_context_leaves_out_venv_caches_and_node_modules():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*") + 1:lines.index("*") + 5] == ["!pyproject.toml", "!README.md", "!LICENSE",
                                                                 "!controllers"]
    assert {".venv", "**/node_modules", "**/__pycache__"} <= set(lines)


def test_mmdebstrap_gets_the_host_apt_files_by_path_and_minbase(tmp_path):
    sources, opt = tmp_path / "debian.sources", tmp_path / "99opts"
    cmd = image.mmdebstrap_command(tmp_path / "rootfs.tar", tmp_path / "tidal-stage", sources, [opt])
    assert cmd[0] == "mmdebstrap" and cmd[-3:] == ["bookworm", str(tmp_path / "rootfs.tar"), str(sources)]
    assert "--variant=minbase" in cmd and "--format=tar" in cmd and f"--aptopt={opt}" in cmd
    assert "--include=python3,python3-venv,ca-certificates,iproute2" in cmd
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in cmd
    hooks = [c.split("=", 1)[1] for c in cmd if c.startswith("--customize-hook=")]
    assert hooks[0] == f"copy-in {tmp_path / 'tidal-stage'} /tmp"
    assert "pip install --no-index --find-links /tmp/tidal-stage/wheels" in hooks[1]
    assert f"useradd --uid {image.USER_ID}" in hooks[1] and f"mv /tmp/tidal-stage/web {image.WEB_DIR}" in hooks[1]
    assert '"$1"/etc/apt/sources.list' in hooks[2] and '"$1"/etc/resolv.conf' in hooks[2]
    with pytest.raises(image.ImageBuildError, match="whitespace"):
        image.mmdebstrap_command(tmp_path / "o.tar", tmp_path / "a b" / "tidal-stage", sources, [opt])


def _tree(root: Path) -> tuple[Path, Path]:
    (root / "controllers" / "tidal" / "__pycache__").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='x'\n")
    (root / "controllers" / "tidal" / "a.py").write_text("A = 1\n")
    sources, opt = root / "debian.sources", root / "99opts"
    sources.write_text("Types: deb\n")
    opt.write_text('Acquire::Check-Valid-Until "false";\n')
    return sources, opt


@pytest.mark.parametrize("change, rebuilds", [
    (lambda r: (r / "controllers" / "tidal" / "a.py").write_text("A = 2\n"), True),
    (lambda r: (r / "controllers" / "tidal" / "b.py").write_text(""), True),
    (lambda r: (r / "pyproject.toml").write_text("[project]\nname='y'\n"), True),
    (lambda r: (r / "99opts").write_text(""), True),
    (lambda r: (r / "controllers" / "tidal" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x"), False),
    (lambda r: (r / "Containerfile").write_text("FROM scratch\n"), False),
    (lambda r: (r / "controllers" / "tidal" / "node_modules").mkdir(), False),
])
def test_the_cache_key_follows_the_inputs(tmp_path, change, rebuilds):
    sources, opt = _tree(tmp_path)
    before = image.input_key(sources, [opt], root=tmp_path)
    change(tmp_path)
    assert (image.input_key(sources, [opt], root=tmp_path) != before) is rebuilds


def test_the_archive_lives_in_the_lab_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDAL_LAB_CACHE", str(tmp_path))
    assert image.archive_path("k") == tmp_path / "image" / "k" / "tidal-image.oci.tar"


def test_missing_apt_files_are_named(tmp_path):
    with pytest.raises(image.ImageBuildError, match=r"the apt sources file .*nope does not exist"):
        image.input_key(tmp_path / "nope", [])
    with pytest.raises(image.ImageBuildError, match=r"not a source checkout"):
        image.input_key(root=tmp_path)


# --------------------------------------------------------------------------------------------
# import into containerd (a fake ctr records its arguments)

FAKE_CTR = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in
  *"images import --local"*) [ -n "{no_local}" ] && {{ echo "flag provided but not defined: -local" >&2; exit 1; }} ;;
  *"images ls"*) echo "REF TYPE DIGEST"; echo "localhost/tidal:0.1.0 manifest {digest}" ;;
esac
exit 0
"""


@pytest.mark.parametrize("snapshotter, old_ctr", [(None, False), ("native", False), ("overlayfs", True)])
def test_import_image_runs_ctr_in_the_k8s_namespace(tmp_path, snapshotter, old_ctr):
    layer = small_layer(tmp_path, 1)
    archive = oci.write_oci_archive(tmp_path / "img.tar", [layer], oci.image_config([layer]), "localhost/tidal:0.1.0")
    _, digest, _ = image.archive_image(archive)
    log, ctr = tmp_path / "ctr.log", tmp_path / "ctr"
    ctr.write_text(FAKE_CTR.format(log=log, digest=digest, no_local="yes" if old_ctr else ""))
    ctr.chmod(0o755)
    for _ in range(2):  # idempotent
        assert image.import_image(archive, ctr, "/run/c.sock", snapshotter) == "localhost/tidal:0.1.0"
    calls = log.read_text().splitlines()
    imports = [c for c in calls if "images import" in c]
    base = "--address /run/c.sock -n k8s.io images import"
    expected = f"{base} {'' if old_ctr else '--local '}--platform linux/amd64"
    expected += f" --snapshotter {snapshotter}" if snapshotter else ""
    assert imports[-1] == f"{expected} {archive}"
    assert "--address /run/c.sock -n k8s.io images ls name==localhost/tidal:0.1.0" in calls


def test_import_image_fails_when_containerd_does_not_list_the_image(tmp_path):
    layer = small_layer(tmp_path, None)
    archive = oci.write_oci_archive(tmp_path / "img.tar", [layer], oci.image_config([layer]), "localhost/tidal:0.1.0")
    ctr = tmp_path / "ctr"
    ctr.write_text(FAKE_CTR.format(log=tmp_path / "log", digest="sha256:other", no_local=""))
    ctr.chmod(0o755)
    with pytest.raises(image.ImageBuildError, match="is not in containerd"):
        image.import_image(archive, ctr, "/run/c.sock")
    with pytest.raises(image.ImageBuildError, match="ctr is not at"):
        image.import_image(archive, tmp_path / "missing-ctr", "/run/c.sock")
