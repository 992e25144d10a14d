import os
import re

import pytest

from tidal_dev.lab import build, versions


@pytest.mark.parametrize("text, expected", [
    ("go version go1.26.8 linux/amd64", (1, 26)),
    ("go version go1.24rc1 linux/arm64", (1, 24)),
    ("go version devel +abc", None),
    ("", None),
])
def test_go_version_is_parsed_from_go_version_output(text, expected):
    assert build.parse_go_version(text) == expected


def test_missing_go_fails_with_one_sentence_naming_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.LabBuildError) as err:
        build.check_go()
    message = str(err.value)
    assert "Go 1.26 or newer" in message and "not on PATH" in message
    assert "\n" not in message


def test_too_old_go_fails_naming_the_version_found(monkeypatch, tmp_path):
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go version go1.21.3 linux/amd64\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.LabBuildError, match=r"is go version go1\.21\.3 linux/amd64: install Go 1\.26\+"):
        build.check_go()


def _required_version(module_dir: str, module: str) -> str:
    text = (versions.GOMOD_DIR / module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.M)
    assert match, f"{module} not required in {module_dir}/go.mod"
    return match.group(1)


@pytest.mark.parametrize("module_dir, module, pinned", [
    ("kubernetes", "k8s.io/kubernetes", versions.KUBERNETES_VERSION),
    ("etcd", "go.etcd.io/etcd/server/v3", versions.ETCD_VERSION),
    ("volcano", "volcano.sh/volcano", versions.VOLCANO_VERSION),
    ("kwok", "sigs.k8s.io/kwok", versions.KWOK_VERSION),
    ("containerd", "github.com/containerd/containerd/v2", versions.CONTAINERD_VERSION),
])
def test_wrapper_modules_pin_the_versions_the_cache_is_named_after(module_dir, module, pinned):
    assert _required_version(module_dir, module) == pinned
    assert pinned in versions.versions_key()
    assert (versions.GOMOD_DIR / module_dir / "go.sum").exists()


def test_kubernetes_staging_modules_are_replaced_by_the_matching_published_release():
    text = (versions.GOMOD_DIR / "kubernetes" / "go.mod").read_text()
    staging = re.findall(r"^\s*(k8s\.io/\S+) => \1 (v\S+)$", text, re.M)
    assert len(staging) >= 30
    minor = versions.KUBERNETES_VERSION.replace("v1.", "v0.")
    assert {version for _, version in staging} == {minor}


def test_volcano_is_built_against_the_same_kubernetes_minor():
    text = (versions.GOMOD_DIR / "volcano" / "go.mod").read_text()
    api = re.search(r"k8s\.io/api => k8s\.io/api (v\S+)", text).group(1)
    assert api.split(".")[:2] == versions.KUBERNETES_VERSION.replace("v1.", "v0.").split(".")[:2]


def test_cache_directory_follows_xdg_and_the_override(monkeypatch, tmp_path):
    monkeypatch.delenv("TIDAL_LAB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert versions.bin_dir() == tmp_path / "tidal" / "lab" / versions.versions_key() / "bin"
    monkeypatch.setenv("TIDAL_LAB_CACHE", str(tmp_path / "elsewhere"))
    assert versions.bin_dir().parent.parent == tmp_path / "elsewhere"


def test_missing_binaries_lists_what_is_not_executable(tmp_path):
    for binary in versions.BINARIES[:2]:
        path = tmp_path / binary.name
        path.write_text("")
        os.chmod(path, 0o755)
    missing = {b.name for b in build.missing_binaries(tmp_path)}
    assert missing == {b.name for b in versions.BINARIES[2:]}
