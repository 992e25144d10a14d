# SPDX-License-Identifier: Apache-2.0
"""``tidal-agent nri``: the NRI plugin as a process (the DaemonSet's sidecar or the agent's).

With API server access (``--in-cluster`` in the DaemonSet, or a kubeconfig) it also watches the
ColocationPolicy, so NUMA affinity is applied at creation while ``features.numaAffinity`` is on,
and BE containers are created in the BE idle group while ``beIsolation.cpuPriority.idleGroup``
is; without it the plugin sets BE resources only (the agent's round still applies NUMA
affinity; BE containers stay below their pod's cgroup)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tidal.kube import SERVICE_ACCOUNT, connect, in_cluster_missing, resolve_kubeconfig, stop_on_signals

from .plugin import TidalNRIPlugin

log = logging.getLogger(__name__)

#: pod lookups through the API server: off, or on with a kubeconfig (None: in-cluster)
NO_LOOKUPS = (False, None)


def lookup_access(kubeconfig: str | None, in_cluster: bool, environ: Mapping[str, str] | None = None,
                  account: Path = SERVICE_ACCOUNT) -> tuple[bool, str | None]:
    """Whether BE pods without the batch-resources annotation are looked up in the API server,
    and with which kubeconfig (None: the in-cluster service account).

    ``--in-cluster`` insists on the service account (ClusterAccessError without one); a kubeconfig
    is used when given; otherwise the service account when the process runs in a pod, so the
    DaemonSet's container needs no flag; otherwise (a process on the host) no lookups."""
    if in_cluster:
        resolve_kubeconfig(None, environ, account)
        return True, None
    if kubeconfig:
        return True, str(kubeconfig)
    if in_cluster_missing(environ, account) is None:
        return True, None
    return NO_LOOKUPS


