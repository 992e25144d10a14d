"""`tidal-manager`: the admission webhook today; the oversell master and the policy
reconciler join it in later issues."""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal

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
    p.add_argument("--log-level", default=env("TIDAL_LOG_LEVEL", "INFO"))
    return p


async def _run(config: ServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(config, stop)


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
        asyncio.run(_run(config))
    else:
        uvloop.run(_run(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
