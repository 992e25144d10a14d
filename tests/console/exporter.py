"""Test helper process: replays a trace onto the given kwok nodes and runs the oversell master,
both exporting their real metrics (tidal.metrics factories) on 127.0.0.1:<port>/metrics for the
lab's Prometheus. `tidal-agent replay` and `tidal-manager` do the same work; this process only
adds the metrics endpoint they do not offer in the lab yet.

    python exporter.py KUBECONFIG TRACE NODES PORT
"""
import asyncio
import sys

from prometheus_client import CollectorRegistry, start_http_server

from tidal.agent.replay import read_long_csv, run_replay
from tidal.kube import connect, stop_on_signals
from tidal.manager.oversell.loop import run_master
from tidal.metrics import manager_metrics, node_metrics


async def main(kubeconfig: str, trace: str, nodes: str, port: int) -> None:
    registry = CollectorRegistry()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    stop = stop_on_signals()
    async with connect(kubeconfig, "tidal-test-exporter") as api:
        master = asyncio.create_task(run_master(api, 2.0, manager_metrics(registry)))
        await run_replay(api, read_long_csv(trace), nodes.split(","), report_interval=2.0, window=60,
                         predictor="p95", stop=stop, metrics=node_metrics(registry))
        master.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
