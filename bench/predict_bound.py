# SPDX-License-Identifier: Apache-2.0
"""make bench-predict-bound: how much of issue 18's gap could a *model* of these series close?

`tidal predict frontier` bounds what each simple rule family reclaims within the violation
budget with its one constant fitted to the trace after the fact. A model that combines the
families (a choice among them, a weighted sum, rules on each pod's series) is not bounded by
that. This bench bounds the linear ones, in the same hindsight way:

* **features** at each decision point, from the past only: every frontier family's series (for
  N-sigma the mean and the σ over 1/2/6/24 h, the node total's maximum over 1/2/6/24 h, the usage
  now and the requests, the daily peak), the sums over the pods of each pod's maximum over 1 h
  and 24 h and of its 95th percentile over 24 h (Resource Central's statistic), and a constant;
  all as shares of the requests (a node twice the size has twice the peaks);
* **in hindsight**: a linear quantile regression of the next horizon's node peak on them (level
  ``--tau``, solved exactly as a linear programme by SciPy's HiGHS), fitted on the very decision
  points it is scored on, then scaled by the smallest factor that keeps the budget there
  (``tidal.predict.frontier.hindsight``). Not a predictor: an optimistic figure for what a
  linear model of these statistics could reclaim at that violation rate;
* **out of sample**, for contrast: the same regression and its scale fitted on the first half of
  the decision points and applied to the second, and every frontier family's constant chosen the
  same way.

    python bench/predict_bound.py --trace FILE|DIR [--trace ...] [--tau 0.99] [--horizon 60m]
                                  [--warmup 1d] [--budget 1%]

One JSON line per trace on stdout (progress on stderr), then ``{"traces": [...]}`` as the last
line. Each trace: its decisions, the baseline (best peer within budget), the oracle's and the
default's reclaim, the best frontier family, the linear bound with its gap closed, and the split.
The figures of 2026-11-29 are in controllers/tidal/predict/README.md.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy import sparse
from scipy.optimize import linprog

from tidal.predict.cli import parse_budget, parse_duration, trace_files
from tidal.predict.evaluate import DEFAULT_BUDGET, decision_range, window_steps
from tidal.predict.frontier import FAMILIES, frontier, hindsight, scored
from tidal.predict.predictors.oracle import future_max
from tidal.predict.series import Trace, read_trace

POD_STATS = (("max", 1), ("max", 24), ("p95", 24))  # (statistic, hours) summed over the pods


def log(msg: str) -> None:
    print(f"[bench-predict-bound] {msg}", file=sys.stderr, flush=True)


def pod_sums(usage: list[list[float]], step: int, stat: str, hours: float) -> np.ndarray:
    """Σ over the pods of each pod's ``stat`` (max or p95, linear interpolation) over the last
    ``hours`` at every step, the step itself included (the past only)."""
    w = max(1, round(hours * 3600 / step))
    total = np.zeros(len(usage[0]) if usage else 0)
    for series in usage:
        a = np.asarray(series, dtype=float)
        windows = sliding_window_view(np.concatenate([np.full(w - 1, np.nan), a]), w)
        with np.errstate(all="ignore"):
            col = np.nanmax(windows, axis=1) if stat == "max" else np.nanpercentile(windows, 95, axis=1)
        total += np.nan_to_num(col)
    return total


def features(trace: Trace, horizon_seconds: int) -> tuple[np.ndarray, list[str], dict[str, tuple[np.ndarray, ...]]]:
    """One row per step: a constant, every frontier family's series and the pods' sums; and each
    family's (a, b) series by name."""
    u, r, step = trace.total_usage, trace.total_request, trace.step
    cols, names = [np.ones(len(u))], ["constant"]
    series = {}
    for fam in FAMILIES:
        a, b = fam.series(u, r, step, horizon_seconds)
        series[fam.name] = (np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        if any(a):
            cols.append(np.asarray(a, dtype=float))
            names.append(f"{fam.name} (offset)")
        cols.append(np.asarray(b, dtype=float))
        names.append(fam.name)
    for stat, hours in POD_STATS:
        cols.append(pod_sums(trace.usage, step, stat, hours))
        names.append(f"Σ pods' {stat} {hours:g}h")
    return np.column_stack(cols), names, series


def quantile_regression(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """β minimising Σ ρ_τ(y − x β) (the pinball loss), as the linear programme
    min τ·Σu⁺ + (1−τ)·Σu⁻ subject to x β + u⁺ − u⁻ = y, u± ≥ 0."""
    n, p = x.shape
    cost = np.concatenate([np.zeros(p), np.full(n, tau), np.full(n, 1 - tau)])
    eye = sparse.identity(n, format="csr")
    a_eq = sparse.hstack([sparse.csr_matrix(x), eye, -eye], format="csr")
    res = linprog(cost, A_eq=a_eq, b_eq=y, bounds=[(None, None)] * p + [(0, None)] * (2 * n), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the quantile regression did not solve: {res.message}")
    return res.x[:p]


def scaled(pred: np.ndarray, peak: np.ndarray, requests: np.ndarray, upper: np.ndarray,
           budget: float) -> tuple[float | None, float, float]:
    """(k, reclaimed, violation) of P = k × max(pred, 0) with k fitted in hindsight."""
    return hindsight([0.0] * len(pred), list(np.maximum(pred, 0.0)), list(peak), list(requests), list(upper), budget)


def applied(p: np.ndarray, peak: np.ndarray, requests: np.ndarray, upper: np.ndarray) -> dict:
    """Reclaimed and violation rate of predictions ``p``, scored as the frontier scores."""
    reclaimed, violation = scored(list(p), list(peak), list(requests), list(upper))
    return {"reclaimed": round(reclaimed, 4), "violation_60m": round(violation, 4)}


def bound(trace: Trace, *, tau: float, horizon_seconds: int, warmup_seconds: int, budget: float) -> dict:
    first, last = decision_range(len(trace), trace.step, horizon_seconds=horizon_seconds,
                                 warmup_seconds=warmup_seconds, source=trace.source)
    front = frontier(trace, horizon_seconds=horizon_seconds, warmup_seconds=warmup_seconds, budget=budget)
    ev = front.evaluation
    lo = ev.result(ev.baseline).reclaimed if ev.baseline else None
    hi = ev.result("oracle").reclaimed

    def gap(x: float) -> float | None:
        return round((x - lo) / (hi - lo), 3) if lo is not None and hi > lo else None

    x_all, names, family_series = features(trace, horizon_seconds)
    sl = slice(first, last + 1)
    x = x_all[sl]
    u = np.asarray(trace.total_usage, dtype=float)
    requests = np.asarray(trace.total_request, dtype=float)[sl]
    peak = np.asarray(future_max(list(u), window_steps(horizon_seconds, trace.step)), dtype=float)[sl]
    upper = np.maximum(requests, u[sl])
    scale = np.where(requests > 0, requests, 1.0)[:, None]  # shares of the requests
    beta = quantile_regression(x / scale, peak / scale[:, 0], tau)
    k, reclaimed, violation = scaled(x @ beta, peak, requests, upper, budget)
    best = front.best
    out = {"trace": ev.trace, "decisions": ev.decisions, "budget": budget, "baseline": ev.baseline,
           "baseline_reclaimed": lo, "oracle": round(hi, 4), "default": round(ev.result("tidal").reclaimed, 4),
           "default_gap_closed": gap(ev.result("tidal").reclaimed),
           "best_family": {"family": best.family, "k": best.k, "reclaimed": round(best.reclaimed, 4),
                           "gap_closed": gap(best.reclaimed)},
           "linear_bound": {"tau": tau, "k": k, "reclaimed": round(reclaimed, 4), "violation_60m": round(violation, 4),
                            "gap_closed": gap(reclaimed), "features": names}}
    # out of sample: fitted (regression and scale) on the first half, scored on the second
    m = len(peak) // 2
    first_half, second_half = slice(0, m), slice(m, len(peak))
    beta1 = quantile_regression(x[first_half] / scale[first_half], peak[first_half] / scale[first_half, 0], tau)
    pred1 = np.maximum(x @ beta1, 0.0)
    k1, _, _ = scaled(pred1[first_half], peak[first_half], requests[first_half], upper[first_half], budget)
    split = {"linear": applied((k1 or 0.0) * pred1[second_half], peak[second_half], requests[second_half],
                               upper[second_half]) if k1 is not None else None, "families": {}}
    for fam in FAMILIES:
        a, b = (s[sl] for s in family_series[fam.name])
        kf, _, _ = hindsight(list(a[first_half]), list(b[first_half]), list(peak[first_half]),
                             list(requests[first_half]), list(upper[first_half]), budget)
        if kf is not None:
            split["families"][fam.name] = applied(a[second_half] + kf * b[second_half], peak[second_half],
                                                  requests[second_half], upper[second_half])
    out["split"] = split
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", action="append", required=True, help="a trace file or a directory of them")
    parser.add_argument("--tau", type=float, default=0.99, help="the regression's quantile level (0 < τ < 1)")
    parser.add_argument("--horizon", type=parse_duration, default=3600)
    parser.add_argument("--warmup", type=parse_duration, default=86400)
    parser.add_argument("--budget", type=parse_budget, default=DEFAULT_BUDGET)
    args = parser.parse_args(argv)
    if not 0 < args.tau < 1:
        parser.error(f"--tau must be between 0 and 1 (exclusive), not {args.tau}")
    paths = trace_files(args.trace)
    results = []
    for path in paths:
        log(f"{path}: frontier, then the regressions")
        result = bound(read_trace(path), tau=args.tau, horizon_seconds=args.horizon,
                       warmup_seconds=args.warmup, budget=args.budget)
        print(json.dumps(result), flush=True)
        results.append(result)
    print(json.dumps({"traces": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
