"""The lab's real node: what it writes for containerd, the kubelet, CNI and kube-proxy, and the
API server certificate that pods and kubelets verify (pure: no process is started)."""
import ipaddress
import tomllib
from pathlib import Path

import pytest

from tidal_dev.lab import network, realnode
from tidal_dev.lab.components import COMPONENT_NAMES, components
from tidal_dev.lab.pki import covers_ips, ensure_lab_pki

PORTS = {"kubelet": 10250, "kubelet_healthz": 10248, "kube_proxy_healthz": 10256, "kube_proxy_metrics": 10249}


@pytest.fixture
def node(tmp_path):
    return realnode.node_for(tmp_path)


def test_every_path_of_the_node_lives_under_its_own_root(node, tmp_path):
    for path in (node.kubelet_config, node.containerd_config, node.containerd_socket, node.nri_socket,
                 node.cni_conf_dir, node.kube_proxy_config, node.static_pod_dir):
        assert path.is_relative_to(tmp_path / "node-roots" / realnode.NODE_NAME)
    # Unix sockets have a 108-byte limit: the lab's default directories stay well inside it.
    default = realnode.node_for(Path.home() / ".cache/tidal/lab/test-run")
    assert len(str(default.containerd_socket) + ".ttrpc") < 108


def test_kubelet_uses_cgroupfs_under_a_root_of_its_own_and_the_bridge_address(node, tmp_path):
    config = realnode.kubelet_config(node, tmp_path / "ca.crt", PORTS)
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == realnode.CGROUP_ROOT != "/"
    assert config["address"] == network.HOST_ADDRESS
    assert not ipaddress.ip_address(config["address"]).is_loopback  # a kubelet refuses loopback
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"
    # Static pods, as kubeadm's nodes run them (kube-proxy, etcd...), from a directory of its own.
    assert config["staticPodPath"] == str(node.static_pod_dir)
    # The static CPU manager is the role's to switch on, not the lab's.
    assert "cpuManagerPolicy" not in config


def test_containerd_config_is_version_3_with_paths_under_the_root_and_nri_left_to_the_role(node):
    config = tomllib.loads(realnode.containerd_config(node))
    assert config["version"] == 3
    assert Path(config["root"]).is_relative_to(node.root) and Path(config["state"]).is_relative_to(node.root)
    plugins = config["plugins"]
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cni"]["conf_dir"] == str(node.cni_conf_dir)
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == realnode.PAUSE_IMAGE


def test_pods_get_addresses_from_the_lab_pod_network_without_masquerading_off_the_machine(node):
    config = realnode.cni_config(node)
    bridge, portmap = config["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == network.POD_BRIDGE
    assert bridge["ipMasq"] is False
    subnet = ipaddress.ip_network(bridge["ipam"]["ranges"][0][0]["subnet"])
    assert subnet.subnet_of(ipaddress.ip_network(network.POD_NETWORK))
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(node.root)
    assert portmap["type"] == "portmap"


def test_kube_proxy_opens_node_ports_only_on_the_lab_bridge(node, tmp_path):
    config = realnode.kube_proxy_config(node, tmp_path / "kp.kubeconfig", PORTS)
    assert config["nodePortAddresses"] == [f"{network.HOST_ADDRESS}/32"]
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["conntrack"]["maxPerCore"] == 0  # the machine's conntrack settings are left alone
    assert config["hostnameOverride"] == node.name


def test_write_configs_keeps_what_the_roles_converged_and_follows_new_ports(node, tmp_path):
    import yaml
    realnode.write_configs(node, tmp_path / "ca.crt", tmp_path / "kp", PORTS)
    config = yaml.safe_load(node.kubelet_config.read_text())
    config.update(cpuManagerPolicy="static", systemReserved={"cpu": "500m"})
    node.kubelet_config.write_text(yaml.safe_dump(config))
    node.containerd_config.write_text(node.containerd_config.read_text().replace("disable = true", "disable = false"))
    realnode.write_configs(node, tmp_path / "ca.crt", tmp_path / "kp", {**PORTS, "kubelet_healthz": 20248})
    again = yaml.safe_load(node.kubelet_config.read_text())
    assert again["cpuManagerPolicy"] == "static" and again["systemReserved"] == {"cpu": "500m"}
    assert again["healthzPort"] == 20248
    assert "disable = false" in node.containerd_config.read_text()
    assert (node.cni_conf_dir / "10-tidal-lab.conflist").exists()


def test_real_node_components_start_after_the_control_plane_and_only_when_asked():
    without = [c.name for c in components(0)]
    with_node = [c.name for c in components(1)]
    assert "kubelet" not in without and "kube-scheduler" in without
    assert with_node[:len(without)] == without
    assert with_node[len(without):] == ["containerd", "kubelet", "kube-proxy"]
    assert set(with_node) == set(COMPONENT_NAMES)


def test_api_server_certificate_is_reissued_when_it_does_not_cover_the_bridge_address(tmp_path):
    old = ensure_lab_pki(tmp_path, "127.0.0.1")
    assert not covers_ips(old.apiserver, (network.HOST_ADDRESS,))
    ca_before = old.ca.cert.read_bytes()
    new = ensure_lab_pki(tmp_path, network.HOST_ADDRESS)
    assert covers_ips(new.apiserver, ("127.0.0.1", network.HOST_ADDRESS, "10.0.0.1"))
    assert new.ca.cert.read_bytes() == ca_before  # kubeconfigs handed out keep verifying


def test_a_node_identity_is_in_the_nodes_group(tmp_path):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    pair = ensure_lab_pki(tmp_path).node("lab-real-0")
    subject = x509.load_pem_x509_certificate(pair.cert.read_bytes()).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:lab-real-0"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
