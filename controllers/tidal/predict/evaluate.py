# SPDX-License-Identifier: Apache-2.0
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

Violation budget and gap closed (`apply_budget`). A predictor is *within budget* when its mean
60-minute violation rate is at most ``budget`` (1 % by default) and its worst node's is at most
``worst_node_budget`` (3 × ``budget`` by default; on a single trace the worst node is that trace).
The *baseline* is the best peer within budget: among the realisable predictors other than the
default (not the oracle), those within budget, the one that reclaims the most. Then
``gap_closed(p) = (reclaimed(p) − reclaimed(baseline)) / (reclaimed(oracle) − reclaimed(baseline))``;
it is None for everyone, with a note, when no peer is within budget. The older figure relative
to ``rc-nsigma-max`` (whatever its violations) is kept as ``gap_closed_vs_rc_nsigma_max``.

Pooling (`pool`). One trace is one node. Over several nodes: reclaimed and overshoot are ratios
of sums over all nodes' decision points (Σ free / Σ requests), a mean violation rate is the
decision-weighted mean of the nodes' rates, and the worst-node rate is the maximum over nodes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tidal.predict.predictors import DEFAULT, Oracle, Predictor
from tidal.predict.predictors.oracle import future_max
from tidal.predict.series import NodeHistory, Trace

__all__ = [
    "DEFAULT_BUDGET",
    "Evaluation",
    "Pooled",
    "PredictorResult",
    "apply_budget",
    "decision_range",
    "evaluate",
    "is_peer",
    "is_within_budget",
    "pool",
    "pool_results",
    "window_steps",
]

#: Default violation budget: mean 60-minute violation rate over the nodes.
DEFAULT_BUDGET = 0.01
#: Default worst-node bound, as a multiple of the budget.
WORST_NODE_FACTOR = 3.0
#: Slack on budget comparisons, so that a rate equal to the budget up to rounding is within it.
_EPS = 1e-12


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
    decisions: int = 0  # scored decision points (the weight of the violation rates)
    request_sum: float = 0.0  # Σ_t R(t) over them (the weight of reclaimed and overshoot)
    # the worst node's violation rates and which node it is (on one trace: its own)
    worst_violation_5m: float | None = None
    worst_violation_60m: float | None = None
    worst_node_5m: str = ""
    worst_node_60m: str = ""
    within_budget: bool | None = None  # mean and worst-node 60-min violation within budget
    gap_closed: float | None = None  # share of the gap best in-budget peer → oracle closed
    gap_closed_vs_rc_nsigma_max: float | None = None  # share of the gap rc-nsigma-max → oracle

    def __post_init__(self) -> None:
        if self.worst_violation_5m is None:
            self.worst_violation_5m = self.violation_5m
        if self.worst_violation_60m is None:
            self.worst_violation_60m = self.violation_60m

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "default": self.default,
            "reclaimed": self.reclaimed,
            "violation_5m": self.violation_5m,
            "violation_60m": self.violation_60m,
            "violation": self.violation,
            "overshoot": self.overshoot,
            "worst_violation_5m": self.worst_violation_5m,
            "worst_violation_60m": self.worst_violation_60m,
            "worst_node_5m": self.worst_node_5m,
            "worst_node_60m": self.worst_node_60m,
            "within_budget": self.within_budget,
            "gap_closed": self.gap_closed,
            "gap_closed_vs_rc_nsigma_max": self.gap_closed_vs_rc_nsigma_max,
            "decisions": self.decisions,
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
    budget: float = DEFAULT_BUDGET
    worst_node_budget: float = WORST_NODE_FACTOR * DEFAULT_BUDGET
    baseline: str | None = None  # the best in-budget peer (see `apply_budget`)
    note: str | None = None  # why gap_closed is None, if it is

    def result(self, name: str) -> PredictorResult:
        return _find(self.results, name)

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
            **_verdict_json(self),
        }


