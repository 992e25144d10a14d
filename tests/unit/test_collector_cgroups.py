"""tidal.agent.collector.cgroups: kubelet cgroup names, version/driver detection, discovery."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
from tidal.agent.collector.cgroups import (
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupLayoutError,
    CgroupVersion,
    ContainerID,
    PodQOSClass,
    container_cgroup_relpath,
    detect_driver,
    detect_hierarchy,
    detect_layout,
    discover_pod_cgroups,
    find_container_cgroup,
    kubelet_root_components,
    kubepods_relpath,
    pod_cgroup_relpath,
    qos_cgroup_relpath,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "cgroups"
TREES = ("v1-cgroupfs", "v1-systemd", "v2-cgroupfs", "v2-systemd")
UID = "1f2e3d4c-5b6a-4789-9abc-def012345678"
CID = "3f2a" + "0" * 60

G, B, BE = PodQOSClass.GUARANTEED, PodQOSClass.BURSTABLE, PodQOSClass.BEST_EFFORT
FS, SD = CgroupDriver.CGROUPFS, CgroupDriver.SYSTEMD
V1, V2 = CgroupVersion.V1, CgroupVersion.V2

UID_ = UID.replace("-", "_")
POD_RELPATHS = {
    (FS, G): f"kubepods/pod{UID}",
    (FS, B): f"kubepods/burstable/pod{UID}",
    (FS, BE): f"kubepods/besteffort/pod{UID}",
    (SD, G): f"kubepods.slice/kubepods-pod{UID_}.slice",
    (SD, B): f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
    (SD, BE): f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
}
# (version) -> (cpu hierarchy, memory hierarchy) under /sys/fs/cgroup
HIERARCHIES = {
    V1: CgroupHierarchy(V1, Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/memory")),
    V2: CgroupHierarchy(V2, Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup")),
}
EXPECTED_DIRS = {  # every version x driver x QoS class: (CPU dir, memory dir)
    (V1, FS, G): (f"/sys/fs/cgroup/cpu,cpuacct/kubepods/pod{UID}", f"/sys/fs/cgroup/memory/kubepods/pod{UID}"),
    (V1, FS, B): (
        f"/sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/pod{UID}",
        f"/sys/fs/cgroup/memory/kubepods/burstable/pod{UID}",
    ),
    (V1, FS, BE): (
        f"/sys/fs/cgroup/cpu,cpuacct/kubepods/besteffort/pod{UID}",
        f"/sys/fs/cgroup/memory/kubepods/besteffort/pod{UID}",
    ),
    (V1, SD, G): (
        f"/sys/fs/cgroup/cpu,cpuacct/kubepods.slice/kubepods-pod{UID_}.slice",
        f"/sys/fs/cgroup/memory/kubepods.slice/kubepods-pod{UID_}.slice",
    ),
    (V1, SD, B): (
        f"/sys/fs/cgroup/cpu,cpuacct/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
        f"/sys/fs/cgroup/memory/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
    ),
    (V1, SD, BE): (
        f"/sys/fs/cgroup/cpu,cpuacct/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
        f"/sys/fs/cgroup/memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
    ),
    (V2, FS, G): (f"/sys/fs/cgroup/kubepods/pod{UID}",) * 2,
    (V2, FS, B): (f"/sys/fs/cgroup/kubepods/burstable/pod{UID}",) * 2,
    (V2, FS, BE): (f"/sys/fs/cgroup/kubepods/besteffort/pod{UID}",) * 2,
    (V2, SD, G): (f"/sys/fs/cgroup/kubepods.slice/kubepods-pod{UID_}.slice",) * 2,
    (V2, SD, B): (
        f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
    ) * 2,
    (V2, SD, BE): (
        f"/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
    ) * 2,
}


def expected(tree: str) -> dict:
    return json.loads((DATA / f"{tree}.expected.json").read_text())


# --- Pure naming -------------------------------------------------------------------------------


@pytest.mark.parametrize(("driver", "qos_class"), list(POD_RELPATHS))
def test_pod_cgroup_is_named_like_the_kubelet_for_every_driver_and_qos_class(driver, qos_class):
    assert pod_cgroup_relpath(UID, qos_class, driver) == PurePosixPath(POD_RELPATHS[driver, qos_class])


@pytest.mark.parametrize(("version", "driver", "qos_class"), list(EXPECTED_DIRS))
def test_layout_puts_pod_cpu_and_memory_dirs_in_the_right_hierarchy(version, driver, qos_class):
    layout = CgroupLayout(HIERARCHIES[version], driver)
    relpath = layout.pod_relpath(UID, qos_class)
    assert (str(layout.cpu_dir(relpath)), str(layout.memory_dir(relpath))) == EXPECTED_DIRS[
        version, driver, qos_class
    ]


@pytest.mark.parametrize(
    ("driver", "qos_class", "container_id", "leaf"),
    [
        (FS, B, f"containerd://{CID}", CID),
        (FS, B, f"docker://{CID}", CID),
        (FS, B, f"cri-o://{CID}", f"crio-{CID}"),
        (SD, B, f"containerd://{CID}", f"cri-containerd-{CID}.scope"),
        (SD, B, f"docker://{CID}", f"docker-{CID}.scope"),
        (SD, B, f"cri-o://{CID}", f"crio-{CID}.scope"),
        (SD, B, f"kata://{CID}", f"kata-{CID}.scope"),
        (FS, G, f"containerd://{CID}", CID),
        (SD, G, f"containerd://{CID}", f"cri-containerd-{CID}.scope"),
        (FS, BE, f"docker://{CID}", CID),
        (SD, BE, f"cri-o://{CID}", f"crio-{CID}.scope"),
    ],
)
def test_container_cgroup_is_named_by_runtime_and_driver(driver, qos_class, container_id, leaf):
    expected_path = PurePosixPath(POD_RELPATHS[driver, qos_class]) / leaf
    assert container_cgroup_relpath(UID, qos_class, container_id, driver) == expected_path
    assert container_cgroup_relpath(UID, qos_class, ContainerID.parse(container_id), driver) == expected_path


@pytest.mark.parametrize(
    ("driver", "qos_class", "expected_path"),
    [
        (FS, G, "kubepods"),
        (FS, B, "kubepods/burstable"),
        (FS, BE, "kubepods/besteffort"),
        (SD, G, "kubepods.slice"),
        (SD, B, "kubepods.slice/kubepods-burstable.slice"),
        (SD, BE, "kubepods.slice/kubepods-besteffort.slice"),
    ],
)
def test_qos_cgroup_is_the_parent_of_its_pods(driver, qos_class, expected_path):
    assert qos_cgroup_relpath(qos_class, driver) == PurePosixPath(expected_path)
    assert pod_cgroup_relpath(UID, qos_class, driver).parent == PurePosixPath(expected_path)


@pytest.mark.parametrize(
    ("kubelet_root", "driver", "components", "kubepods"),
    [
        ("/", FS, (), "kubepods"),
        ("/", SD, (), "kubepods.slice"),
        ("", FS, (), "kubepods"),
        ("/kubelet", FS, ("kubelet",), "kubelet/kubepods"),
        ("/a/b/", FS, ("a", "b"), "a/b/kubepods"),
        ("/kubelet.slice", SD, ("kubelet",), "kubelet.slice/kubelet-kubepods.slice"),
        ("/a.slice/a-b.slice", SD, ("a", "b"), "a.slice/a-b.slice/a-b-kubepods.slice"),
        ("/my_node.slice", SD, ("my-node",), "my_node.slice/my_node-kubepods.slice"),
    ],
)
def test_kubelet_cgroup_root_prefixes_every_pod_cgroup(kubelet_root, driver, components, kubepods):
    assert kubelet_root_components(kubelet_root, driver) == components
    assert kubepods_relpath(driver, kubelet_root) == PurePosixPath(kubepods)
    assert pod_cgroup_relpath(UID, B, driver, kubelet_root).parts[: len(PurePosixPath(kubepods).parts)] == (
        PurePosixPath(kubepods).parts
    )


def test_systemd_kubelet_root_must_name_a_slice():
    with pytest.raises(ValueError, match="must name a slice"):
        kubelet_root_components("/kubelet", SD)


@pytest.mark.parametrize("uid", ["", "../etc", "a/b", "pod uid", "-leading"])
def test_pod_uid_that_could_escape_the_hierarchy_is_rejected(uid):
    with pytest.raises(ValueError, match="pod UID"):
        pod_cgroup_relpath(uid, B, FS)


@pytest.mark.parametrize(
    ("text", "runtime", "ident"),
    [
        (f"containerd://{CID}", "containerd", CID),
        (f"docker://{CID}", "docker", CID),
        (f"cri-o://{CID}", "cri-o", CID),
        (f"  containerd://{CID}\n", "containerd", CID),
    ],
)
def test_container_id_parses_runtime_and_id(text, runtime, ident):
    parsed = ContainerID.parse(text)
    assert (parsed.runtime, parsed.id) == (runtime, ident)
    assert str(parsed) == f"{runtime}://{ident}"


@pytest.mark.parametrize("text", ["", CID, "containerd://", "containerd://../x", "containerd://a/b", "://abc"])
def test_malformed_container_id_is_rejected_with_the_expected_form(text):
    with pytest.raises(ValueError, match="<runtime>://<id>"):
        ContainerID.parse(text)


def test_qos_class_accepts_the_kubernetes_spelling():
    assert pod_cgroup_relpath(UID, "BestEffort", FS) == PurePosixPath(POD_RELPATHS[FS, BE])


# --- Detection and discovery on recorded trees ------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "version", "cpu_root", "memory_root", "driver"),
    [
        ("v1-cgroupfs", V1, "cpu,cpuacct", "memory", FS),
        ("v1-systemd", V1, "cpuacct", "memory", SD),
        ("v2-cgroupfs", V2, ".", ".", FS),
        ("v2-systemd", V2, ".", ".", SD),
    ],
)
def test_layout_is_detected_from_the_tree(tree, version, cpu_root, memory_root, driver):
    layout = detect_layout(DATA / tree)
    assert layout.hierarchy == CgroupHierarchy(version, DATA / tree / cpu_root, DATA / tree / memory_root)
    assert layout.driver is driver


@pytest.mark.parametrize("tree", TREES)
def test_every_recorded_pod_is_discovered_with_its_qos_class_and_path(tree):
    layout = detect_layout(DATA / tree)
    found = discover_pod_cgroups(layout)
    pods = expected(tree)["pods"]
    assert set(found) == set(pods)
    for uid, pod in pods.items():
        assert found[uid].qos_class == PodQOSClass(pod["qosClass"])
        assert found[uid].relpath == PurePosixPath(pod["relpath"])
        assert layout.pod_relpath(uid, found[uid].qos_class) == PurePosixPath(pod["relpath"])


@pytest.mark.parametrize("tree", TREES)
def test_every_recorded_container_is_found_from_its_container_id(tree):
    layout = detect_layout(DATA / tree)
    for uid, pod in expected(tree)["pods"].items():
        for container in pod["containers"].values():
            relpath = find_container_cgroup(layout, uid, PodQOSClass(pod["qosClass"]), container["containerID"])
            assert relpath == PurePosixPath(container["relpath"])
            assert layout.cpu_dir(relpath).is_dir()


def test_container_of_another_runtime_is_not_found(tmp_path):
    layout = detect_layout(DATA / "v2-systemd")
    uid, pod = next(iter(expected("v2-systemd")["pods"].items()))
    container_id = next(iter(pod["containers"].values()))["containerID"].replace("containerd://", "docker://")
    assert find_container_cgroup(layout, uid, PodQOSClass(pod["qosClass"]), container_id) is None


def test_v2_on_the_hybrid_unified_mount_is_used_when_it_has_the_memory_controller(tmp_path):
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("cpu io memory pids\n")
    hierarchy = detect_hierarchy(tmp_path)
    assert hierarchy == CgroupHierarchy(V2, tmp_path / "unified", tmp_path / "unified")


def test_v2_without_the_memory_controller_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    with pytest.raises(CgroupLayoutError, match=r"cgroup.controllers: cgroup v2 without the memory"):
        detect_hierarchy(tmp_path)


def test_unrecognised_root_is_an_error_listing_what_was_looked_for(tmp_path):
    with pytest.raises(CgroupLayoutError) as error:
        detect_hierarchy(tmp_path)
    message = str(error.value)
    for looked_for in ("cgroup.controllers", "cpu,cpuacct/cpuacct.usage", "memory/memory.usage_in_bytes"):
        assert str(tmp_path / looked_for) in message


def test_driver_detection_fails_without_kubepods_and_is_skipped_when_given(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    hierarchy = detect_hierarchy(tmp_path)
    with pytest.raises(CgroupLayoutError, match="no kubelet pod cgroups"):
        detect_driver(hierarchy)
    assert detect_layout(tmp_path, driver=SD).driver is SD


def test_driver_detection_refuses_to_guess_when_both_layouts_exist(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "kubepods").mkdir()
    (tmp_path / "kubepods.slice").mkdir()
    with pytest.raises(CgroupLayoutError, match="cgroupDriver explicitly"):
        detect_layout(tmp_path)


def test_driver_is_detected_under_a_custom_kubelet_cgroup_root(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "kubelet.slice" / "kubelet-kubepods.slice").mkdir(parents=True)
    layout = detect_layout(tmp_path, kubelet_root="/kubelet.slice")
    assert layout.driver is SD
    assert layout.pod_relpath(UID, G) == PurePosixPath(
        f"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{UID_}.slice"
    )
