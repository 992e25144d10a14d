"""``tidal predict ...``: evaluate the predictors on a trace, convert public traces.

    tidal predict evaluate --trace FILE [--horizon 60m] [--warmup 1d] [--json]
    tidal predict convert-azure --cpu CPU.csv.gz --meta META.csv [--variant strict|lenient]
                                [--category Interactive|all] -o OUT.csv
    tidal predict convert-alibaba --usage USAGE.csv.gz --meta META.csv.gz
                                  [--variant strict|lenient] [--step 5m] -o OUT.csv

Exit status: 0 on success, 1 when an input cannot be read or evaluated (the message names the
file, line and column), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import sys
import time
from typing import IO

from tidal.predict.alibaba import convert_alibaba
from tidal.predict.azure import VARIANTS, convert_azure
from tidal.predict.evaluate import Evaluation, evaluate
from tidal.predict.predictors import NAMES, Oracle, realisable
from tidal.predict.series import TraceFormatError, read_trace, write_long_csv

PROG = "tidal predict"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> int:
    """``60m``, ``5m``, ``3600s``, ``1h``, ``1d`` or plain seconds → whole seconds (> 0 or 0)."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r} (use e.g. 60m, 5m, 3600s, 1h, 1d)"
        )
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"duration {text!r} is not a whole number of seconds")
    return int(seconds)


def _positive_duration(text: str) -> int:
    v = parse_duration(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be positive")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Oversell predictors measured on traces.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{evaluate,convert-azure,convert-alibaba}")

    e = sub.add_parser("evaluate", help="score every predictor (and the peak oracle) on a trace")
    e.add_argument("--trace", required=True, help="long CSV: timestamp,series_id,usage,request")
    e.add_argument("--horizon", type=_positive_duration, default=3600, help="look-ahead (default 60m)")
    e.add_argument("--warmup", type=parse_duration, default=86400, help="skipped start (default 1d)")
    e.add_argument(
        "--max-gap", type=parse_duration, default=None,
        help="carry a missing reading forward at most this long (default: until the series' next reading)",
    )
    e.add_argument("--step", type=_positive_duration, default=None, help="grid step (default: inferred)")
    e.add_argument(
        "--predictors", default=None,
        help=f"comma-separated subset of {','.join(NAMES)} (default: all)",
    )
    e.add_argument("--json", action="store_true", help="print JSON instead of a table")

    a = sub.add_parser("convert-azure", help="Azure 2019 vm_cpu_readings + vmtable → long CSV")
    a.add_argument("--cpu", required=True, help="timestamp,vm_id,min_cpu,max_cpu,avg_cpu (.gz ok)")
    a.add_argument("--meta", required=True, help="vmtable CSV with vm_category, core count")
    a.add_argument("--variant", choices=sorted(VARIANTS), default="strict",
                   help="strict: max_cpu (default); lenient: avg_cpu")
    a.add_argument("--category", default="all", help="a vm_category (e.g. Interactive) or all (default)")
    a.add_argument("-o", "--output", required=True, help="output CSV (.gz ok, - for stdout)")

    b = sub.add_parser("convert-alibaba", help="Alibaba 2018 machine_usage + machine_meta → long CSV")
    b.add_argument("--usage", required=True, help="machine_usage.csv (.gz ok)")
    b.add_argument("--meta", required=True, help="machine_meta.csv (.gz ok)")
    b.add_argument("--variant", choices=("strict", "lenient"), default="strict",
                   help="strict: max within each step (default); lenient: mean")
    b.add_argument("--step", type=_positive_duration, default=300, help="grid step (default 5m)")
    b.add_argument("-o", "--output", required=True, help="output CSV (.gz ok, - for stdout)")
    return p