def _verdict_json(ev: Evaluation | Pooled) -> dict:
    """The budget, the baseline and every predictor's result: the part of the JSON an
    evaluation of one trace and a pool of several share."""
    return {
        "budget": ev.budget,
        "worst_node_budget": ev.worst_node_budget,
        "baseline": ev.baseline,
        "note": ev.note,
        "predictors": [r.to_json() for r in ev.results],
    }


def _find(results: Sequence[PredictorResult], name: str) -> PredictorResult:
    for r in results:
        if r.name == name:
            return r
    raise KeyError(name)


def _duration(seconds: float) -> str:
    """``86400`` → ``1 d``, ``5400`` → ``90 min``, ``45`` → ``45 s``."""
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size} {unit}"
    if seconds > 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds} s"


def decision_range(
    steps: int, step: int, *, horizon_seconds: int, warmup_seconds: int, source: str = ""
) -> tuple[int, int]:
    """The scored decision points ``first..last`` of a trace of ``steps`` steps of ``step`` s.

    ValueError (naming ``source``) when the horizon is off the grid or no decision point is left.
    """
    where = f"{source}: " if source else ""
    if horizon_seconds <= 0 or horizon_seconds % step:
        raise ValueError(
            f"{where}the horizon ({horizon_seconds} s) must be a positive multiple of the trace's "
            f"{step}-second step"
        )
    if warmup_seconds < 0:
        raise ValueError(f"the warm-up must be ≥ 0 s, not {warmup_seconds}")
    kmax = max(horizon_seconds // step, window_steps(300, step), window_steps(3600, step))
    first = math.ceil(warmup_seconds / step)
    last = steps - 1 - kmax  # last decision point with a whole look-ahead window
    if last < first:
        need = first + kmax + 1
        hint = "; give a shorter warm-up" if first else ""
        raise ValueError(
            f"{where}trace too short: {steps} steps of {step} s ({_duration(steps * step)}); "
            f"the warm-up ({_duration(warmup_seconds)}, {first} steps) and the look-ahead "
            f"({_duration(kmax * step)}, {kmax} steps: the longer of the horizon and the 60-min "
            f"violation window) need at least {need} steps for one decision point{hint}"
        )
    return first, last


def evaluate(
    trace: Trace,
    predictors: Sequence[Predictor],
    *,
    horizon_seconds: int = 3600,
    warmup_seconds: int = 86400,
    default: str = DEFAULT,
    progress: Callable[[int, int], None] | None = None,
    budget: float = DEFAULT_BUDGET,
    worst_node_budget: float | None = None,
) -> Evaluation:
    """Score ``predictors`` on ``trace`` (see the module docstring for the definitions).

    ``worst_node_budget`` defaults to 3 × ``budget``; on one trace the worst node is the trace.
    """
    started = time.monotonic()
    step = trace.step
    first, last = decision_range(
        len(trace), step, horizon_seconds=horizon_seconds, warmup_seconds=warmup_seconds,
        source=trace.source,
    )
    names = [p.name for p in predictors]
    if len(set(names)) != len(names):
        raise ValueError(f"predictor names must be unique: {names}")
    kh = horizon_seconds // step
    k5 = window_steps(300, step)
    k60 = window_steps(3600, step)
    n = len(trace)
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

    label = trace.source
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
            decisions=decisions,
            request_sum=sum_req,
            worst_node_5m=label,
            worst_node_60m=label,
        )
        for j, pred in enumerate(predictors)
    ]
    wnb = _worst_node_budget(budget, worst_node_budget)
    results, baseline, note = apply_budget(results, budget=budget, worst_node_budget=wnb)
    window = range(first, last + 1)
    return Evaluation(
        trace=label,
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
        budget=budget,
        worst_node_budget=wnb,
        baseline=baseline,
        note=note,
    )


def _worst_node_budget(budget: float, worst_node_budget: float | None) -> float:
    return WORST_NODE_FACTOR * budget if worst_node_budget is None else worst_node_budget


# -- violation budget, gap closed --------------------------------------------------------------


