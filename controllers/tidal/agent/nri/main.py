"""``tidal-agent nri``: the NRI plugin as a process (the DaemonSet's sidecar or the agent's)."""
from __future__ import annotations

import contextlib

from tidal.kube import api_client, stop_on_signals

from .plugin import TidalNRIPlugin


async def run_nri(args) -> None:
    stop = stop_on_signals()
    async with contextlib.AsyncExitStack() as stack:
        lookup = None
        if args.kubeconfig or args.in_cluster:
            from .pod_lookup import ApiServerPods
            api = await stack.enter_async_context(await api_client(args.kubeconfig if not args.in_cluster else None))
            lookup = ApiServerPods(api)
        try:
            plugin = TidalNRIPlugin(args.socket, name=args.plugin_name, index=args.plugin_index, pod_lookup=lookup)
        except ValueError as err:
            raise SystemExit(f"tidal-agent nri: {err}") from None
        await plugin.run(stop)


def main(args) -> None:
    """Run the plugin on libuv's event loop (uvloop), with what is loaded at start kept out of
    the cyclic collector's full passes: both shorten the tail of CreateContainer latency."""
    import gc

    import uvloop
    gc.freeze()
    uvloop.run(run_nri(args))
