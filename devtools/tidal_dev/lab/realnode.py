# SPDX-License-Identifier: Apache-2.0
"""A real node in the lab: containerd (CRI + NRI), kubelet and kube-proxy as lab processes.

The node is as close to a kubeadm node as one machine shared with other work allows:

- its files live under a root of its own, ``<lab dir>/node-roots/<node>`` (``etc/containerd``,
  ``var/lib/kubelet``, ``etc/cni/net.d``, containerd's root and state), written once as a
  distribution would and then converged by the node roles (static CPU manager, NRI);
- the kubelet uses the cgroupfs driver under a `cgroupRoot` of its own (`CGROUP_ROOT`), so it
  never touches the machine's other cgroups;
- pods get addresses from Debian's CNI plugins (bridge + host-local + portmap) on the pods'
  bridge; the node's address and the API server's are on the lab's bridge (`network`);
- the pod sandbox image is the lab's `pause` program, imported into containerd (no registry).

`cleanup` undoes everything a node leaves once its processes are stopped: containers and their
shims, mounts under the node root, the kubelet's cgroups, kube-proxy's rules.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tidal_dev.lab import network, oci
from tidal_dev.lab.image import import_image

NODE_NAME = "lab-real-0"
CGROUP_ROOT = "/tidal-lab"
PAUSE_IMAGE = "localhost/tidal-lab/pause:1"
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
CGROUPFS = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class RealNode:
    """Paths of one real node, all under its root."""

    name: str
    root: Path
    index: int = 0

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "var/lib/kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.kubelet_dir / "config.yaml"

    @property
    def containerd_config(self) -> Path:
        return self.root / "etc/containerd/config.toml"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run/containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def nri_socket(self) -> Path:
        return self.root / "var/run/nri/nri.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "etc/cni/net.d"

    @property
    def static_pod_dir(self) -> Path:
        """The kubelet's ``staticPodPath``, kubeadm's ``/etc/kubernetes/manifests`` under the root."""
        return self.root / "etc/kubernetes/manifests"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "var/lib/kube-proxy/config.yaml"

    @property
    def pod_subnet(self) -> str:
        return network.pod_subnet(self.index)


def node_for(lab_dir: Path, index: int = 0) -> RealNode:
    name = NODE_NAME if index == 0 else f"lab-real-{index}"
    return RealNode(name, lab_dir / "node-roots" / name, index)


# -- configuration, written once (the node roles edit it afterwards) ---------------------------

def kubelet_config(node: RealNode, ca_cert: Path, ports: dict[str, int]) -> dict:
    """The KubeletConfiguration kubeadm would write, with the lab's paths and addresses."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_cert)}},
        "authorization": {"mode": "Webhook"},
        "address": network.HOST_ADDRESS,
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet_healthz"],
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        # This machine runs cgroup v1 (hybrid); kubelet 1.34 still supports it when asked.
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "staticPodPath": str(node.static_pod_dir),
        "rotateCertificates": False,
        "serializeImagePulls": False,
        "maxPods": 30,
        # The disk is shared with the rest of the machine: evict only when it is nearly full.
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%", "nodefs.inodesFree": "2%"},
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "nodeStatusUpdateFrequency": "5s",
        "enforceNodeAllocatable": ["pods"],
    }


def containerd_config(node: RealNode) -> str:
    """containerd 2's configuration (version 3) with the node's paths; NRI off, as shipped by
    distributions that disable it: the `containerd_nri` role turns it on."""
    state = node.containerd_state
    return f"""# containerd of the lab's real node {node.name}, written once by `tidal lab up`.
version = 3
root = "{node.root / 'var/lib/containerd'}"
state = "{state}"

[grpc]
  address = "{node.containerd_socket}"

[ttrpc]
  address = "{node.containerd_socket}.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  # The lab runs without CAP_SYS_RESOURCE: never ask runc for a lower oom_score_adj than ours.
  restrict_oom_score_adj = true
  # Network namespaces under the state directory, not /var/run/netns (shared with the machine).
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{node.cni_conf_dir}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"

[plugins.'io.containerd.nri.v1.nri']
  disable = true
"""


