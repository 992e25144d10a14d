# SPDX-License-Identifier: Apache-2.0
"""`tidal-console`: `serve` the REST API and web console; `rbac` prints its ClusterRoles;
`build-web` builds the web UI into the cache (what `make console-web` runs)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="tidal-console")
    p.add_argument("--log-level", default=env("TIDAL_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve /api/v1 and the web console")
    s.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="default: in-cluster configuration")
    s.add_argument("--prometheus-url", default=env("TIDAL_PROMETHEUS_URL", "http://127.0.0.1:9090"))
    s.add_argument("--address", default="127.0.0.1", help="listen address (0.0.0.0 in a pod)")
    s.add_argument("--port", type=int, default=8090)
    s.add_argument("--web-dir", type=Path, default=env("TIDAL_CONSOLE_WEB_DIR"),
                   help="built web console (default: the build of the current sources in the cache)")
    s.add_argument("--auth-cache-seconds", type=float, default=10.0,
                   help="how long TokenReview and SubjectAccessReview answers are reused (0: never)")
    sub.add_parser("rbac", help="print the ClusterRoles (the console's own, viewer, editor) as YAML")
    b = sub.add_parser("build-web", help="build the web console into the cache (npm ci + esbuild)")
    b.add_argument("--force", action="store_true")
    return p


async def _serve(args) -> None:
    from tidal.console.server import ConsoleConfig, serve
    from tidal.kube import connect, stop_on_signals
    stop = stop_on_signals()
    config = ConsoleConfig(prometheus_url=args.prometheus_url, web_dir=args.web_dir,
                           address=args.address, port=args.port, auth_cache_seconds=args.auth_cache_seconds)
    async with connect(args.kubeconfig, "tidal-console") as api:
        await serve(api, config, stop)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from tidal.console.webbuild import WebBuildError, build_web, built_dir
    if args.command == "rbac":
        import yaml

        from tidal.console.rbac import cluster_roles
        print(yaml.safe_dump_all(cluster_roles(), sort_keys=False), end="")
        return 0
    if args.command == "build-web":
        try:
            print(build_web(force=args.force, log=lambda m: print(m, file=sys.stderr)))
        except WebBuildError as err:
            print(f"tidal-console build-web: {err}", file=sys.stderr)
            return 1
        return 0
    if args.web_dir is None:
        try:
            args.web_dir = built_dir()
        except RuntimeError as err:  # no home directory (a non-root user in an image without one)
            logging.getLogger(__name__).warning("no web console (%s): pass --web-dir", err)
    from tidal.kube import ClusterAccessError
    try:
        asyncio.run(_serve(args))
    except ClusterAccessError as err:
        print(f"tidal-console serve: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
