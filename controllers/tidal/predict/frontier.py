# SPDX-License-Identifier: Apache-2.0
"""The hindsight frontier: how much simple rule families could reclaim on a trace at all.

Each *family* states P(t) = a(t) + k × b(t) from the past only (the node total's usage u and
requests R), with one constant k: N-sigma is ``mean + k σ`` over a window, a recent peak times a
safety factor is ``k × max``, Koordinator's rule is ``u + k R``. Here k is chosen **after the
fact**, on the very trace being scored: the smallest k whose 60-minute violation rate stays
within the budget. No realisable rule of the family — one whose constant is fixed before it
sees the trace — reclaims more at that violation rate on that trace, so each row is an *upper
bound* for its family, not a predictor; "gap closed" of the best row bounds what such rules can
close of the gap from the best peer within budget to the oracle (issue 18 asks for 50 %).

The families are the rules the default is built from and their obvious relatives; a family not
listed may do better, and a richer method (a choice among families, as the default makes, or a
model of the series) is not bounded by them.

    tidal predict frontier --trace FILE|DIR [--horizon 60m] [--warmup 1d] [--budget 1%] [--json]

Pure functions (`hindsight`, `scored`, the family series) and one adapter (`frontier`, which also runs the
peers and the oracle through `evaluate` for the baseline and the gap).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidal.predict.evaluate import DEFAULT_BUDGET, Evaluation, decision_range, evaluate, window_steps
from tidal.predict.predictors import Oracle, realisable
from tidal.predict.predictors.oracle import future_max
from tidal.predict.series import Trace
from tidal.predict.windows import RollingMax, RollingStats

__all__ = ["FAMILIES", "Family", "FrontierRow", "FrontierResult", "frontier", "hindsight", "scored"]

Series = tuple[list[float], list[float]]  # (a, b): P = a + k × b at every step


@dataclass(frozen=True)
class Family:
    name: str
    rule: str  # P(t) in words
    series: Callable[[Sequence[float], Sequence[float], int, int], Series]  # (u, R, step, horizon)


def _rolling(u: Sequence[float], window, read: Callable) -> list:
    """``read(window)`` after each step of a rolling window over ``u`` (the past and now)."""
    out = []
    for i in range(len(u)):
        window.sync(u, i + 1)
        out.append(read(window))
    return out


def _nsigma(hours: float) -> Family:
    def series(u, r, step, horizon):
        stats = _rolling(u, RollingStats(max(1, round(hours * 3600 / step))), RollingStats.mean_std)
        return [m for m, _ in stats], [s for _, s in stats]
    return Family(f"mean+k·σ {hours:g}h", f"mean + k × σ of the node total over {hours:g} h", series)


def _peak(hours: float) -> Family:
    def series(u, r, step, horizon):
        return [0.0] * len(u), _rolling(u, RollingMax(max(1, round(hours * 3600 / step))), RollingMax.maximum)
    return Family(f"k·peak {hours:g}h", f"k × the node total's maximum over {hours:g} h", series)


def _usage_plus_request() -> Family:
    def series(u, r, step, horizon):
        return list(u), list(r)
    return Family("u+k·R", "usage now + k × the requests (Koordinator's rule, any threshold)", series)


def _daily_peak() -> Family:
    def series(u, r, step, horizon):
        h = max(1, horizon // step)
        day = 86400 // step
        recent = _rolling(u, RollingMax(h), RollingMax.maximum)
        later = future_max(u, h)  # later[j] = max(u[j+1 .. j+h]): a day ago, that is the past
        b = [max(recent[i], later[i - day]) if i >= day and h <= day else recent[i] for i in range(len(u))]
        return [0.0] * len(u), b
    return Family("k·daily peak", "k × the larger of the last horizon's maximum and the same horizon's "
                  "maximum one day earlier", series)


FAMILIES: tuple[Family, ...] = (
    *(_nsigma(h) for h in (1, 2, 6, 24)),
    *(_peak(h) for h in (1, 2, 6, 24)),
    _usage_plus_request(),
    _daily_peak(),
)


@dataclass(frozen=True)
class FrontierRow:
    family: str
    rule: str
    k: float | None  # None: no k keeps the budget (the bound itself misses more often)
    reclaimed: float
    violation_60m: float
    gap_closed: float | None = None


def hindsight(a: Sequence[float], b: Sequence[float], peak: Sequence[float], requests: Sequence[float],
              upper: Sequence[float], budget: float) -> tuple[float | None, float, float]:
    """(k, reclaimed, violation rate) of P = a + k b, k the smallest constant that keeps the
    share of points with peak > P within ``budget`` (pure). P is clamped to [0, upper] as every
    predictor's is (upper: the larger of the requests and the usage now); ``b`` ≥ 0."""
    n = len(peak)
    if n == 0:
        raise ValueError("no decision point to score")
    need = []
    for ai, bi, pi in zip(a, b, peak, strict=True):
        if bi > 0:
            need.append((pi - ai) / bi)
        else:
            need.append(-math.inf if pi <= ai else math.inf)
    need.sort()
    allowed = math.floor(n * budget + 1e-9)  # points that may exceed P
    k = need[n - 1 - allowed] if allowed < n else -math.inf
    if k == math.inf:
        return None, 0.0, sum(p > u for p, u in zip(peak, upper, strict=True)) / n
    return (k, *scored([ai + k * bi if bi > 0 else ai for ai, bi in zip(a, b, strict=True)],
                       peak, requests, upper))