def cni_config(node: RealNode) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "tidal-lab",
        "plugins": [
            {"type": "bridge", "bridge": network.POD_BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": str(node.root / "var/lib/cni/networks")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path, ports: dict[str, int]) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "mode": "iptables",
        "clusterCIDR": network.POD_NETWORK,
        "bindAddress": network.HOST_ADDRESS,
        "healthzBindAddress": f"127.0.0.1:{ports['kube_proxy_healthz']}",
        "metricsBindAddress": f"127.0.0.1:{ports['kube_proxy_metrics']}",
        # NodePorts only on the lab's bridge, never on the machine's own interfaces.
        "nodePortAddresses": [f"{network.HOST_ADDRESS}/32"],
        "iptables": {"localhostNodePorts": False},
        # 0: leave the machine's conntrack settings alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }


# Keys of the kubelet configuration that hold the lab's ports and paths: kept current on every
# `up` (ports may change when the lab restarts); every other key is the node roles' to edit.
KUBELET_LAB_KEYS = ("address", "port", "healthzBindAddress", "healthzPort", "containerRuntimeEndpoint",
                    "cgroupDriver", "cgroupRoot", "authentication", "staticPodPath")


def write_configs(node: RealNode, ca_cert: Path, proxy_kubeconfig: Path, ports: dict[str, int]) -> None:
    """Write the node's files. containerd's only when missing and the kubelet's lab-owned keys
    (`KUBELET_LAB_KEYS`) only, leaving what the roles converged; the CNI and kube-proxy files
    every time (nothing else edits them)."""
    import yaml
    wanted = kubelet_config(node, ca_cert, ports)
    try:
        current = yaml.safe_load(node.kubelet_config.read_text()) or {}
    except FileNotFoundError:
        current = None
    if current is None:
        merged = wanted
    else:
        merged = {**current, **{k: wanted[k] for k in KUBELET_LAB_KEYS}}
    if merged != current:
        node.kubelet_config.parent.mkdir(parents=True, exist_ok=True)
        node.kubelet_config.write_text(yaml.safe_dump(merged, sort_keys=True))
    if not node.containerd_config.exists():
        node.containerd_config.parent.mkdir(parents=True, exist_ok=True)
        node.containerd_config.write_text(containerd_config(node))
    _write_if_changed(node.cni_conf_dir / "10-tidal-lab.conflist", json.dumps(cni_config(node), indent=2) + "\n")
    # Only when it changed: kube-proxy exits as soon as its configuration file is written.
    _write_if_changed(node.kube_proxy_config,
                      yaml.safe_dump(kube_proxy_config(node, proxy_kubeconfig, ports), sort_keys=True))
    for sub in ("var/run/nri", "opt/nri/plugins", "etc/nri/conf.d", "etc/kubernetes/manifests"):
        (node.root / sub).mkdir(parents=True, exist_ok=True)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- the pause image -----------------------------------------------------------------------------

def ctr(bin_dir: Path, node: RealNode, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(bin_dir / "ctr"), "--address", str(node.containerd_socket), "-n", "k8s.io", *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"ctr {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def image_digest(bin_dir: Path, node: RealNode, reference: str) -> str | None:
    """The manifest digest containerd holds for `reference`, or None."""
    for line in ctr(bin_dir, node, "images", "ls").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[0] == reference:
            return fields[2]
    return None


def has_image(bin_dir: Path, node: RealNode, reference: str) -> bool:
    return image_digest(bin_dir, node, reference) is not None


def ensure_pause_image(bin_dir: Path, node: RealNode) -> bool:
    """Import the sandbox image when containerd does not have it; True when imported."""
    if has_image(bin_dir, node, PAUSE_IMAGE):
        return False
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tidal-pause-") as tmp:
        tree = Path(tmp) / "rootfs"
        for d in ("dev", "proc", "sys", "etc", "tmp"):
            (tree / d).mkdir(parents=True)
        shutil.copy2(bin_dir / "pause", tree / "pause")
        layer = oci.layer_from_directory(tree, Path(tmp) / "layer.tar")
        archive = oci.write_oci_archive(Path(tmp) / "pause.oci.tar", [layer],
                                        oci.image_config([layer], entrypoint=["/pause"]), PAUSE_IMAGE)
        import_image(archive, bin_dir / "ctr", node.containerd_socket)
    return True


# -- cgroups ------------------------------------------------------------------------------------

def ensure_cgroup_root() -> list[str]:
    """Create the kubelet's `cgroupRoot` in every mounted hierarchy (as a systemd slice would
    exist for it): the kubelet refuses to start when it is missing in one. A new v1 cpuset gets
    its parent's CPUs and memory nodes, without which no task may join it."""
    created = []
    if not CGROUPFS.is_dir():
        return created
    for hierarchy in sorted(CGROUPFS.iterdir()):
        if not (hierarchy / "cgroup.procs").exists():
            continue
        top = hierarchy / CGROUP_ROOT.strip("/")
        if not top.is_dir():
            top.mkdir()
            created.append(str(top))
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (top / name).exists() and not (top / name).read_text().strip():
                (top / name).write_text((hierarchy / name).read_text())
    return created


# -- clean-up --------------------------------------------------------------------------------

def _cgroup_dirs() -> list[Path]:
    """The node's cgroup directory in every hierarchy that has one, deepest first."""
    found = []
    if not CGROUPFS.is_dir():
        return found
    for hierarchy in CGROUPFS.iterdir():
        top = hierarchy / CGROUP_ROOT.strip("/")
        if top.is_dir():
            found.extend(p for p in top.rglob("*") if p.is_dir())
            found.append(top)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _pids_in(directories: list[Path]) -> set[int]:
    pids: set[int] = set()
    for d in directories:
        try:
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            pass
    return pids


def _shim_pids(node: RealNode) -> set[int]:
    """containerd-shim-runc-v2 processes started for this node's containerd."""
    address = str(node.containerd_socket).encode()
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address in argv:
            pids.add(int(proc.name))
    return pids


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix) or point == prefix[:-1]:
            mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


def cleanup(node: RealNode, bin_dir: Path, kube_proxy_present: bool) -> list[str]:
    """After the node's processes stopped: kill its containers and shims, unmount, remove its
    cgroups and kube-proxy's rules. Returns what it removed (for `tidal lab down`)."""
    done = []
    deadline = time.monotonic() + 20
    while True:
        pids = _pids_in(_cgroup_dirs()) | _shim_pids(node)
        if not pids:
            break
        _kill(pids)
        if time.monotonic() > deadline:
            done.append(f"processes still running: {sorted(pids)}")
            break
        time.sleep(0.2)
    mounts = _mounts_under(node.root) if node.root.exists() else []
    for point in mounts:
        subprocess.run(["umount", "-l", point], capture_output=True)
    if mounts:
        done.append(f"{len(mounts)} mounts")
    removed = 0
    for d in _cgroup_dirs():
        try:
            d.rmdir()
            removed += 1
        except OSError:
            pass
    if removed:
        done.append(f"{removed} cgroups")
    if kube_proxy_present and (bin_dir / "kube-proxy").exists():
        subprocess.run([str(bin_dir / "kube-proxy"), "--cleanup"], capture_output=True, timeout=60)
        done.append("kube-proxy rules")
    if remove_kubelet_chains():
        done.append("kubelet rules")
    return done


def _iptables_rules():
    """(tool, table, `-S` listing) of every table kube-proxy and the kubelet write to."""
    for tool in ("iptables", "ip6tables"):
        for table in ("mangle", "nat", "filter"):
            yield tool, table, subprocess.run([tool, "-t", table, "-S"], capture_output=True, text=True).stdout


def leftovers(node: RealNode) -> list[str]:
    """What a stopped real node still holds on this machine (nothing, after `cleanup`)."""
    found = [f"process {pid}" for pid in sorted(_pids_in(_cgroup_dirs()) | _shim_pids(node))]
    found += [f"mount {m}" for m in (_mounts_under(node.root) if node.root.exists() else [])]
    found += [f"cgroup {d}" for d in _cgroup_dirs()]
    found += [f"bridge {b}" for b in (network.BRIDGE, network.POD_BRIDGE) if network.link_exists(b)]
    for tool, table, listing in _iptables_rules():
        found += [f"{tool} -t {table} chain {line.split()[1]}" for line in listing.splitlines()
                  if line.startswith("-N KUBE-")]
    return found


# The chains the kubelet itself writes: canaries it watches to notice a flush of the tables, the
# hint of its iptables mode, and KUBE-FIREWALL (drops outside traffic to 127.0.0.0/8).
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")


def remove_kubelet_chains() -> bool:
    removed = False
    for tool, table, listing in _iptables_rules():
        for line in listing.splitlines():
            parts = line.split()
            if parts[:1] == ["-A"] and "-j" in parts and parts[parts.index("-j") + 1] in KUBELET_CHAINS \
                    and parts[1] not in KUBELET_CHAINS:
                subprocess.run([tool, "-t", table, "-D", *parts[1:]], capture_output=True)
        for chain in KUBELET_CHAINS:
            if f"-N {chain}" in listing:
                subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
                subprocess.run([tool, "-t", table, "-X", chain], capture_output=True)
                removed = True
    return removed
