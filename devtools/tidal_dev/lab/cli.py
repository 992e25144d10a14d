# SPDX-License-Identifier: Apache-2.0
"""`tidal lab build|up|down|status|kubeconfig|logs`."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from tidal_dev.lab import build as lab_build
from tidal_dev.lab.components import COMPONENT_NAMES
from tidal_dev.lab.lab import Lab, LabError, LabStatus


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidal lab", description=(
        "A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, "
        "Volcano, kwok nodes, Prometheus) and a real node (containerd, kubelet, kube-proxy) "
        "on this machine's loopback and a bridge of the lab's own."))
    parser.add_argument("--dir", default=os.environ.get("TIDAL_LAB_DIR"),
                        help="lab state directory (default $TIDAL_LAB_DIR or ~/.cache/tidal/lab/run)")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the pinned upstream binaries into the cache")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    up = sub.add_parser("up", help="start (or reuse) the lab; builds binaries when missing")
    up.add_argument("--nodes", type=int, default=3, help="fake kwok nodes to create (default 3)")
    up.add_argument("--real-nodes", type=int, default=1,
                    help="real nodes (kubelet, containerd, kube-proxy on this machine): 0 or 1 (default 1)")
    up.add_argument("--no-build", action="store_true", help="fail instead of building missing binaries")
    restart = sub.add_parser("restart", help="restart one component (after its configuration changed)")
    restart.add_argument("component", choices=COMPONENT_NAMES)
    stop = sub.add_parser("stop", help="stop one component (`up` or `restart` starts it again)")
    stop.add_argument("component", choices=COMPONENT_NAMES)
    down = sub.add_parser("down", help="stop every lab process")
    down.add_argument("--wipe", action="store_true", help="also delete the lab's state (etcd data, PKI, logs)")
    status = sub.add_parser("status", help="health of every component and node")
    status.add_argument("--json", action="store_true")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    sub.add_parser("bin-dir", help="print the directory of the lab's built binaries")
    image = sub.add_parser("image", help="build the controllers' image (when its inputs changed) and "
                                         "import it into the lab's real nodes")
    image.add_argument("--force", action="store_true", help="rebuild even when built")
    ctl = sub.add_parser("controllers", help="supervise Tidal's controllers as lab processes")
    ctl.add_argument("action", choices=("up", "down", "status"))
    ctl.add_argument("--spec", type=Path, help="with up: YAML list of {name, argv} to run")
    logs = sub.add_parser("logs", help="print a component's log")
    logs.add_argument("component", choices=COMPONENT_NAMES)
    logs.add_argument("-n", "--lines", type=int, default=100)
    logs.add_argument("-f", "--follow", action="store_true")
    return parser


def format_status(status: LabStatus) -> str:
    if not status.components:
        return f"lab at {status.lab_dir}: not created (run `tidal lab up`)"
    lines = [f"lab at {status.lab_dir}: {'healthy' if status.healthy else 'NOT healthy'}",
             f"kubeconfig: {status.kubeconfig}"]
    width = max(len(c.name) for c in status.components)
    for c in status.components:
        mark = "ok  " if c.healthy else "FAIL"
        pid = f"pid {c.pid}" if c.pid else "-"
        lines.append(f"  {mark} {c.name:<{width}}  {pid:<11} {c.endpoint}  {c.detail}")
    for node in status.nodes:
        if "error" in node:
            lines.append(f"  nodes: {node['error']}")
        else:
            lines.append(f"  node {node['name']}: {'Ready' if node['ready'] else 'NotReady'} "
                         f"cpu={node['cpu']} memory={node['memory']}")
    return "\n".join(lines)


def _controllers(lab: Lab, args) -> int:
    """`tidal lab controllers up --spec FILE | down | status`; up/down print what they did."""
    import yaml

    from tidal_dev.lab import controllers
    if args.action == "up":
        if not args.spec:
            print("tidal lab controllers up: --spec FILE is required", file=sys.stderr)
            return 2
        try:
            spec = controllers.parse_spec(yaml.safe_load(args.spec.read_text()))
        except (OSError, yaml.YAMLError, controllers.ControllerSpecError) as err:
            print(f"tidal lab controllers up: {args.spec}: {err}", file=sys.stderr)
            return 2
        result = controllers.up(lab.dir, spec)
        for verb in ("started", "restarted", "stopped", "reused"):
            names = getattr(result, verb)
            if names:
                print(f"{verb}: {', '.join(names)}")
    elif args.action == "down":
        stopped = controllers.down(lab.dir)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    else:
        print(json.dumps(controllers.status(lab.dir), indent=2))
    return 0


def _image_error() -> type[Exception]:
    from tidal_dev.lab.image import ImageBuildError
    return ImageBuildError


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    lab = Lab(args.dir)
    try:
        if args.command == "build":
            print(lab_build.build(force=args.force))
        elif args.command == "up":
            result = lab.up(nodes=args.nodes, build_binaries=not args.no_build, real_nodes=args.real_nodes)
            if result.started or result.nodes_created:
                print("started: " + ", ".join(result.started + [f"node {n}" for n in result.nodes_created]))
            if result.reused:
                print("reused: " + ", ".join(result.reused))
            if result.stopped:
                print("stopped: " + ", ".join(result.stopped))
            status = lab.status()
            print(format_status(status))
            return 0 if status.healthy else 1
        elif args.command == "down":
            stopped = lab.down(wipe=args.wipe)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running")
                  + ("; state wiped" if args.wipe else ""))
        elif args.command == "status":
            status = lab.status()
            print(json.dumps(status.to_json(), indent=2) if args.json else format_status(status))
            return 0 if status.healthy else 1
        elif args.command == "stop":
            print(f"stopped: {args.component}" if lab.stop(args.component) else f"{args.component} was not running")
        elif args.command == "restart":
            lab.restart(args.component)
            print(f"restarted: {args.component}")
        elif args.command == "controllers":
            return _controllers(lab, args)
        elif args.command == "image":
            from tidal_dev.lab import image as lab_image
            from tidal_dev.lab.lab import build_tag
            archive = lab_image.build_image(force=args.force)
            imported = lab.import_image(archive)
            print(f"{lab_image.image_reference()}: {archive}"
                  + (f"; imported into the containerd of {', '.join(imported)}" if imported
                     else "; every real node already holds it"))
            print(f"image: {build_tag(lab_image.image_reference(), archive)}")
        elif args.command == "bin-dir":
            print(lab_build.versions.bin_dir())
        elif args.command == "kubeconfig":
            print(lab.kubeconfig_path)
        elif args.command == "logs":
            path = lab.logs_dir / f"{args.component}.log"
            if not path.exists():
                print(f"no log for {args.component} at {path}", file=sys.stderr)
                return 1
            cmd = ["tail", "-n", str(args.lines)] + (["-F"] if args.follow else []) + [str(path)]
            return subprocess.call(cmd)
    except (LabError, lab_build.LabBuildError, _image_error()) as err:
        print(f"tidal lab {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