def scored(predictions: Sequence[float], peak: Sequence[float], requests: Sequence[float],
           upper: Sequence[float]) -> tuple[float, float]:
    """(reclaimed, violation rate) of ``predictions``, each clamped to [0, upper] as every
    predictor's is (pure)."""
    free = total = 0.0
    missed = 0
    for pred, pi, ri, ui in zip(predictions, peak, requests, upper, strict=True):
        p = min(ui, max(0.0, pred))
        free += max(0.0, ri - p)
        total += ri
        missed += pi > p + 1e-9 * max(1.0, p)  # a prediction equal to the peak meets it (float rounding)
    return (free / total if total > 0 else 0.0), missed / len(peak)


@dataclass(frozen=True)
class FrontierResult:
    evaluation: Evaluation  # the peers, the default and the oracle, as `tidal predict evaluate`
    rows: list[FrontierRow]

    @property
    def best(self) -> FrontierRow:
        return max(self.rows, key=lambda r: r.reclaimed)

    def to_json(self) -> dict:
        ev = self.evaluation
        return {"trace": ev.trace, "decisions": ev.decisions, "budget": ev.budget, "baseline": ev.baseline,
                "oracle": ev.result(Oracle.name).reclaimed,
                "predictors": {r.name: {"reclaimed": r.reclaimed, "violation_60m": r.violation_60m,
                                        "gap_closed": r.gap_closed} for r in ev.results},
                "families": [vars(r) for r in self.rows], "best_family": self.best.family}


def frontier(trace: Trace, *, horizon_seconds: int = 3600, warmup_seconds: int = 86400,
             budget: float = DEFAULT_BUDGET, progress=None) -> FrontierResult:
    """Every family's hindsight row on ``trace``, with the gap closed against the same baseline
    `evaluate` finds (the best peer within budget) on the same decision points."""
    step = trace.step
    first, last = decision_range(len(trace), step, horizon_seconds=horizon_seconds,
                                 warmup_seconds=warmup_seconds, source=trace.source)
    ev = evaluate(trace, [Oracle.for_trace(trace, horizon_seconds), *realisable(horizon_seconds)],
                  horizon_seconds=horizon_seconds, warmup_seconds=warmup_seconds, budget=budget,
                  progress=progress)
    u, r = trace.total_usage, trace.total_request
    peak = future_max(u, window_steps(3600, step))[first:last + 1]
    upper = [max(ri, ui) for ri, ui in zip(r[first:last + 1], u[first:last + 1], strict=True)]
    lo = ev.result(ev.baseline).reclaimed if ev.baseline else None
    hi = ev.result(Oracle.name).reclaimed
    rows = []
    for fam in FAMILIES:
        a, b = fam.series(u, r, step, horizon_seconds)
        k, reclaimed, violation = hindsight(a[first:last + 1], b[first:last + 1], peak, r[first:last + 1],
                                            upper, budget)
        gap = (reclaimed - lo) / (hi - lo) if lo is not None and hi > lo else None
        rows.append(FrontierRow(fam.name, fam.rule, k, reclaimed, violation, gap))
    return FrontierResult(ev, rows)