def is_within_budget(r: PredictorResult, budget: float, worst_node_budget: float) -> bool:
    """Mean 60-min violation ≤ ``budget`` and the worst node's ≤ ``worst_node_budget``."""
    worst = r.violation_60m if r.worst_violation_60m is None else r.worst_violation_60m
    return r.violation_60m <= budget + _EPS and worst <= worst_node_budget + _EPS


def is_peer(r: PredictorResult) -> bool:
    """A realisable predictor other than the default: a candidate baseline."""
    return not r.default and r.name != Oracle.name


def apply_budget(
    results: Sequence[PredictorResult],
    *,
    budget: float = DEFAULT_BUDGET,
    worst_node_budget: float | None = None,
) -> tuple[list[PredictorResult], str | None, str | None]:
    """Copies of ``results`` with ``within_budget`` and both gap-closed figures set.

    Returns ``(results, baseline, note)``: ``baseline`` is the name of the best peer within
    budget (None if there is none), ``note`` says why ``gap_closed`` is None when it is.
    Pure: the inputs are not modified.
    """
    wnb = _worst_node_budget(budget, worst_node_budget)
    out = [replace(r, within_budget=is_within_budget(r, budget, wnb)) for r in results]
    by_name = {r.name: r for r in out}
    oracle = by_name.get(Oracle.name)

    def gaps(lo: float, hi: float) -> list[float]:
        return [(r.reclaimed - lo) / (hi - lo) for r in out]

    rnm = by_name.get("rc-nsigma-max")
    if oracle is not None and rnm is not None and oracle.reclaimed > rnm.reclaimed:
        for r, g in zip(out, gaps(rnm.reclaimed, oracle.reclaimed), strict=True):
            r.gap_closed_vs_rc_nsigma_max = g

    candidates = [r for r in out if is_peer(r) and r.within_budget]
    best = max(candidates, key=lambda r: r.reclaimed, default=None)  # first of equals
    bounds = f"mean ≤ {_pct_text(budget)} and worst node ≤ {_pct_text(wnb)} at 60 min"
    if best is None:
        peers = [r.name for r in out if is_peer(r)]
        if peers:
            note = f"no peer ({', '.join(peers)}) within budget ({bounds}): gap closed undefined"
        else:
            note = "no peer predictor evaluated: gap closed undefined"
        return out, None, note
    if oracle is None:
        return out, best.name, "no oracle evaluated: gap closed undefined"
    if oracle.reclaimed <= best.reclaimed:
        return out, best.name, (
            f"the baseline {best.name} reclaims as much as the oracle: gap closed undefined"
        )
    for r, g in zip(out, gaps(best.reclaimed, oracle.reclaimed), strict=True):
        r.gap_closed = g
    return out, best.name, None


def _pct_text(x: float) -> str:
    return f"{100 * x:g} %"


# -- pooling over nodes -------------------------------------------------------------------------


