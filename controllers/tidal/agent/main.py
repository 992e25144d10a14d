"""`tidal-agent`: `run` collects this node's usage from the kernel and reports it to its
NodeProfile; `replay` does the same for the lab's fake nodes from a trace. The QoS engine
joins `run` with the node-engine issue."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

from tidal.kube import api_client, stop_on_signals
from tidal.policy import Predictor


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
    p.add_argument("--log-level", default="INFO")
    return p


async def _replay(args) -> None:
    from tidal.agent.replay import read_long_csv, run_replay
    trace = read_long_csv(args.trace)
    stop = stop_on_signals()
    async with await api_client(args.kubeconfig) as api:
        await run_replay(api, trace, [n for n in args.nodes.split(",") if n], speed=args.speed,
                         report_interval=args.report_interval, predictor=args.predictor,
                         window=args.window, stop=stop)


async def _run(args) -> None:
    from tidal.agent.collector.cgroups import CgroupDriver
    from tidal.agent.run import run_node_agent
    stop = stop_on_signals()
    async with await api_client(args.kubeconfig) as api:
        await run_node_agent(api, args.node, cgroup_root=args.cgroup_root, proc_root=args.proc_root,
                             report_interval=args.report_interval, stop=stop,
                             history_step_seconds=args.history_step_seconds,
                             cgroup_driver=CgroupDriver(args.cgroup_driver) if args.cgroup_driver else None)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from tidal.agent.replay import TraceError
    try:
        asyncio.run(_replay(args) if args.command == "replay" else _run(args))
    except TraceError as err:
        print(f"tidal-agent replay: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
