# SPDX-License-Identifier: Apache-2.0
"""`tidal-agent`: `run` collects this node's usage from the kernel, reports it to its
NodeProfile and runs the node QoS engine (cgroup isolation of BE pods, watermark eviction);
`restore` undoes what the engine changed on the node; `replay` writes NodeProfiles for the
lab's fake nodes from a trace."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

from tidal.kube import ClusterAccessError, connect, stop_on_signals
from tidal.api.policy import Predictor
from tidal.agent.own_scheduling import CHOICES as OWN_SCHEDULING

#: containerd's default NRI socket (tidal.agent.nri.probe.DEFAULT_SOCKET, not imported: the NRI
#: process should not load the capability probe)
_NRI_SOCKET = "/var/run/nri/nri.sock"


def _peak(text: str):
    from tidal.agent.replay import parse_peak
    try:
        return parse_peak(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidal-agent")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="write NodeProfiles of fake nodes from a trace")
    r.add_argument("--kubeconfig", required=True)
    r.add_argument("--trace", required=True, type=Path, help="long CSV: timestamp,series_id,usage,request")
    r.add_argument("--nodes", required=True, help="comma-separated node names this process acts for")
    r.add_argument("--speed", type=float, default=300.0, help="trace seconds per real second")
    r.add_argument("--report-interval", type=float, default=5.0)
    r.add_argument("--predictor", choices=[p.value for p in Predictor],
                   help="override the policy's overselling.predictor")
    r.add_argument("--window", type=int, help="override the policy's overselling.windowSeconds")
    r.add_argument("--node-cpus", type=float, default=16, help="CPUs of each fake node (the lab's: 16)")
    r.add_argument("--node-memory-bytes", type=int, default=64 * 1024**3, help="memory of each fake node")
    r.add_argument("--fill", type=float, default=0.5,
                   help="scale the trace so its largest total request is this share of --node-cpus "
                        "(0 < fill <= 1; default 0.5); 0 keeps the trace's own sizes")
    r.add_argument("--evict", action="store_true",
                   help="evict as the agent does: per node the watermark state machine and the mode's rule on a "
                        "modelled usage (replayed online usage + BE pods at their batch requests), the "
                        "offline-evicting taint, evictions and Events (default: never evict or taint)")
    r.add_argument("--peak", action="append", default=[], type=_peak, metavar="NODE=START_S:DURATION_S:PERCENT[:EVERY_S]",
                   help="a scripted demo peak: NODE's online CPU at least PERCENT of its CPUs for DURATION_S "
                        "seconds from START_S seconds after the replay started, again every EVERY_S seconds "
                        "(repeatable)")
    r.add_argument("--metrics-address", default="127.0.0.1", help="address of /metrics and /healthz")
    r.add_argument("--metrics-port", type=int, help="serve the fake nodes' metrics on this port (0: any)")
    r.add_argument("--prometheus-target-file", type=Path,
                   help="with --metrics-port: write the bound address there as a Prometheus file_sd target "
                        "(for a Prometheus without Kubernetes discovery, as the lab's), removed on exit")
    n = sub.add_parser("run", help="collect this node's usage and report it to its NodeProfile")
    n.add_argument("--node", default=os.environ.get("NODE_NAME"), required=not os.environ.get("NODE_NAME"),
                   help="this node's name (default $NODE_NAME)")
    n.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="default: in-cluster configuration")
    n.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"))
    n.add_argument("--proc-root", type=Path, default=Path("/proc"))
    n.add_argument("--cgroup-driver", choices=("cgroupfs", "systemd"),
                   help="the kubelet's cgroup driver (default: detected from the pod cgroups)")
    n.add_argument("--report-interval", type=float, default=10.0)
    n.add_argument("--history-step-seconds", type=int, default=300,
                   help="step of the history the predictors run on (300 s, as evaluated; shorter in tests)")
    n.add_argument("--kubelet-cgroup-root", default="/",
                   help="the kubelet's --cgroup-root (where kubepods lives in each hierarchy)")
    n.add_argument("--state-dir", type=Path, default=Path("/var/lib/tidal-agent"),
                   help="where the journal of original cgroup values is kept (survives restarts)")
    n.add_argument("--metrics-address", default="0.0.0.0", help="address of /metrics and /healthz")
    n.add_argument("--metrics-port", type=int, default=9465, help="port of /metrics and /healthz (0: any)")
    n.add_argument("--node-memory-cgroup",
                   help="the node is this memory cgroup (path in the memory hierarchy, e.g. a node running "
                        "in a container, or a memory budget standing for a node): its limit is the node's "
                        "memory capacity and its working set the memory used (default: /proc/meminfo)")
    n.add_argument("--own-scheduling", choices=OWN_SCHEDULING, default="batch",
                   help="batch (default): the agent's threads at SCHED_BATCH, so its wake-ups never preempt an "
                        "online request (same CPU share; real-time or SCHED_IDLE threads are left alone); "
                        "batch-short-slice: also the kernel's shortest EEVDF slice (100 us, Linux >= 6.12), so a "
                        "running round keeps a waking online thread waiting at most that long; "
                        "inherit: as the process was started")
    n.add_argument("--nri-socket", default=os.environ.get("NRI_SOCKET", _NRI_SOCKET),
                   help="the runtime's NRI socket, probed for the `nri` capability (default $NRI_SOCKET or "
                        f"{_NRI_SOCKET}; in a pod: where the host's socket directory is mounted)")
    rs = sub.add_parser("restore", help="put back every cgroup value the agent changed on this node and "
                        "remove the offline-evicting taint, and the restore-pending label when everything "
                        "is back (uninstall, or colocation off for good)")
    rs.add_argument("--node", default=os.environ.get("NODE_NAME"), required=not os.environ.get("NODE_NAME"))
    rs.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    rs.add_argument("--state-dir", type=Path, default=Path("/var/lib/tidal-agent"))
    rs.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"),
                    help="where this process sees the cgroup filesystem (default /sys/fs/cgroup: on the host); "
                         "files the agent's pod journalled under its own root are put back under this one")
    nri = sub.add_parser("nri", help="the NRI plugin: QoS resources set by containerd as containers are created")
    nri.add_argument("--socket", default=os.environ.get("NRI_SOCKET", _NRI_SOCKET),
                     help=f"the runtime's NRI socket (default $NRI_SOCKET or {_NRI_SOCKET})")
    nri.add_argument("--plugin-name", default="tidal")
    nri.add_argument("--plugin-index", default="10", help="two digits; plugins are called in index order")
    nri.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                     help="read BE pods without the batch-resources annotation from the API server "
                          "(default $KUBECONFIG; in a pod, without it: the service account)")
    nri.add_argument("--in-cluster", action="store_true",
                     help="API server lookups with the service account, and fail at start without one")
    nri.add_argument("--node", default=os.environ.get("NODE_NAME"),
                     help="with API server access: the node whose colocation mode the plugin follows (default "
                          "$NODE_NAME); while the mode is off it changes no container. Without it: always on")
    nri.add_argument("--health-address", default="0.0.0.0", help="address of /healthz and /readyz")
    nri.add_argument("--health-port", type=int,
                     help="serve /healthz (the process answers) and /readyz (registered with the runtime) "
                          "on this port (default: no health endpoint)")
    p.add_argument("--log-level", default="INFO")
    return p


async def _replay(args) -> None:
    from tidal.agent.replay import read_long_csv, run_replay
    trace = read_long_csv(args.trace)
    if args.fill:
        trace = trace.fitted(args.node_cpus, args.fill)
    stop = stop_on_signals()
    metrics = usage_metrics = runner = None
    if args.metrics_port is not None:
        from prometheus_client import CollectorRegistry

        from tidal.agent.run import serve_health
        from tidal.metrics import node_metrics, scheduler_usage_metrics
        registry = CollectorRegistry()
        metrics, usage_metrics = node_metrics(registry), scheduler_usage_metrics(registry)
        runner = await serve_health(args.metrics_address, args.metrics_port, registry, lambda: True)
        if args.prometheus_target_file:
            from tidal.agent.replay import write_target_file
            write_target_file(args.prometheus_target_file, args.metrics_address, runner.addresses[0][1])
    # The fake nodes stand for machines like this one: its kernel's capabilities, marked replayed.
    from tidal.agent.qos.capabilities import probe, to_status
    capabilities = to_status(probe())
    try:
        async with connect(args.kubeconfig, "tidal-agent-replay") as api:
            await run_replay(api, trace, [n for n in args.nodes.split(",") if n], speed=args.speed,
                             report_interval=args.report_interval, predictor=args.predictor,
                             window=args.window, stop=stop, metrics=metrics, usage_metrics=usage_metrics,
                             node_cpus=args.node_cpus, node_memory_bytes=args.node_memory_bytes,
                             capabilities=capabilities, evict=args.evict, peaks=args.peak)
    finally:
        if runner is not None:
            await runner.cleanup()
        if args.prometheus_target_file:
            args.prometheus_target_file.unlink(missing_ok=True)


async def _run(args) -> None:
    from tidal.agent.collector.cgroups import CgroupDriver
    from tidal.agent.own_scheduling import yield_to_online
    from tidal.agent.run import run_node_agent
    yield_to_online(args.own_scheduling)  # before any other thread starts: they inherit it
    stop = stop_on_signals()
    async with connect(args.kubeconfig, "tidal-agent") as api:
        await run_node_agent(api, args.node, cgroup_root=args.cgroup_root, proc_root=args.proc_root,
                             report_interval=args.report_interval, stop=stop,
                             history_step_seconds=args.history_step_seconds,
                             cgroup_driver=CgroupDriver(args.cgroup_driver) if args.cgroup_driver else None,
                             kubelet_cgroup_root=args.kubelet_cgroup_root, state_dir=args.state_dir,
                             metrics_address=args.metrics_address, metrics_port=args.metrics_port,
                             nri_socket=args.nri_socket, node_memory_cgroup=args.node_memory_cgroup)


async def _restore(args) -> int:
    from tidal.agent.run import restore_node
    async with connect(args.kubeconfig, "tidal-agent") as api:
        problems = await restore_node(api, args.node, args.state_dir, args.cgroup_root)
    for file, problem in problems:
        print(f"tidal-agent restore: {file}: {problem}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from tidal.agent.replay import TraceError
    try:
        if args.command == "restore":
            return asyncio.run(_restore(args))
        if args.command == "nri":
            from tidal.agent.nri.main import main as nri_main
            nri_main(args)
            return 0
        asyncio.run(_replay(args) if args.command == "replay" else _run(args))
    except TraceError as err:
        print(f"tidal-agent replay: {err}")
        return 2
    except ClusterAccessError as err:  # a KubeconfigError too
        print(f"tidal-agent {args.command}: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
