# SPDX-License-Identifier: Apache-2.0
"""`tidal-manager`: the admission webhook (every replica, with watch caches of the namespaces and
the ColocationPolicy for its decisions) and the leader-elected oversell master and policy
reconciler."""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import socket

from tidal.manager.policy.volcano_target import DEFAULT_TARGET
from tidal.manager.admission.server import ServerConfig, serve


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="tidal-manager")
    p.add_argument("--webhook-cert-file", default=env("TIDAL_WEBHOOK_CERT_FILE", "/etc/tidal/webhook/tls.crt"))
    p.add_argument("--webhook-key-file", default=env("TIDAL_WEBHOOK_KEY_FILE", "/etc/tidal/webhook/tls.key"))
    p.add_argument("--webhook-address", default="0.0.0.0")
    p.add_argument("--webhook-port", type=int, default=8443)
    p.add_argument("--health-address", default="0.0.0.0", help="address of /healthz /readyz /metrics")
    p.add_argument("--health-port", type=int, default=8080)
    p.add_argument("--tls-check-seconds", type=float, default=2.0,
                   help="how often the certificate files are checked for rotation")
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"),
                   help="run the oversell master against this cluster (in-cluster config when "
                        "running in a pod); without either, only the webhook runs")
    p.add_argument("--oversell-interval", type=float, default=5.0, help="seconds between master cycles")
    p.add_argument("--volcano-scheduler-config", default=env("TIDAL_VOLCANO_SCHEDULER_CONFIG", DEFAULT_TARGET),
                   help="where the policy reconciler writes load-aware scheduling: file:PATH, "
                        "configmap:NAMESPACE/NAME[/KEY] or none")
    p.add_argument("--volcano-metrics-address", default=env("TIDAL_VOLCANO_METRICS_ADDRESS"),
                   help="Prometheus URL Volcano's usage plugin reads node usage from (unset: leave "
                        "Volcano's metrics section alone)")
    p.add_argument("--volcano-metrics-interval", default="30s",
                   help="how often Volcano queries node usage (read by Volcano at its start)")
    p.add_argument("--lease-name", default="tidal-manager",
                   help="the leader election's Lease (in tidal-system); replicas of one manager share it")
    p.add_argument("--identity", default=env("POD_NAME") or socket.gethostname(),
                   help="this replica's name in the leader election")
    p.add_argument("--log-level", default=env("TIDAL_LOG_LEVEL", "INFO"))
    return p


async def _leader_work(args, stop: asyncio.Event, metrics) -> None:
    """The leader-elected controllers (oversell master, policy reconciler): every replica
    competes, one works."""
    from tidal.api import qos
    from tidal.kube import connect
    from tidal.manager.leader import LeaderElector
    from tidal.manager.oversell.loop import run_batch_requested, run_master
    from tidal.manager.policy.reconciler import run_policy_reconciler
    from tidal.manager.policy.volcano_target import parse_target

    volcano = parse_target(args.volcano_scheduler_config)
    usage_source = None
    if args.volcano_metrics_address:
        usage_source = {"type": "prometheus", "address": args.volcano_metrics_address,
                        "interval": args.volcano_metrics_interval}

    async def work() -> None:
        try:
            await asyncio.gather(run_master(api, args.oversell_interval, metrics),
                                 run_batch_requested(api, metrics),
                                 run_policy_reconciler(api, volcano=volcano, metrics=usage_source))
        finally:  # leadership lost: the new leader reports the nodes, not this replica
            metrics.batch_allocatable.clear()
            metrics.batch_requested.clear()

    async with connect(args.kubeconfig, "tidal-manager") as api:
        elector = LeaderElector(api, args.lease_name, qos.NAMESPACE, args.identity)
        await elector.run(work, stop)


async def _run(config: ServerConfig, args) -> None:
    from tidal.kube import stop_on_signals
    from tidal.manager.admission.server import AdmissionMetrics
    from tidal.metrics import manager_metrics
    stop = stop_on_signals()
    # One registry, served at the health port's /metrics: admission and the leader's controllers.
    admission_metrics = AdmissionMetrics()
    missing = cluster_access(args.kubeconfig)
    if missing is not None:
        logging.getLogger(__name__).warning(
            "only the webhook runs, with the policy defaults and no namespace annotations: %s", missing)
        await serve(config, stop, admission_metrics)
        return
    from tidal.kube import connect
    from tidal.manager.admission.context_cache import AdmissionContexts
    # Every replica answers reviews, so every replica keeps the admission caches (the leader's
    # controllers have their own watches).
    async with connect(args.kubeconfig, "tidal-manager-admission") as api:
        contexts = AdmissionContexts(api)
        caches = asyncio.create_task(contexts.run())
        try:
            await asyncio.gather(serve(config, stop, admission_metrics, contexts),
                                 _leader_work(args, stop, manager_metrics(admission_metrics.registry)))
        finally:
            caches.cancel()


def cluster_access(kubeconfig: str | None, environ=None, account=None) -> str | None:
    """None when the leader's controllers can reach the cluster (a kubeconfig, else the pod's
    service account), else why not: then only the webhook runs, which needs no API access."""
    from tidal.kube import SERVICE_ACCOUNT, ClusterAccessError, resolve_kubeconfig
    try:
        resolve_kubeconfig(kubeconfig, environ, account or SERVICE_ACCOUNT)
    except ClusterAccessError as err:
        return str(err)
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for path, flag in ((args.webhook_cert_file, "--webhook-cert-file"), (args.webhook_key_file, "--webhook-key-file")):
        if not os.path.exists(path):
            print(f"tidal-manager: {flag} {path} does not exist", flush=True)
            return 2
    config = ServerConfig(cert_file=args.webhook_cert_file, key_file=args.webhook_key_file,
                          address=args.webhook_address, port=args.webhook_port,
                          health_address=args.health_address, health_port=args.health_port,
                          tls_check_seconds=args.tls_check_seconds)
    # Everything loaded so far lives as long as the process: keep it out of the cyclic
    # collector's full passes, which otherwise show up as latency spikes.
    gc.freeze()
    try:
        import uvloop  # libuv's event loop: about twice the requests per core of asyncio's
    except ImportError:
        asyncio.run(_run(config, args))
    else:
        uvloop.run(_run(config, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