def main(argv: list[str]) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "convert-azure":
            conv = convert_azure(args.cpu, args.meta, variant=args.variant, category=args.category)
            n = _write(conv.rows, args.output)
            print(
                f"{PROG}: wrote {n} readings of {conv.vms} VMs ({args.variant}) to {args.output}"
                + (f"; {conv.missing} empty readings left out" if conv.missing else "")
                + (f"; {conv.skipped_category} readings of other categories skipped"
                   if conv.skipped_category else ""),
                file=sys.stderr,
            )
            return 0
        if args.command == "convert-alibaba":
            conv = convert_alibaba(args.usage, args.meta, variant=args.variant, step=args.step)
            n = _write(conv.rows, args.output)
            print(
                f"{PROG}: wrote {n} {args.step}-second points of {conv.machines} machines "
                f"({args.variant}, from {conv.readings} readings) to {args.output}"
                + (f"; {conv.skipped} readings without cpu skipped" if conv.skipped else ""),
                file=sys.stderr,
            )
            return 0
    except (TraceFormatError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    parser.print_usage(sys.stderr)
    return 2


def _write(rows, output: str) -> int:
    if output == "-":
        return write_long_csv(rows, sys.stdout)
    if output.endswith(".gz"):
        with gzip.open(output, "wt", encoding="utf-8", newline="") as f:
            return write_long_csv(rows, f)
    with open(output, "w", encoding="utf-8", newline="") as f:
        return write_long_csv(rows, f)


class _Progress:
    """Progress on stderr, only once a run has taken more than two seconds."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.last = self.start
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 2.0 and done < total:
            return
        if now - self.start < 2.0:
            return
        self.last = now
        self.shown = True
        self.stream.write(f"{PROG}: evaluating {100 * done / total:.0f} % ({done}/{total} decision points)\n")
        self.stream.flush()


def _evaluate(args: argparse.Namespace) -> int:
    trace = read_trace(args.trace, step=args.step, max_gap_seconds=args.max_gap)
    predictors = [Oracle.for_trace(trace, args.horizon), *realisable(args.horizon)]
    if args.predictors:
        wanted = [w.strip() for w in args.predictors.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in NAMES]
        if unknown:
            raise ValueError(f"unknown predictor(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
        predictors = [p for p in predictors if p.name in wanted]
    result = evaluate(
        trace, predictors, horizon_seconds=args.horizon, warmup_seconds=args.warmup,
        progress=_Progress(sys.stderr),
    )
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(result))
    return 0


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{100 * x:.{digits}f} %"


def format_table(ev: Evaluation) -> str:
    """The human-readable table (markdown), with a one-paragraph header."""
    h = ev.horizon_seconds
    hname = f"{h // 60} min" if h % 60 == 0 else f"{h} s"
    out = io.StringIO()
    out.write(
        f"{ev.trace}: {ev.series} series × {ev.steps} steps of {ev.step_seconds} s; "
        f"{ev.decisions} decision points after {ev.warmup_seconds} s of warm-up; "
        f"horizon {hname}; mean requests {ev.mean_request:.2f} cores, mean usage "
        f"{ev.mean_usage:.2f} cores ({_pct(ev.mean_usage / ev.mean_request if ev.mean_request else 0)}); "
        f"{ev.filled} missing readings carried forward; {ev.elapsed_seconds:.1f} s\n\n"
    )
    extra = h != 3600
    cols = ["predictor", "reclaimed", "violation 5 min", "violation 60 min"]
    if extra:
        cols.append(f"violation {hname}")
    cols += ["mean overshoot", "gap closed"]
    out.write("| " + " | ".join(cols) + " |\n")
    out.write("|" + "|".join("---" for _ in cols) + "|\n")
    for r in ev.results:
        name = f"**{r.name}** (default)" if r.default else r.name
        cells = [name, _pct(r.reclaimed), _pct(r.violation_5m, 2), _pct(r.violation_60m, 2)]
        if extra:
            cells.append(_pct(r.violation, 2))
        cells += [_pct(r.overshoot, 3), _pct(r.gap_closed, 0)]
        out.write("| " + " | ".join(cells) + " |\n")
    out.write(
        "\ngap closed: share of the reclaimed gap between rc-nsigma-max and the oracle; "
        "overshoot: mean shortfall per decision point, as a fraction of the requests.\n"
    )
    return out.getvalue()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
