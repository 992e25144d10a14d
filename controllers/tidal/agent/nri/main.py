# SPDX-License-Identifier: Apache-2.0
"""``tidal-agent nri``: the NRI plugin as a process (the DaemonSet's sidecar or the agent's)."""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path

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


async def run_nri(args) -> None:
    stop = stop_on_signals()
    async with contextlib.AsyncExitStack() as stack:
        lookup = None
        lookups, kubeconfig = lookup_access(args.kubeconfig, args.in_cluster)
        if lookups:
            from .pod_lookup import ApiServerPods
            api = await stack.enter_async_context(connect(kubeconfig, "tidal-agent-nri"))
            lookup = ApiServerPods(api)
        try:
            plugin = TidalNRIPlugin(args.socket, name=args.plugin_name, index=args.plugin_index, pod_lookup=lookup)
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
