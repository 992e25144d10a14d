# SPDX-License-Identifier: Apache-2.0
"""`tidal admission review|webhook-config`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from tidal.manager.admission.configuration import webhook_configurations
from tidal.manager.admission.review import answer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tidal admission")
    sub = parser.add_subparsers(dest="command", required=True)
    review = sub.add_parser("review", help=(
        "read one AdmissionReview JSON on stdin, print the response on stdout "
        "(the server's own code path)"))
    review.add_argument("--validate", action="store_true",
                        help="answer as the validating webhook (no patch)")
    config = sub.add_parser("webhook-config", help="print the webhook configurations as YAML")
    config.add_argument("--ca-file", required=True, type=Path, help="CA bundle that signed the serving certificate")
    where = config.add_mutually_exclusive_group()
    where.add_argument("--url", help="call the webhook at this base URL (e.g. the lab's https://127.0.0.1:8443)")
    where.add_argument("--service-name", default="tidal-manager")
    config.add_argument("--service-namespace", default="tidal-system")
    args = parser.parse_args(argv)
    if args.command == "review":
        raw = sys.stdin.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        response, _ = answer(body, with_patch=not args.validate)
        json.dump(response, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.url:
        docs = webhook_configurations(args.ca_file.read_bytes(), url=args.url)
    else:
        docs = webhook_configurations(args.ca_file.read_bytes(), service_name=args.service_name,
                                      service_namespace=args.service_namespace)
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0
