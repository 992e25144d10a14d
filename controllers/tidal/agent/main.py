"""`tidal-agent`: today the replay source for the lab (`tidal-agent replay`); the real
node mode (kernel collector, QoS engine) is wired in with the node-engine issue."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidal-agent")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="write NodeProfiles of fake nodes from a trace")
    r.add_argument("--kubeconfig", required=True)
    r.add_argument("--trace", required=True, type=Path, help="long CSV: timestamp,series_id,usage,request")
    r.add_argument("--nodes", required=True, help="comma-separated node names this process acts for")
    r.add_argument("--speed", type=float, default=300.0, help="trace seconds per real second")
    r.add_argument("--report-interval", type=float, default=5.0)
    r.add_argument("--predictor", default="p95", choices=("p90", "p95", "p99", "max"))
    r.add_argument("--window", type=int, default=300, help="seconds of usage the predictor looks at")
    p.add_argument("--log-level", default="INFO")
    return p


async def _replay(args) -> None:
    from kubernetes_asyncio import config

    from tidal.agent.replay import read_long_csv, run_replay
    trace = read_long_csv(args.trace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    api = await config.new_client_from_config(config_file=args.kubeconfig)
    async with api:
        await run_replay(api, trace, [n for n in args.nodes.split(",") if n], speed=args.speed,
                         report_interval=args.report_interval, predictor=args.predictor,
                         window=args.window, stop=stop)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from tidal.agent.replay import TraceError
    try:
        asyncio.run(_replay(args))
    except TraceError as err:
        print(f"tidal-agent replay: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