async def serve_health(address: str, port: int, plugin: TidalNRIPlugin):
    """``/healthz``: the event loop answers; ``/readyz``: registered with the runtime."""
    from aiohttp import web

    async def healthz(_):
        return web.Response(text="ok\n")

    async def readyz(_):
        if plugin.ready.is_set():
            return web.Response(text="ok\n")
        return web.Response(status=503, text=f"not registered with the runtime at {plugin.socket_path}\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    log.info("NRI plugin health on http://%s:%s/", address, port)
    return runner


def policy_switch(policy_object: Callable[[], Mapping[str, Any] | None], switch: Callable[[Any], bool],
                  what: str) -> Callable[[], bool]:
    """Whether the ColocationPolicy (its raw object, None: none exists -> defaults) has ``switch``
    on; parsed once per resourceVersion, an invalid one keeps the last valid answer (as the agent
    keeps the last valid policy; the default policy's before any). ``what`` names it in the log."""
    from tidal.api.policy import ColocationPolicy, PolicyValidationError
    seen: dict[str, Any] = {"key": object(), "enabled": switch(ColocationPolicy.from_spec({}))}  # the default

    def enabled() -> bool:
        obj = policy_object()
        key = None if obj is None else ((obj.get("metadata") or {}).get("resourceVersion"))
        if key != seen["key"]:
            seen["key"] = key
            try:
                on = switch(ColocationPolicy.from_spec((obj or {}).get("spec") or {}))
            except PolicyValidationError as err:
                log.error("NRI: ColocationPolicy invalid (%s): %s stays %s", err, what,
                          "on" if seen["enabled"] else "off")
            else:
                if on != seen["enabled"]:
                    log.info("NRI: %s %s", what, "on" if on else "off")
                seen["enabled"] = on
        return seen["enabled"]
    return enabled


def numa_enabled(policy_object: Callable[[], Mapping[str, Any] | None]) -> Callable[[], bool]:
    """``features.numaAffinity.enabled`` of the ColocationPolicy (:func:`policy_switch`)."""
    return policy_switch(policy_object, lambda p: p.features.numa_affinity.enabled,
                         "NUMA affinity at container creation")


def be_idle_group_enabled(policy_object: Callable[[], Mapping[str, Any] | None]) -> Callable[[], bool]:
    """``beIsolation.cpuPriority.idleGroup`` of the ColocationPolicy (:func:`policy_switch`)."""
    return policy_switch(policy_object, lambda p: p.be_isolation.cpu_priority.idle_group_in_force,
                         "BE containers created in the BE idle group")


def batch_resources_enabled(policy_object: Callable[[], Mapping[str, Any] | None]) -> Callable[[], bool]:
    """``beIsolation.batchResources.enabled`` of the ColocationPolicy (:func:`policy_switch`)."""
    return policy_switch(policy_object, lambda p: p.be_isolation.batch_resources.enabled,
                         "BE batch limits at container creation")


def node_active(node_object: Callable[[], Mapping[str, Any] | None], synced: Callable[[], bool]) -> Callable[[], bool]:
    """Whether the node's colocation mode is on (either switch, aliases included, as the agent
    reads it: :func:`tidal.api.node_mode.node_mode`), from its raw object; a node gone is off.
    Before the node is first read: on (the agent's DaemonSet runs where the mode is on, or a
    restore is pending). A change is logged once."""
    from tidal.api.node_mode import node_mode
    seen = {"active": True}

    def active() -> bool:
        if not synced():
            return True
        meta = (node_object() or {}).get("metadata") or {}
        on = node_mode(meta.get("labels"), meta.get("annotations")).active
        if on != seen["active"]:
            log.info("NRI: the node's colocation mode is %s: containers are %s", "on" if on else "off",
                     "adjusted at creation" if on else "left as the kubelet asks")
            seen["active"] = on
        return on
    return active


def nested_quota_rule(cgroup_root: Path) -> bool:
    """Whether the node's CPU quotas follow cgroup v1's rule (a quota never above an ancestor's):
    False only where ``cgroup_root`` is a cgroup v2 hierarchy with the cpu controller. The
    plugin's container sees its own cgroup namespace there, of the node's version. When that
    cannot be told (no cgroup mount), True: a BE container then gets its quota from the agent's
    round, a second later, instead of failing to start."""
    controllers = cgroup_root / "cgroup.controllers"
    try:
        return "cpu" not in controllers.read_text(encoding="ascii").split()
    except OSError:
        return True


async def run_nri(args) -> None:
    stop = stop_on_signals()
    async with contextlib.AsyncExitStack() as stack:
        lookup = numa = idle_group = batch = active = None
        lookups, kubeconfig = lookup_access(args.kubeconfig, args.in_cluster)
        if lookups:
            from tidal.api import qos
            from tidal.api.policy import DEFAULT_POLICY_NAME
            from tidal.kube.watch import ObjectWatch

            from .numa import NUMAPlacer, node_topology
            from .pod_lookup import ApiServerPods
            api = await stack.enter_async_context(connect(kubeconfig, "tidal-agent-nri"))
            lookup = ApiServerPods(api)
            watch = ObjectWatch(api, f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies",
                                DEFAULT_POLICY_NAME, what=f"ColocationPolicy {DEFAULT_POLICY_NAME}")
            task = asyncio.create_task(watch.run())
            stack.callback(task.cancel)
            idle_group = be_idle_group_enabled(lambda: watch.object)
            batch = batch_resources_enabled(lambda: watch.object)
            node = getattr(args, "node", None)
            if node:
                node_watch = ObjectWatch(api, "/api/v1/nodes", node, what=f"Node {node}")
                node_task = asyncio.create_task(node_watch.run())
                stack.callback(node_task.cancel)
                active = node_active(lambda: node_watch.object, node_watch.synced.is_set)
            topology = node_topology(Path(getattr(args, "sys_root", None) or "/sys"))
            if len(topology) > 1:
                numa = NUMAPlacer(topology, numa_enabled(lambda: watch.object))
        try:
            plugin = TidalNRIPlugin(args.socket, name=args.plugin_name, index=args.plugin_index, pod_lookup=lookup,
                                    numa=numa, be_idle_group=idle_group, batch_resources=batch, node_active=active,
                                    nested_quota_rule=nested_quota_rule(Path("/sys/fs/cgroup")))
        except ValueError as err:
            raise SystemExit(f"tidal-agent nri: {err}") from None
        if getattr(args, "health_port", None) is not None:
            runner = await serve_health(args.health_address, args.health_port, plugin)
            stack.push_async_callback(runner.cleanup)
        await plugin.run(stop)


def main(args) -> None:
    """Run the plugin on libuv's event loop (uvloop), with what is loaded at start kept out of
    the cyclic collector's full passes: both shorten the tail of CreateContainer latency."""
    import gc

    import uvloop
    gc.freeze()
    uvloop.run(run_nri(args))
