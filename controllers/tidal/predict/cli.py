# SPDX-License-Identifier: Apache-2.0
"""``tidal predict ...``: evaluate the predictors on a trace, convert public traces.

    tidal predict evaluate --trace FILE|DIR [--trace ...] [--horizon 60m] [--warmup 1d]
                           [--budget 1%] [--worst-node-budget 3%] [--per-trace] [--json]
    tidal predict convert-azure --cpu CPU.csv.gz --meta META.csv [--variant strict|lenient]
                                [--category Interactive|all] [--vms-per-node N [--placement-seed S]]
                                -o OUT.csv|DIR
    tidal predict convert-alibaba --usage USAGE.csv.gz --meta META.csv.gz
                                  [--variant strict|lenient] [--step 5m] -o OUT.csv
    tidal predict synthesize --shape SHAPE [--seed N] -o OUT.csv
    tidal predict frontier --trace FILE|DIR [--trace ...] [--horizon 60m] [--warmup 1d]
                           [--budget 1%] [--json]

Exit status: 0 on success, 1 when an input cannot be read or evaluated (the message names the
file, line and column), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import random
import re
import sys
import time
from pathlib import Path
from typing import IO

from tidal.predict.alibaba import convert_alibaba
from tidal.predict.azure import VARIANTS, convert_azure
from tidal.predict.evaluate import (
    DEFAULT_BUDGET,
    WORST_NODE_FACTOR,
    Evaluation,
    Pooled,
    decision_range,
    evaluate,
    pool,
)
from tidal.predict.frontier import FrontierResult, frontier
from tidal.predict.predictors import DEFAULT, NAMES, Oracle, realisable
from tidal.predict.series import Trace, TraceFormatError, read_trace, write_long_csv
from tidal.predict.synthetic import GENERATORS, trace_rows

PROG = "tidal predict"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
#: The files a directory given to ``--trace`` stands for.
TRACE_SUFFIXES = (".csv", ".csv.gz")
#: Up to this many traces the human output shows one table per trace (more: --per-trace).
PER_TRACE_TABLES = 3
#: Traces read in the up-front check are kept for the evaluation up to this many grid cells
#: (series × steps) in all; the others are read again when their turn comes.
KEEP_CELLS = 4_000_000


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


FIVE_MINUTES = 300  # the short violation window of the tables


def parse_budget(text: str) -> float:
    """``1%``, ``0.5 %`` or ``0.01`` → a fraction in [0, 1]. A bare number is a fraction below 1:
    a bare ``1`` (100 %, or 1 % meant?) is refused, as every number ≥ 1 without ``%``."""
    t = text.strip()
    percent = t.endswith("%")
    try:
        v = float(t[:-1] if percent else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid budget {text!r} (use e.g. 1% or 0.01)") from None
    if not percent and math.isfinite(v) and v >= 1:
        raise argparse.ArgumentTypeError(
            f"budget {text!r}: a number without % is a fraction below 1 (0.01 is 1 %); write {t}% for a percentage"
        )
    if percent:
        v /= 100
    if not math.isfinite(v) or v < 0 or v > 1:
        raise argparse.ArgumentTypeError(
            f"budget {text!r} must lie between 0 and 1 (or 0 % and 100 %), e.g. 1% or 0.01"
        )
    return v


def trace_files(args: list[str]) -> list[str]:
    """``--trace`` values → trace files: a directory stands for its ``*.csv`` and ``*.csv.gz``
    files, sorted by name; a file named twice counts once. An empty directory is an error."""
    out: list[str] = []
    seen: set[Path] = set()
    for a in args:
        p = Path(a)
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir()
                if f.is_file() and f.name.endswith(TRACE_SUFFIXES)
            )
            if not found:
                raise ValueError(f"{a}: no trace files (*.csv, *.csv.gz) in this directory")
            paths = [str(f) for f in found]
        else:
            paths = [a]  # a missing file is reported by read_trace
        for f in paths:
            key = Path(f).resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _positive_duration(text: str) -> int:
    v = parse_duration(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be positive")
    return v


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive whole number")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Oversell predictors measured on traces.")
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{evaluate,frontier,convert-azure,convert-alibaba,synthesize}")

    e = sub.add_parser(
        "evaluate", help="score every predictor (and the peak oracle) on traces, per node and pooled",
        description="Score every predictor on each trace (one trace = one node), one after another, "
        "and pooled over all of them.",
    )
    e.add_argument(
        "--trace", required=True, action="append", metavar="FILE|DIR",
        help="long CSV (timestamp,series_id,usage,request; .gz ok), one node; or a directory: "
        "every *.csv and *.csv.gz in it, sorted by name. Repeatable",
    )
    e.add_argument("--horizon", type=_positive_duration, default=3600, help="look-ahead (default 60m)")
    e.add_argument(
        "--warmup", type=parse_duration, default=86400,
        help="decision points not scored at the start, e.g. 0, 30m, 2h (default 1d)",
    )
    e.add_argument(
        "--budget", type=parse_budget, default=DEFAULT_BUDGET,
        help="violation budget: mean 60-min violation rate over the nodes, e.g. 1%% or 0.01 "
        "(default 1%%)",
    )
    e.add_argument(
        "--worst-node-budget", type=parse_budget, default=None,
        help=f"bound on the worst node's 60-min violation rate (default {WORST_NODE_FACTOR:g} × "
        "--budget: 3%% with the default budget)",
    )
    e.add_argument(
        "--per-trace", action="store_true",
        help=f"one table per trace even with more than {PER_TRACE_TABLES} traces",
    )
    e.add_argument(
        "--max-gap", type=parse_duration, default=None,
        help="carry a missing reading forward at most this long (default: until the series' next reading)",
    )
    e.add_argument("--step", type=_positive_duration, default=None, help="grid step (default: inferred)")
    e.add_argument(
        "--predictors", default=None,
        help=f"comma-separated subset of {','.join(NAMES)} (default: all)",
    )
    e.add_argument(
        "--json", action="store_true",
        help="print JSON instead of tables: traces (one object per trace), pooled, budget, "
        "worst_node_budget, baseline, note; with one trace its fields also at the top level",
    )

    f = sub.add_parser(
        "frontier", help="what simple rule families reclaim at the budget with their constant chosen in hindsight",
        description="Per trace: every rule family of tidal.predict.frontier with its one constant chosen "
        "after the fact on that trace (the smallest that keeps the 60-min violation rate within the budget): "
        "an upper bound for the family, not a predictor; with the best peer within budget, the default and "
        "the oracle as `evaluate` scores them, and the gap closed.",
    )
    f.add_argument("--trace", required=True, action="append", metavar="FILE|DIR",
                   help="long CSV (.gz ok), one node; or a directory of them. Repeatable")
    f.add_argument("--horizon", type=_positive_duration, default=3600, help="look-ahead (default 60m)")
    f.add_argument("--warmup", type=parse_duration, default=86400, help="decision points not scored (default 1d)")
    f.add_argument("--budget", type=parse_budget, default=DEFAULT_BUDGET,
                   help="60-min violation budget, e.g. 1%% or 0.01 (default 1%%)")
    f.add_argument("--json", action="store_true", help="print JSON: one object per trace")

    a = sub.add_parser("convert-azure", help="Azure 2019 vm_cpu_readings + vmtable → long CSV")
    a.add_argument("--cpu", required=True, help="timestamp,vm_id,min_cpu,max_cpu,avg_cpu (.gz ok)")
    a.add_argument("--meta", required=True, help="vmtable CSV with vm_category, core count")
    a.add_argument("--variant", choices=sorted(VARIANTS), default="strict",
                   help="strict: max_cpu (default); lenient: avg_cpu")
    a.add_argument("--category", default="all", help="a vm_category (e.g. Interactive) or all (default)")
    a.add_argument("--vms-per-node", type=positive_int, default=0, metavar="N",
                   help="place the VMs on nodes of N each (in VM id order; the last node takes the "
                        "rest) and write one trace per node into the directory OUTPUT, which "
                        "`evaluate --trace DIR` pools; default: every VM on one node, one file")
    a.add_argument("--placement-seed", type=int, default=None, metavar="S",
                   help="with --vms-per-node: place the VMs in an order shuffled with seed S "
                        "instead of id order (which VMs share a node changes what every rule "
                        "reclaims and misses; several seeds show the spread)")
    a.add_argument("-o", "--output", required=True,
                   help="output CSV (.gz ok, - for stdout); with --vms-per-node a directory")

    b = sub.add_parser("convert-alibaba", help="Alibaba 2018 machine_usage + machine_meta → long CSV")
    b.add_argument("--usage", required=True, help="machine_usage.csv (.gz ok)")
    b.add_argument("--meta", required=True, help="machine_meta.csv (.gz ok)")
    b.add_argument("--variant", choices=("strict", "lenient"), default="strict",
                   help="strict: max within each step (default); lenient: mean")
    b.add_argument("--step", type=_positive_duration, default=300, help="grid step (default 5m)")
    b.add_argument("-o", "--output", required=True, help="output CSV (.gz ok, - for stdout)")

    y = sub.add_parser("synthesize", help="a seeded synthetic stress trace → long CSV")
    y.add_argument("--shape", choices=sorted(GENERATORS), required=True)
    y.add_argument("--seed", type=int, default=0, help="random seed (default 0): same seed, same trace")
    y.add_argument("-o", "--output", required=True, help="output CSV (.gz ok, - for stdout)")
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
        if args.command == "frontier":
            return _frontier(args)
        if args.command == "convert-azure":
            if args.placement_seed is not None and not args.vms_per_node:
                raise ValueError("--placement-seed places VMs on nodes: give --vms-per-node too")
            if args.vms_per_node:
                check_node_directory(Path(args.output))  # before the conversion's work
            conv = convert_azure(args.cpu, args.meta, variant=args.variant, category=args.category)
            if args.vms_per_node:
                n, nodes = write_node_traces(conv.rows, args.vms_per_node, Path(args.output),
                                             seed=args.placement_seed)
                where = f"{nodes} node traces of up to {args.vms_per_node} VMs in {args.output}"
            else:
                n, where = _write(conv.rows, args.output), args.output
            print(
                f"{PROG}: wrote {n} readings of {conv.vms} VMs ({args.variant}) to {where}"
                + (f"; {conv.missing} empty readings left out" if conv.missing else "")
                + (f"; {conv.skipped_category} readings of other categories skipped"
                   if conv.skipped_category else ""),
                file=sys.stderr,
            )
            return 0
        if args.command == "synthesize":
            trace = GENERATORS[args.shape](args.seed)
            n = _write(trace_rows(trace), args.output)
            print(f"{PROG}: wrote {n} readings of {len(trace.series_ids)} series ({args.shape}, seed "
                  f"{args.seed}, {len(trace)} steps of {trace.step} s) to {args.output}", file=sys.stderr)
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


def check_node_directory(directory: Path) -> None:
    """Node traces go into a new or empty directory: not stdout, not a file, not a directory
    that holds traces already (a pooled evaluation of it would mix them in)."""
    if str(directory) == "-":
        raise ValueError("--vms-per-node writes a directory of node traces, not to stdout: give -o DIR")
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--vms-per-node writes a directory of node traces, and {directory} is a file")
    if directory.is_dir():
        present = sorted(p.name for p in directory.iterdir() if p.name.endswith(TRACE_SUFFIXES))
        if present:
            raise ValueError(f"{directory} already holds traces ({', '.join(present[:3])}"
                             f"{', …' if len(present) > 3 else ''}); give an empty or new directory")


def write_node_traces(rows, per_node: int, directory: Path, *, seed: int | None = None) -> tuple[int, int]:
    """Split ``rows`` by series into nodes of ``per_node`` series each (in series id order, or
    shuffled with ``seed``; the last node takes the rest) and write ``node-NNN.csv`` per node
    into ``directory``, which must not hold traces already (a pooled evaluation of the folder
    would mix them in). Returns (readings written, nodes)."""
    rows = list(rows)
    ids = sorted({sid for _, sid, _, _ in rows})
    if seed is not None:
        random.Random(seed).shuffle(ids)
    if not ids:
        raise ValueError("no readings to place on nodes")
    node_of = {sid: i // per_node for i, sid in enumerate(ids)}
    nodes = -(-len(ids) // per_node)
    check_node_directory(directory)
    directory.mkdir(parents=True, exist_ok=True)
    by_node: list[list] = [[] for _ in range(nodes)]
    for r in rows:  # one pass; each node's readings keep their (timestamp, VM) order
        by_node[node_of[r[1]]].append(r)
    width = max(3, len(str(nodes - 1)))
    written = sum(_write(mine, str(directory / f"node-{node:0{width}d}.csv"))
                  for node, mine in enumerate(by_node))
    return written, nodes


class _Progress:
    """Progress on stderr, only once a run has taken more than two seconds."""

    def __init__(self, stream: IO[str], prefix: str = "") -> None:
        self.stream = stream
        self.prefix = prefix
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
        self.stream.write(
            f"{PROG}: {self.prefix}evaluating {100 * done / total:.0f} % ({done}/{total} decision points)\n"
        )
        self.stream.flush()


def _evaluate(args: argparse.Namespace) -> int:
    wanted: list[str] | None = None
    if args.predictors is not None:
        wanted = [w.strip() for w in args.predictors.split(",") if w.strip()]
        if not wanted:
            raise ValueError(f"--predictors names no predictor; known: {', '.join(NAMES)}")
        unknown = [w for w in wanted if w not in NAMES]
        if unknown:
            raise ValueError(f"unknown predictor(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
    files = trace_files(args.trace)
    # Read and check every trace first: a bad file fails the run before any evaluation.
    kept: dict[str, Trace] = {}
    cells = 0
    for f in files:
        trace = read_trace(f, step=args.step, max_gap_seconds=args.max_gap)
        decision_range(len(trace), trace.step, horizon_seconds=args.horizon,
                       warmup_seconds=args.warmup, source=trace.source)
        cells += len(trace) * len(trace.series_ids)
        if cells <= KEEP_CELLS:
            kept[f] = trace
    many = len(files) > 1
    evaluations: list[Evaluation] = []
    for k, f in enumerate(files, 1):
        trace = kept.pop(f, None)
        if trace is None:
            trace = read_trace(f, step=args.step, max_gap_seconds=args.max_gap)
        predictors = [Oracle.for_trace(trace, args.horizon), *realisable(args.horizon)]
        if wanted is not None:
            predictors = [p for p in predictors if p.name in wanted]
        prefix = f"[{k}/{len(files)}] {f}: " if many else ""
        try:
            ev = evaluate(
                trace, predictors, horizon_seconds=args.horizon, warmup_seconds=args.warmup,
                progress=_Progress(sys.stderr, prefix), budget=args.budget,
                worst_node_budget=args.worst_node_budget,
            )
        except ValueError as e:
            if str(e).startswith(trace.source):
                raise
            raise ValueError(f"{trace.source}: {e}") from None
        del trace
        evaluations.append(ev)
        if many:
            sys.stderr.write(
                f"{PROG}: {prefix}{ev.decisions} decision points, {ev.elapsed_seconds:.1f} s\n"
            )
            sys.stderr.flush()
    pooled = pool(evaluations, budget=args.budget, worst_node_budget=args.worst_node_budget)
    if args.json:
        json.dump(evaluation_json(evaluations, pooled), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not many:
        sys.stdout.write(format_table(evaluations[0]))
        return 0
    if args.per_trace or len(evaluations) <= PER_TRACE_TABLES:
        for ev in evaluations:
            sys.stdout.write(format_table(ev) + "\n")
    sys.stdout.write(format_pooled(pooled))
    coarse = sorted({ev.step_seconds for ev in evaluations if ev.step_seconds > FIVE_MINUTES})
    if coarse:
        sys.stdout.write(f"5 min columns: traces with a step of {', '.join(f'{s} s' for s in coarse)} count "
                         f"their next step there, not 5 minutes.\n")
    return 0


def _frontier(args: argparse.Namespace) -> int:
    files = trace_files(args.trace)
    traces = []
    for f in files:  # every trace checked before any work
        trace = read_trace(f)
        decision_range(len(trace), trace.step, horizon_seconds=args.horizon, warmup_seconds=args.warmup,
                       source=trace.source)
        traces.append(trace)
    results = []
    for k, trace in enumerate(traces, 1):
        prefix = f"[{k}/{len(traces)}] {trace.source}: " if len(traces) > 1 else ""
        results.append(frontier(trace, horizon_seconds=args.horizon, warmup_seconds=args.warmup,
                                budget=args.budget, progress=_Progress(sys.stderr, prefix)))
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for result in results:
        sys.stdout.write(format_frontier(result) + "\n")
    return 0


def format_frontier(result: FrontierResult) -> str:
    ev = result.evaluation
    oracle = ev.result(Oracle.name)
    default = ev.result(DEFAULT)
    base = f"best peer within budget {ev.baseline} {_pct(ev.result(ev.baseline).reclaimed)}" if ev.baseline \
        else "no peer within budget"
    gap = "" if default.gap_closed is None else f", gap closed {_pct(default.gap_closed, 0)}"
    lines = [f"{ev.trace}: {ev.decisions} decision points; oracle {_pct(oracle.reclaimed)}; {base}; "
             f"the default ({DEFAULT}) {_pct(default.reclaimed)} at {_pct(default.violation_60m, 2)}{gap}",
             "", "| family | k (in hindsight) | reclaimed | violation 60 min | gap closed |",
             "|---|---|---|---|---|"]
    for row in sorted(result.rows, key=lambda r: -r.reclaimed):
        k = "none keeps the budget" if row.k is None else f"{row.k:.3f}"
        lines.append(f"| {row.family} | {k} | {_pct(row.reclaimed)} | {_pct(row.violation_60m, 2)} "
                     f"| {_pct(row.gap_closed, 0) or '–'} |")
    lines.append("")
    lines += [f"{row.family}: P = {row.rule}" for row in result.rows]
    lines.append("Upper bounds: each family's constant is fitted to this very trace; a rule of the family with a "
                 "constant fixed beforehand reclaims at most that at the same violation rate.")
    return "\n".join(lines) + "\n"


def evaluation_json(evaluations: list[Evaluation], pooled: Pooled) -> dict:
    """``{"traces": [...], "pooled": {...}, "budget", "worst_node_budget", "baseline", "note"}``.

    With a single trace its own fields stay at the top level too (the earlier output).
    """
    doc: dict = evaluations[0].to_json() if len(evaluations) == 1 else {}
    doc.update(
        budget=pooled.budget,
        worst_node_budget=pooled.worst_node_budget,
        baseline=pooled.baseline,
        note=pooled.note,
        horizon_seconds=pooled.horizon_seconds,
        warmup_seconds=pooled.warmup_seconds,
        traces=[ev.to_json() for ev in evaluations],
        pooled=pooled.to_json(),
    )
    return doc


def _pct(x: float | None, digits: int = 1) -> str:
    if x is None:
        return ""
    v = round(100 * x, digits)
    return f"{v + 0.0 if v else 0.0:.{digits}f} %"  # never "-0 %"


def _pct_g(x: float) -> str:
    return f"{100 * x:g} %"


def _hname(h: int) -> str:
    return f"{h // 60} min" if h % 60 == 0 else f"{h} s"


def _yes(x: bool | None) -> str:
    return "" if x is None else ("yes" if x else "no")


def _name(r) -> str:
    return f"**{r.name}** (default)" if r.default else r.name


def _budget_lines(budget: float, worst_node_budget: float, baseline: str | None,
                  note: str | None, results, *, pooled: bool) -> str:
    mean = "mean violation at 60 min over the nodes" if pooled else "violation at 60 min"
    worst = "worst node's" if pooled else "worst node's (this trace's)"
    out = f"within budget: {mean} ≤ {_pct_g(budget)} and the {worst} ≤ {_pct_g(worst_node_budget)}. "
    if baseline is not None:
        b = next(r for r in results if r.name == baseline)
        out += (f"Baseline, the best peer within budget: {baseline} (reclaimed {_pct(b.reclaimed)}); "
                f"gap closed: share of the reclaimed gap between {baseline} and the oracle.")
        if note:
            out += f" ({note}.)"
    else:
        out += f"No baseline: {note or 'no peer within budget'}."
    return out + "\n"


def format_table(ev: Evaluation) -> str:
    """The human-readable table of one trace (markdown), with a one-paragraph header."""
    h = ev.horizon_seconds
    hname = _hname(h)
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
    cols += ["mean overshoot", "gap closed vs rc-nsigma-max", "within budget",
             "gap closed vs best in-budget peer"]
    out.write("| " + " | ".join(cols) + " |\n")
    out.write("|" + "|".join("---" for _ in cols) + "|\n")
    for r in ev.results:
        cells = [_name(r), _pct(r.reclaimed), _pct(r.violation_5m, 2), _pct(r.violation_60m, 2)]
        if extra:
            cells.append(_pct(r.violation, 2))
        cells += [_pct(r.overshoot, 3), _pct(r.gap_closed_vs_rc_nsigma_max, 0),
                  _yes(r.within_budget), _pct(r.gap_closed, 0)]
        out.write("| " + " | ".join(cells) + " |\n")
    out.write(
        "\ngap closed vs rc-nsigma-max: share of the reclaimed gap between rc-nsigma-max and the "
        "oracle; overshoot: mean shortfall per decision point, as a fraction of the requests.\n"
    )
    out.write(_budget_lines(ev.budget, ev.worst_node_budget, ev.baseline, ev.note, ev.results,
                            pooled=False))
    if ev.step_seconds > FIVE_MINUTES:  # window_steps: at least one step
        out.write(f"violation 5 min: this trace's step is {ev.step_seconds} s, so the column counts the next "
                  f"step ({_hname(ev.step_seconds)}), not 5 minutes.\n")
    return out.getvalue()


def format_pooled(p: Pooled) -> str:
    """The pooled table over all nodes (markdown), with a one-paragraph header."""
    h = p.horizon_seconds
    hname = _hname(h)
    out = io.StringIO()
    out.write(
        f"pooled over {p.nodes} nodes (one per trace): {p.decisions} decision points after "
        f"{p.warmup_seconds} s of warm-up each; horizon {hname}; per node mean requests "
        f"{p.mean_request:.2f} cores, mean usage {p.mean_usage:.2f} cores "
        f"({_pct(p.mean_usage / p.mean_request if p.mean_request else 0)}); {p.elapsed_seconds:.1f} s\n\n"
    )
    extra = h != 3600
    cols = ["predictor", "reclaimed", "mean viol 5 min", "worst 5 min", "mean viol 60 min",
            "worst 60 min"]
    if extra:
        cols.append(f"mean viol {hname}")
    cols += ["mean overshoot", "within budget", "gap closed (vs best in-budget peer)"]
    out.write("| " + " | ".join(cols) + " |\n")
    out.write("|" + "|".join("---" for _ in cols) + "|\n")
    for r in p.results:
        cells = [_name(r), _pct(r.reclaimed), _pct(r.violation_5m, 2), _pct(r.worst_violation_5m, 2),
                 _pct(r.violation_60m, 2), _pct(r.worst_violation_60m, 2)]
        if extra:
            cells.append(_pct(r.violation, 2))
        cells += [_pct(r.overshoot, 3), _yes(r.within_budget), _pct(r.gap_closed, 0)]
        out.write("| " + " | ".join(cells) + " |\n")
    out.write(
        "\nreclaimed and overshoot: Σ over all nodes' decision points / Σ requests; mean viol: "
        "decision-weighted mean over the nodes; worst: the worst node's rate.\n"
    )
    out.write(_budget_lines(p.budget, p.worst_node_budget, p.baseline, p.note, p.results, pooled=True))
    return out.getvalue()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
