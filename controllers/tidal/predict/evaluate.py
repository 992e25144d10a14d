"""The benchmark of ``shared/data/traces/README.md``: replay a trace, score every predictor.

At every decision point t (every step of the trace) each predictor sees only the samples up to
and including t and states P(t); the node would offer R(t) − P(t) to offline jobs, where R(t) is
the sum of the online pods' requests at t. Over the decision points after the warm-up (one day
by default) whose whole look-ahead window lies inside the trace:

* ``reclaimed``      = Σ_t max(0, R(t) − P(t)) / Σ_t R(t)
* ``violation_<d>``  = fraction of decision points where the node's total online usage at some
  grid point in (t, t + d] exceeds P(t); reported for d = 5 min, 60 min and the chosen horizon.
  A window holds ⌊d / step⌋ grid points (at least one).
* ``overshoot``      = Σ_t max(0, peak(t) − P(t)) / Σ_t R(t), peak(t) the maximum usage over
  (t, t + horizon]: the mean shortfall as a fraction of the requests (0 at points without a
  violation, so it is the expected overshoot per decision point).

Usage at missing readings is the carried-forward value (see `tidal.predict.series`). The warm-up
only removes decision points from the scores: predictors see the whole past from the start.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tidal.predict.predictors import DEFAULT, Predictor
from tidal.predict.predictors.oracle import future_max
from tidal.predict.series import NodeHistory, Trace

__all__ = ["Evaluation", "PredictorResult", "evaluate", "window_steps"]


def window_steps(seconds: float, step: int) -> int:
    """Grid points in (t, t + seconds]: ⌊seconds / step⌋, at least 1."""
    return max(1, int(seconds // step))


@dataclass
class PredictorResult:
    name: str
    default: bool
    reclaimed: float
    violation_5m: float
    violation_60m: float
    violation: float  # at the chosen horizon
    overshoot: float
    mean_prediction: float  # mean P(t) / R(t) (ratio of sums)
    parameters: str = ""
    gap_closed: float | None = None  # share of the gap rc-nsigma-max → oracle closed

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "default": self.default,
            "reclaimed": self.reclaimed,
            "violation_5m": self.violation_5m,
            "violation_60m": self.violation_60m,
            "violation": self.violation,
            "overshoot": self.overshoot,
            "gap_closed": self.gap_closed,
            "parameters": self.parameters,
        }


@dataclass
class Evaluation:
    trace: str
    series: int
    steps: int
    step_seconds: int
    horizon_seconds: int
    warmup_seconds: int
    decisions: int
    mean_request: float
    mean_usage: float
    readings: int
    filled: int
    absent: int
    elapsed_seconds: float
    results: list[PredictorResult] = field(default_factory=list)

    def result(self, name: str) -> PredictorResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_json(self) -> dict:
        return {
            "trace": self.trace,
            "series": self.series,
            "steps": self.steps,
            "step_seconds": self.step_seconds,
            "horizon_seconds": self.horizon_seconds,
            "warmup_seconds": self.warmup_seconds,
            "decisions": self.decisions,
            "mean_request": self.mean_request,
            "mean_usage": self.mean_usage,
            "readings": self.readings,
            "filled_readings": self.filled,
            "absent_points": self.absent,
            "elapsed_seconds": self.elapsed_seconds,
            "predictors": [r.to_json() for r in self.results],
        }


def evaluate(
    trace: Trace,
    predictors: Sequence[Predictor],
    *,
    horizon_seconds: int = 3600,
    warmup_seconds: int = 86400,
    default: str = DEFAULT,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluation:
    """Score ``predictors`` on ``trace`` (see the module docstring for the definitions)."""
    started = time.monotonic()
    step = trace.step
    if horizon_seconds <= 0 or horizon_seconds % step:
        raise ValueError(
            f"the horizon ({horizon_seconds} s) must be a positive multiple of the trace's "
            f"{step}-second step"
        )
    names = [p.name for p in predictors]
    if len(set(names)) != len(names):
        raise ValueError(f"predictor names must be unique: {names}")
    kh = horizon_seconds // step
    k5 = window_steps(300, step)
    k60 = window_steps(3600, step)
    kmax = max(kh, k5, k60)
    n = len(trace)
    first = math.ceil(warmup_seconds / step)
    last = n - 1 - kmax  # last decision point with a whole look-ahead window
    if last < first:
        raise ValueError(
            f"trace too short: {n} steps of {step} s; the warm-up ({warmup_seconds} s) and the "
            f"look-ahead ({kmax * step} s) need at least {first + kmax + 1}"
        )
    total = trace.total_usage
    req = trace.total_request
    fm5 = future_max(total, k5)
    fm60 = future_max(total, k60)
    fmh = future_max(total, kh)

    k = len(predictors)
    sum_req = 0.0
    sum_free = [0.0] * k
    sum_pred = [0.0] * k
    sum_over = [0.0] * k
    v5 = [0] * k
    v60 = [0] * k
    vh = [0] * k

    history = NodeHistory(trace.series_ids, step, start=trace.start)
    usage_rows = trace.usage
    request_rows = trace.request
    decisions = last - first + 1
    for i in range(last + 1):
        history.append([u[i] for u in usage_rows], [r[i] for r in request_rows])
        if i < first:
            continue
        r_i = req[i]
        sum_req += r_i
        for j, pred in enumerate(predictors):
            p = pred.predict(history)
            if not (isinstance(p, (int, float)) and math.isfinite(p)) or p < 0:
                raise ValueError(
                    f"predictor {pred.name!r} returned {p!r} at t={trace.timestamp(i)} "
                    "(predictions must be finite and ≥ 0)"
                )
            sum_pred[j] += p
            sum_free[j] += max(0.0, r_i - p)
            peak = fmh[i]
            if peak > p:
                vh[j] += 1
                sum_over[j] += peak - p
            if fm5[i] > p:
                v5[j] += 1
            if fm60[i] > p:
                v60[j] += 1
        if progress is not None:
            progress(i - first + 1, decisions)

    def ratio(a: float) -> float:
        return a / sum_req if sum_req > 0 else 0.0

    results = [
        PredictorResult(
            name=pred.name,
            default=pred.name == default,
            reclaimed=ratio(sum_free[j]),
            violation_5m=v5[j] / decisions,
            violation_60m=v60[j] / decisions,
            violation=vh[j] / decisions,
            overshoot=ratio(sum_over[j]),
            mean_prediction=ratio(sum_pred[j]),
            parameters=pred.describe(),
        )
        for j, pred in enumerate(predictors)
    ]
    by_name = {r.name: r for r in results}
    if "oracle" in by_name and "rc-nsigma-max" in by_name:
        lo = by_name["rc-nsigma-max"].reclaimed
        hi = by_name["oracle"].reclaimed
        if hi > lo:
            for r in results:
                r.gap_closed = (r.reclaimed - lo) / (hi - lo)
    window = range(first, last + 1)
    return Evaluation(
        trace=trace.source,
        series=len(trace.series_ids),
        steps=n,
        step_seconds=step,
        horizon_seconds=horizon_seconds,
        warmup_seconds=warmup_seconds,
        decisions=decisions,
        mean_request=math.fsum(req[i] for i in window) / decisions,
        mean_usage=math.fsum(total[i] for i in window) / decisions,
        readings=trace.readings,
        filled=trace.filled,
        absent=trace.absent,
        elapsed_seconds=time.monotonic() - started,
        results=results,
    )