def pool_results(nodes: Sequence[tuple[str, Sequence[PredictorResult]]]) -> list[PredictorResult]:
    """Pool per-node results (``(node label, results)`` pairs, same predictors in the same order).

    reclaimed, overshoot and mean prediction: ratios of sums over all nodes' decision points
    (each node weighted by its Σ requests); violation rates: decision-weighted means; worst-node
    rates: the maximum over nodes (the first such node is named). Budget fields are left unset:
    see `apply_budget`.
    """
    if not nodes:
        raise ValueError("nothing to pool: no nodes")
    names = [r.name for r in nodes[0][1]]
    for label, rs in nodes:
        if [r.name for r in rs] != names:
            raise ValueError(
                f"{label}: predictors {[r.name for r in rs]} differ from {names} of {nodes[0][0]}"
            )
        for r in rs:
            if r.decisions <= 0:
                raise ValueError(f"{label}: predictor {r.name!r} has no decision points to pool")
    out: list[PredictorResult] = []
    for j, name in enumerate(names):
        col = [(label, rs[j]) for label, rs in nodes]
        d = sum(r.decisions for _, r in col)
        req = math.fsum(r.request_sum for _, r in col)

        def by_requests(attr: str, col=col, req=req) -> float:
            if req <= 0:
                return 0.0
            return math.fsum(getattr(r, attr) * r.request_sum for _, r in col) / req

        def by_decisions(attr: str, col=col, d=d) -> float:
            return math.fsum(getattr(r, attr) * r.decisions for _, r in col) / d

        def worst(attr: str, node_attr: str, col=col) -> tuple[float, str]:
            label, r = max(col, key=lambda c: getattr(c[1], attr))  # first of equals
            return getattr(r, attr), getattr(r, node_attr) or label  # a pooled input names its own

        w5, n5 = worst("worst_violation_5m", "worst_node_5m")
        w60, n60 = worst("worst_violation_60m", "worst_node_60m")
        first = col[0][1]
        out.append(
            PredictorResult(
                name=name,
                default=first.default,
                reclaimed=by_requests("reclaimed"),
                violation_5m=by_decisions("violation_5m"),
                violation_60m=by_decisions("violation_60m"),
                violation=by_decisions("violation"),
                overshoot=by_requests("overshoot"),
                mean_prediction=by_requests("mean_prediction"),
                parameters=first.parameters,
                decisions=d,
                request_sum=req,
                worst_violation_5m=w5,
                worst_violation_60m=w60,
                worst_node_5m=n5,
                worst_node_60m=n60,
            )
        )
    return out


@dataclass
class Pooled:
    """Every predictor pooled over several nodes (one trace each); see `pool`."""

    nodes: int
    traces: list[str]
    decisions: int
    horizon_seconds: int
    warmup_seconds: int
    mean_request: float  # per node and decision point, cores
    mean_usage: float
    budget: float
    worst_node_budget: float
    baseline: str | None
    note: str | None
    elapsed_seconds: float
    results: list[PredictorResult] = field(default_factory=list)

    def result(self, name: str) -> PredictorResult:
        return _find(self.results, name)

    def to_json(self) -> dict:
        return {
            "nodes": self.nodes,
            "traces": self.traces,
            "decisions": self.decisions,
            "horizon_seconds": self.horizon_seconds,
            "warmup_seconds": self.warmup_seconds,
            "mean_request": self.mean_request,
            "mean_usage": self.mean_usage,
            "elapsed_seconds": self.elapsed_seconds,
            **_verdict_json(self),
        }


def pool(
    evaluations: Sequence[Evaluation],
    *,
    budget: float = DEFAULT_BUDGET,
    worst_node_budget: float | None = None,
) -> Pooled:
    """Pool per-trace evaluations (one node each, same horizon and predictors); see `pool_results`."""
    if not evaluations:
        raise ValueError("nothing to pool: no evaluations")
    horizons = {e.horizon_seconds for e in evaluations}
    if len(horizons) != 1:
        raise ValueError(f"cannot pool evaluations with different horizons: {sorted(horizons)}")
    wnb = _worst_node_budget(budget, worst_node_budget)
    pooled = pool_results([(e.trace, e.results) for e in evaluations])
    results, baseline, note = apply_budget(pooled, budget=budget, worst_node_budget=wnb)
    d = sum(e.decisions for e in evaluations)
    return Pooled(
        nodes=len(evaluations),
        traces=[e.trace for e in evaluations],
        decisions=d,
        horizon_seconds=evaluations[0].horizon_seconds,
        warmup_seconds=evaluations[0].warmup_seconds,
        mean_request=math.fsum(e.mean_request * e.decisions for e in evaluations) / d,
        mean_usage=math.fsum(e.mean_usage * e.decisions for e in evaluations) / d,
        budget=budget,
        worst_node_budget=wnb,
        baseline=baseline,
        note=note,
        elapsed_seconds=math.fsum(e.elapsed_seconds for e in evaluations),
        results=results,
    )
