# SPDX-License-Identifier: Apache-2.0
"""The lab's own network: a bridge for the node and API server addresses, and the pods' bridge.

A real kubelet refuses a loopback node IP, and pods reach the API server through the
`kubernetes` Service, which kube-proxy translates to the API server's advertise address: that
address must be reachable from the pods' network namespaces, so it cannot be 127.0.0.1. The
lab therefore creates a bridge of its own (no port, no route off the machine) and gives it
`HOST_ADDRESS`; the API server and the real nodes' kubelets listen there. The CNI bridge plugin
creates the pods' bridge `POD_BRIDGE` on the first pod. `remove` deletes both and the rules
kube-proxy wrote, so `tidal lab down` leaves nothing behind.
"""
from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess

BRIDGE = "tidal-lab0"
HOST_NETWORK = "10.250.0.0/24"
HOST_ADDRESS = "10.250.0.1"
POD_BRIDGE = "tidal-cni0"
POD_NETWORK = "10.251.0.0/16"
# The pods of real node i get 10.251.i.0/24 (host-local IPAM).


class NetworkError(RuntimeError):
    """The lab network cannot be created; the message says why."""


def _ip(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("ip") is None:
        raise NetworkError("`ip` is missing: install the Debian package iproute2")
    cmd = ["ip", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NetworkError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()} "
                           "(the lab's real nodes need root, or CAP_NET_ADMIN)")
    return proc


def api_host(real_nodes: int) -> str:
    """Where the API server and Prometheus listen: the bridge once the lab has a real node
    (pods must reach them), else loopback."""
    return HOST_ADDRESS if real_nodes > 0 else "127.0.0.1"


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def pod_subnet(index: int) -> str:
    return str(list(ipaddress.ip_network(POD_NETWORK).subnets(new_prefix=24))[index])


def _conflicting_routes() -> list[str]:
    """Routes of other interfaces that overlap the lab's networks (the lab must not shadow them)."""
    out = subprocess.run(["ip", "-j", "route", "show"], capture_output=True, text=True).stdout or "[]"
    ours = [ipaddress.ip_network(HOST_NETWORK), ipaddress.ip_network(POD_NETWORK)]
    found = []
    for route in json.loads(out):
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dst in ("", "default") or dev in (BRIDGE, POD_BRIDGE):
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if any(net.overlaps(o) for o in ours):
            found.append(f"{dst} dev {dev}")
    return found


def ensure() -> list[str]:
    """Create the bridge with the host address when missing; returns what it did."""
    done = []
    conflicts = _conflicting_routes()
    if conflicts:
        raise NetworkError(f"the lab's networks {HOST_NETWORK} and {POD_NETWORK} overlap routes of "
                           f"this machine ({', '.join(conflicts)}): the lab cannot use them")
    if not link_exists(BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
        done.append(f"bridge {BRIDGE}")
    addrs = json.loads(_ip("-j", "addr", "show", "dev", BRIDGE).stdout or "[]")
    have = {a.get("local") for entry in addrs for a in entry.get("addr_info", [])}
    if HOST_ADDRESS not in have:
        _ip("addr", "add", f"{HOST_ADDRESS}/{HOST_NETWORK.split('/')[1]}", "dev", BRIDGE)
        done.append(f"address {HOST_ADDRESS}")
    _ip("link", "set", BRIDGE, "up")
    return done


def remove() -> list[str]:
    """Delete the lab's bridges (the host address goes with its bridge)."""
    removed = []
    for name in (POD_BRIDGE, BRIDGE):
        if link_exists(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            removed.append(f"bridge {name}")
    return removed
