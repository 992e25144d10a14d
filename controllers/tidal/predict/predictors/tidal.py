# SPDX-License-Identifier: Apache-2.0
"""Tidal's default: the sharpest of several rules, each calibrated on its own past errors.

At every decision point t each *rule* c states a base B_c(t) from the past only:

==================  ==========================================================================
rule                B_c(t)
==================  ==========================================================================
``koordinator``     0.35 × R(t) + u(t)  (Koordinator's batch ``usage`` policy)
``volcano``         R(t) − 0.6 × the weighted idle request of the last 10 samples (Volcano's
                    ``extend`` policy)
``nsigma``          mean + 5 σ of the node total over 2 h (the traces README's reference row)
``level-2h``,       Σ over the pods on the node of each pod's exponentially weighted average
``level-30m``       usage, half-life 2 h / 30 min (a pod's average starts at its first reading)
``recent-peak``     the node total's maximum over the last horizon
==================  ==========================================================================

(R the sum of the online pods' requests, u their usage.) The node is judged by the peak of its
whole online usage over (s, s + horizon], *arrivals included*: a pod that arrives within the
horizon counts against the prediction made before it. Two conformal margins per rule see to
that (split conformal prediction run online: Vovk et al. 2005; Angelopoulos & Bates 2021),
each the ⌈(n+1)(1−α)⌉-th smallest of the n scores of the last 14 days' elapsed decision points:

* ``rule/all``       P(t) = m × B(t), m over the ratios peak(s) / B(s), peak(s) the node's whole
                     peak; for exchangeable errors it is exceeded at a rate of at most α;
* ``rule/arrivals``  P(t) = m' × B(t) + a, m' over the ratios of the peak of the pods *present*
                     at s to B(s) (the level of the pods there now), and a ≥ 0 over the excesses
                     of peak(s) over that prediction as made at s (what arrivals added beyond
                     it, in cores).

A ratio carries over when the level moves (day and night, pods leaving); an arrival adds cores,
not a share of the level, which the additive reserve says. On a node where pods never arrive
both come out alike. A third form has no rule's base to scale:

* ``requests/headroom``  P(t) = u(t) + m × R(t), m over the excesses (peak(s) − u(s)) / R(s):
                     Koordinator's rule (usage + a share of the requests) with its share
                     calibrated on this node instead of the fixed 35 %. Where usage is low and
                     smooth a headroom above it beats any ratio of a peak (`tidal predict
                     frontier`: on lenient Azure this form, fitted in hindsight, reclaims the
                     most of the simple families).

The peers' rules (``koordinator``, ``volcano``) are candidates too, *as their systems use
them*, uncalibrated: each may be used while its realised violations on this node stay within α
with a prior of one clean day (violations / (points + one day of points) ≤ α), so a rule that
misses is dropped soon (on 5-minute steps, with α ≈ 0.69 %, at its third miss in its first half
day: the prior admits α × 288 ≈ 2, and one more for every 1/α ≈ 145 points of record) and one that
never misses keeps its standing slack for arrivals.
Nothing here is fitted to a trace; every constant is a peer's published default or derived from
the violation budget and the horizon.

**Which candidate.** The one whose *realised* predictions were lowest on average over the
calibration window (the most reclaim), among those that may be used now (a calibrated one from
one elapsed horizon of its calibrated predictions: an average of one point compares nothing),
all averaged over the same span, the newest usable candidate's (a candidate calibrated at night
is not compared on its nights with a peer's days and nights). Choosing by the
window's average rather than by today's margin keeps the choice stable, so the realised
violation rate stays near that of one calibrated candidate, not the union of all. What
selection bias remains is paid for by one more conformal margin, on the choice among the
calibrated candidates (its past peak-of-present-pods / prediction ratios, never below 1), kept
from the moment a calibrated candidate is usable whether the choice is used or a peer's rule
is (before 2026-12-03 it was kept on whatever was chosen, so the peers' high predictions of
the first day diluted it to 1). That margin applies to a calibrated choice only, and the
averages are compared as the predictions would be used (a calibrated candidate's times that
margin, a peer's rule as it is): otherwise a choice margin learnt on a bad first day keeps a
calibrated rule ahead of, and above, a peer's rule that never missed.

**Where pods come and go** a calibrated candidate may be the choice only once that choice
margin has its own minimum points of record (about 12 h after the first rule is calibrated, a
day into the node's history); on a node whose pods have not changed over the calibration
window, from one horizon of it (the margin then the largest ratio so far). A margin learnt on
a dozen horizons of other pods misses in runs of up to a horizon, and one run puts a day over
the worst-node bar: on the synthetic ``jobs`` shape (16 slots of 1–8 h jobs, 2 h warm-up) the
calibrated rules, used from about 13 h, missed at 2.8 % of their points, while Volcano's rule,
which they replaced, missed at 0.01 %. For the same reason the warm-up reference row
(``rc-nsigma-max``, below) is used only on such a node.

**Floors.** P never drops below the current usage (never offer what is in use right now); a
calibrated candidate's, not below it plus the idle request of the pods that arrived within the
last horizon (a pod new to an established node has no usage its margins learnt from; the pods
present when the history starts count as established, so a new node or a restarted agent does
not hold everything back). A peer's rule is used as its system uses it: its own record on this
node, arrivals included, decides whether it may be used. A base below 1 % of the
requests counts as 1 %, so an idle node cannot produce an unbounded ratio.

**Cold start (regime ``warming-up``).** A calibrated margin needs ⌈1/α⌉ − 1 elapsed horizons
(about 12 h at 5-minute steps, the first point at which the conformal rank exists); until then
only the peers' rules may be used, under the rule above, and then until the node's history
spans a day, the period of online traffic (`Tidal.period_seconds`: a margin learnt on half a
day has not seen the day's peak hours; since 2026-12-05, before which the calibrated rules took
over at about 17 h and, on one-day traces, missed 1.5–2.1 % of the day), and until the choice
among the calibrated candidates has its record ("where pods come and go", above: more than a
day where pods arrived). So from its first sample a node new to the cluster reclaims what the
better of the peers reclaims.

Besides the peers' rules, the traces README's reference row ``rc-nsigma-max`` (Σ per-pod p95
over 24 h, at least mean + 3 σ over 2 h; Bashir et al., EuroSys 2021) may be used as it is while
warming up, but on its own record only: from one elapsed horizon of it, and only while its
violations stay within α without a prior (none in its first 12 h), and only on a node whose pods
have not changed over the calibration window. It is not computed once a rule is calibrated (it
would cost a per-pod sorted window in the agent).

**Fallback (regime ``fallback``).** When no candidate may be used (both peers missed before any
rule is calibrated, which on the traces is pods arriving while a node fills) the peer's rule
that missed least is used. Holding the whole request back would be no answer: an arrival exceeds
today's request as well, and the node would offer nothing for the half day the calibration
takes.

**Level shifts up (regime ``shift-detected``).** A calibrated margin learns a new level only
as its window fills with it, so after a jump the calibrated predictions miss more often than α
until then. `ShiftDetector`, a Bernoulli CUSUM, is fed each calibrated decision point as soon as
it is decided (missed the moment the usage exceeds it, clean when its horizon elapsed) and
compares "misses at α" with "misses every other time", alarming at ln(one budget period in
steps); the points are not independent (one jump misses every open point at once), so in
practice any miss that takes three or more points within a few raises it: every jump the
margins did not cover, and now and then a burst of noise. On an alarm P is floored, for as long
as a re-calibration on data since would take (⌈1/α⌉ − 1 points plus a horizon, about 13 h), at
the recent peak × the recent-peak rule's margin on the pods present, as it was at the alarm
(never below 1). The calibrated state is kept, not dropped: jumps recur, and a window without
them does not cover the next one (measured: dropping it and predicting conservatively until a
rule is re-calibrated on post-shift data lost 1.1 points of reclaim on strict Azure, below
N-sigma, and kept level-shift series over budget).

**α** is the 1 % budget minus one standard deviation of a 30-day period's realised rate
(`Tidal.target_rate`): violations come in runs of up to a horizon, so a month's realised rate is
noisy; about 0.69 % at 5-minute steps and a 1 h horizon.

`Tidal.explain` says which regime and rule made a prediction and on what evidence; the agent
writes it to ``NodeProfile.status.predictions``.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

from tidal.predict.predictors.base import Predictor
from tidal.predict.series import NodeHistory
from tidal.predict.windows import RollingMax, RollingSorted, RollingStats, linear_quantile

__all__ = ["HEADROOM_RULES", "RULES", "PEER_RULES", "ShiftDetector", "Tidal"]

#: Every rule, in report order; the peers' rules may be used before calibration.
RULES = ("koordinator", "volcano", "nsigma", "level-2h", "level-30m", "recent-peak")
PEER_RULES = ("koordinator", "volcano")
#: Rules used only as they are, only while no rule is calibrated, once they have a record.
WARMUP_RULES = ("rc-nsigma-max",)
#: Rules used only in the ``headroom`` form (usage now + a calibrated share of the base).
HEADROOM_RULES = ("requests",)

WARMING_UP = "warming-up"
CALIBRATED = "calibrated"
FALLBACK = "fallback"
SHIFT = "shift-detected"


class ShiftDetector:
    """A Bernoulli CUSUM (Page 1954) on the misses of the calibrated predictions.

    Each calibrated decision point is one Bernoulli trial, fed as soon as it is decided: missed
    the moment the usage exceeds its prediction (a miss is known at once, not a horizon later),
    clean when its horizon elapsed without one. In control a point misses with probability
    ``p0`` (the conformal level α); after a level shift up the calibrated margins lag and the
    points miss about every other time (``p1`` = 1/2). The statistic is the CUSUM of the
    log-likelihood ratio of the two, S = max(0, S + ln(p1/p0)) on a miss and
    S = max(0, S + ln((1−p1)/(1−p0))) on a clean point, and an alarm is raised when S exceeds
    ``threshold``: ln of the in-control run length wanted, one budget period (a false alarm
    about once a period, were the trials independent). At 5-minute steps, α ≈ 0.69 % and a
    30-day period (threshold ≈ 9.1) that is three misses among a few points. Pure bookkeeping,
    O(1) a trial. `step` returns Page's estimate of the change point on an alarm (the trial at
    which the excursion of S began) and starts afresh; None otherwise.
    """

    __slots__ = ("up", "down", "threshold", "score", "start")

    def __init__(self, p0: float, p1: float, threshold: float) -> None:
        if not 0.0 < p0 < p1 < 1.0:
            raise ValueError(f"need 0 < p0 < p1 < 1, not p0={p0}, p1={p1}")
        if not threshold > 0.0:
            raise ValueError(f"threshold must be positive, not {threshold}")
        self.up = math.log(p1 / p0)
        self.down = math.log((1.0 - p1) / (1.0 - p0))
        self.threshold = threshold
        self.score = 0.0
        self.start = 0

    def step(self, i: int, missed: bool) -> int | None:
        """Feed trial ``i``; the change point (a trial ≤ ``i``) on an alarm, else None."""
        if self.score == 0.0:
            self.start = i  # an excursion begins here if this trial raises S
        self.score = max(0.0, self.score + (self.up if missed else self.down))
        if self.score > self.threshold:
            self.score = 0.0
            return self.start
        return None


@dataclass(frozen=True)
class Tidal(Predictor):
    name: ClassVar[str] = "tidal"
    horizon_seconds: float = 3600
    budget: float = 0.01
    budget_period_seconds: float = 30 * 86400
    calibration_seconds: float = 14 * 86400
    prior_seconds: float = 86400
    # the period of online traffic: a calibrated rule is the choice only once the node's history
    # spans one (`_Engine.choice_ready`)
    period_seconds: float = 86400
    level_floor_fraction: float = 0.01
    # the peers' published defaults (Koordinator cpuReclaimThresholdPercent 65, Volcano 60 %)
    koordinator_threshold: float = 0.65
    volcano_ratio: float = 0.6
    volcano_samples: int = 10
    nsigma_n: float = 5.0
    nsigma_window_seconds: float = 2 * 3600
    # the traces README's reference row max(RC, N-sigma): per-pod p95 over 24 h, n = 3
    rc_q: float = 0.95
    rc_window_seconds: float = 24 * 3600
    rc_nsigma_n: float = 3.0
    # level shifts up (`ShiftDetector`): p1, the miss rate of a calibration that lags a shift
    detect_shifts: bool = True
    shift_miss_rate: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 < self.budget < 1.0:
            raise ValueError(f"budget must be in (0, 1), not {self.budget}")
        if self.horizon_seconds <= 0 or self.calibration_seconds <= 0:
            raise ValueError("horizon and calibration window must be positive")
        if self.prior_seconds < 0:
            raise ValueError("the prior must not be negative")
        if self.period_seconds < 0:
            raise ValueError("the traffic's period must not be negative")
        if not 0.0 < self.shift_miss_rate < 1.0:
            raise ValueError(f"shift_miss_rate must be in (0, 1), not {self.shift_miss_rate}")

    def target_rate(self, step_seconds: float) -> float:
        """The conformal level α: the budget minus one standard deviation of a period's rate.

        Violations come in runs of up to one horizon (h steps), so over a period of N decision
        points the violated count is about h × Poisson(α·N/h): its rate has mean α and standard
        deviation √(α·h/N). α solves α + √(α·h/N) = budget. 5-minute steps, 1 h horizon,
        30-day period, 1 % budget: α ≈ 0.69 %.
        """
        h = max(1.0, round(self.horizon_seconds / step_seconds))
        n = max(h, self.budget_period_seconds / step_seconds)
        c = math.sqrt(h / n)
        x = (-c + math.sqrt(c * c + 4.0 * self.budget)) / 2.0
        return x * x

    # -- the incremental engine ---------------------------------------------------------------
    def _engine(self, history: NodeHistory) -> _Engine:
        key = f"tidal:{self!r}:step={history.step}"
        engine = history.scratch.get(key)
        if engine is None:
            engine = history.scratch[key] = _Engine(self, history)
        engine.advance(history)
        return engine

    def margins(self, history: NodeHistory) -> dict[str, float]:
        """Calibrated margin per candidate (``rule/present``, ``rule/all``, ``rule/arrivals``: the
        last a reserve in cores); ``inf`` while it has too few elapsed horizons."""
        return {c.name: c.margin for c in self._engine(history).candidates if c.kind != "raw"}

    def chosen(self, history: NodeHistory) -> str | None:
        """The candidate used now (``rule`` or ``rule/form``)."""
        choice = self._engine(history).current
        return None if choice is None else choice.name

    def predict(self, history: NodeHistory) -> float:
        if len(history) == 0:
            return 0.0
        return history.bound(self._engine(history).final[-1])

    def explain(self, history: NodeHistory) -> dict:
        """Where the current prediction comes from: regime, rule, margins and evidence (the
        NodeProfile status shows this)."""
        if len(history) == 0:
            return {"regime": FALLBACK, "reason": "no history yet", "cpuCores": 0.0}
        e = self._engine(history)
        choice = e.current
        assert choice is not None
        out: dict = {"historySteps": len(history), "stepSeconds": history.step,
                     "targetViolationRate": round(e.alpha, 5)}
        if e.fallback:
            out.update(regime=FALLBACK, rule=choice.rule, form=RAW,
                       baseCores=round(e.bases[choice.rule][-1], 4),
                       observedViolations=choice.violations, observedPoints=len(choice.record),
                       reason=(
                f"no calibrated rule may be used yet and both peers' rules missed the online "
                f"peak more often than the budget allows (pods arriving, as a rule): "
                f"{choice.rule}'s, which missed least ({choice.violations} of "
                f"{len(choice.record)} points)"))
            self._explain_waiting(history, e, out)
        else:
            base = e.bases[choice.rule][-1]
            out.update(regime=WARMING_UP if choice.kind == RAW else CALIBRATED, rule=choice.rule,
                       form=choice.kind, baseCores=round(base, 4),
                       observedViolations=choice.violations, observedPoints=len(choice.record))
            if choice.kind == RAW and choice.rule in WARMUP_RULES:
                out["reason"] = (
                    f"the reference row {choice.rule} (Σ per-pod {self.rc_q * 100:g}th percentile "
                    f"over {self.rc_window_seconds / 3600:g} h, at least mean + {self.rc_nsigma_n:g} σ "
                    f"over {self.nsigma_window_seconds / 3600:g} h) as it is, uncalibrated, while no "
                    f"calibrated rule may be the choice: it missed the online peak at "
                    f"{choice.violations or 'none'} of its {len(choice.record)} points on this "
                    f"node (its own record: within the level with no prior), no pod arrived on "
                    f"the node within the calibration window, and its predictions were the lowest "
                    f"of the usable rules over the window")
                self._explain_waiting(history, e, out)
            elif choice.kind == RAW:
                out["reason"] = (
                    f"{choice.rule}'s rule as its system uses it, uncalibrated: its realised "
                    f"violations on this node ({choice.violations} of {len(choice.record)} "
                    f"points) are within the level with a clean day's prior, and its predictions "
                    f"were the lowest of the usable rules over the window")
                self._explain_waiting(history, e, out)
            else:
                c = choice.calibration
                out.update(margin=round(c.value, 4), calibrationPoints=len(c))
                if choice.kind == ALL:
                    out["reason"] = (
                        f"{choice.rule} × {c.value:.3f}, the {c.rank}-th smallest of {len(c)} "
                        f"past ratios of the node's whole peak (arrivals included) to the base "
                        f"(level {e.alpha:.2%}); the lowest predictions of the usable rules "
                        f"over the window")
                elif choice.kind == HEADROOM:
                    out["reason"] = (
                        f"the usage now + {max(0.0, c.value):.3f} × the requests ({base:.3f} cores), "
                        f"{c.value:.3f} the {c.rank}-th smallest of {len(c)} past excesses of the "
                        f"node's whole peak (arrivals included) over the usage at the decision "
                        f"point, as shares of the requests (level {e.alpha:.2%}): Koordinator's rule "
                        f"with its threshold calibrated on this node; the lowest predictions of "
                        f"the usable rules over the window")
                else:
                    pc = e.by_name[f"{choice.rule}/{PRESENT}"].calibration
                    out.update(presentMargin=round(pc.value, 4),
                               arrivalReserveCores=round(max(0.0, c.value), 4))
                    out["reason"] = (
                        f"{choice.rule} × {pc.value:.3f} (the conformal margin on the peaks of "
                        f"the pods present) + {max(0.0, c.value):.3f} cores, the {c.rank}-th "
                        f"smallest of {len(c)} past excesses of the node's whole peak over "
                        f"that (what arrivals added; level {e.alpha:.2%}); the lowest "
                        f"predictions of the usable rules over the window")
            if e.young_idle > 0 and choice.kind in CALIBRATED_KINDS:
                out["youngPodsIdleRequestCores"] = round(e.young_idle, 4)
        self._explain_bound(history, e, out)
        if choice.kind in CALIBRATED_KINDS and e.choice_margin() > 1.0:
            out["choiceMargin"] = round(e.choice_margin(), 4)
        if e.last_shift is not None:
            self._explain_shift(history, e, out)
        out["cpuCores"] = round(self.predict(history), 4)
        return out

    @staticmethod
    def _explain_bound(history: NodeHistory, e: _Engine, out: dict) -> None:
        """The rule's own prediction (``ruleCores``) and, when the floor or the cap decided
        instead, which (``bound``): never below the usage now + the young pods' idle requests,
        never above the requests (or the usage, if higher)."""
        rule, chosen, usage = e.current.at[-1], e.chosen[-1], history.total_usage[-1]
        out.update(ruleCores=round(rule, 4), usageNowCores=round(usage, 4))
        if chosen > rule + 1e-9:
            out["bound"] = "floor"
            if e.current.kind in CALIBRATED_KINDS:
                out["reason"] += (f"; raised to its floor, the usage now ({usage:.3f} cores) + the young pods' "
                                  f"idle requests ({e.young_idle:.3f} cores), above the rule's {rule:.3f}")
            else:
                out["reason"] += f"; raised to the usage now ({usage:.3f} cores), above the rule's {rule:.3f}"
        elif chosen < rule - 1e-9:
            out["bound"] = "requests"
            out["reason"] += f"; capped at the requests ({chosen:.3f} cores), below the rule's {rule:.3f}"

    @staticmethod
    def _explain_waiting(history: NodeHistory, e: _Engine, out: dict) -> None:
        """A calibrated rule that would be chosen but may not be yet (`_Engine.choice_ready`)."""
        w = e.waiting
        if w is None:
            return
        now = len(history) - 1
        out["calibratedChoice"] = {
            "rule": w.rule, "form": w.kind, "cpuCores": round(e.shadow[-1], 4),
            "choiceRecordPoints": len(e.ensemble), "choiceRecordNeeded": e.min_points,
            "lastArrivalAt": None if e.last_arrival < 0 else history.start + e.last_arrival * history.step}
        if now + 1 < e.period:
            why = (f"until the node's history spans the online traffic's period "
                   f"({e.p.period_seconds / 3600:g} h: {now + 1} of {e.period} samples), as margins "
                   f"learnt on less have not seen its peak hours")
        elif e.stable(now):
            why = f"until their choice has a horizon of record ({len(e.ensemble)} of {e.h} points)"
        else:
            why = (f"because pods arrived on the node within the calibration window, until their "
                   f"choice has a margin of its own ({len(e.ensemble)} of {e.min_points} points "
                   f"of record)")
        out["reason"] += (f"; the calibrated rules, whose choice now is {w.name} "
                          f"({e.shadow[-1]:.3f} cores), may not be used {why}")

    @staticmethod
    def _explain_shift(history: NodeHistory, e: _Engine, out: dict) -> None:
        detected, cp = e.last_shift
        g = e.guard
        shift = {"detectedAt": history.start + detected * history.step,
                 "changePointAt": history.start + cp * history.step,
                 "guardUntil": history.start + e.guard_until * history.step,
                 "guardMargin": round(g.fixed, 4), "shiftsDetected": e.shifts}
        now = len(history) - 1
        if now > e.guard_until:
            out["lastShift"] = shift
            return
        said = (f"a level shift up was detected at step {detected} (the calibrated predictions "
                f"missed far more often than {e.alpha:.2%} from step {cp} on: a CUSUM of their "
                f"misses); until step {e.guard_until}, as long as a re-calibration on data since "
                f"takes, P is at least the recent peak × {g.fixed:.3f}, the recent-peak rule's "
                f"margin on the pods present before the shift")
        if e.guarded:
            # the rules' choice, below the floor now, goes under "choice"
            keep = ("historySteps", "stepSeconds", "targetViolationRate")
            choice = {k: out.pop(k) for k in list(out) if k not in keep}
            choice["cpuCores"] = round(min(history.bound(math.inf), e.chosen[-1] * (
                e.choice_margin() if choice.get("form") in CALIBRATED_KINDS else 1.0)), 4)
            out.update(regime=SHIFT, rule=g.rule, form=GUARD,
                       baseCores=round(e.bases[g.rule][-1], 4), margin=round(g.fixed, 4),
                       shift=shift, choice=choice,
                       reason=f"{said}; that floor applies now (the rules' choice is below it)")
        else:
            out.update(regime=SHIFT, shift=shift,
                       reason=f"{said}; the rules' choice is above it now: {out.get('reason', '')}")


class _Conformal:
    """A window of calibration ratios and the conformal order statistic at level α."""

    def __init__(self) -> None:
        # the window as two deques (decision point, ratio): no tuple per point
        self.points: deque[int] = deque()
        self.ratios: deque[float] = deque()
        self.sorted: list[float] = []
        self.value = math.inf
        self.rank = 0

    def add(self, s: int, ratio: float) -> None:
        self.points.append(s)
        self.ratios.append(ratio)
        bisect.insort(self.sorted, ratio)

    def update(self, oldest: int, alpha: float, min_points: int) -> None:
        """Drop points older than ``oldest``; the ⌈(n+1)(1−α)⌉-th smallest ratio, or inf."""
        while self.points and self.points[0] < oldest:
            self.points.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, self.ratios.popleft())]
        size = len(self.sorted)
        rank = math.ceil((size + 1) * (1.0 - alpha))
        if size >= min_points and 0 < rank <= size:
            self.value, self.rank = self.sorted[rank - 1], rank
        else:
            self.value, self.rank = math.inf, 0

    def __len__(self) -> int:
        return len(self.sorted)


def _ratio(peak: float, base: float) -> float:
    return peak / base if base > 0.0 else (0.0 if peak <= 0.0 else math.inf)


#: The kinds of candidate, in report order (see the module docstring); ``guard`` is the floor
#: after a detected level shift (the recent peak × its margin on the pods present then).
RAW, PRESENT, ALL, ARRIVALS, GUARD = "raw", "present", "all", "arrivals", "guard"
#: ``headroom``: the usage now + the conformal margin × the rule's base (the requests)
HEADROOM = "headroom"
CALIBRATED_KINDS = (ALL, ARRIVALS, HEADROOM)


class _Candidate:
    """One way of predicting from one rule's base, with its realised record.

    ``raw``: the base as it is (the peers' rules only). ``present``: base × the conformal margin
    on the peaks of the pods present at the decision point (an input of ``arrivals``, not a
    candidate itself). ``all``: base × the conformal margin on the node's whole peak, arrivals
    included. ``arrivals``: the ``present`` prediction plus the conformal (1 − α) quantile of
    what the whole peak exceeded it by (never below 0). ``headroom``: the usage now plus the
    conformal margin (never below 0) on the whole peak's excesses over the usage, as shares of
    the base (the requests).
    """

    def __init__(self, rule: str, kind: str, window: int) -> None:
        self.rule = rule
        self.kind = kind
        self.name = rule if kind == RAW else f"{rule}/{kind}"
        self.calibration = _Conformal() if kind not in (RAW, GUARD) else None
        # 8 bytes a point: the agent replays 14 days of 100 pods at every closed step
        self.at = array("d")  # the prediction at s (NaN: not available at s)
        self.sums = array("d", [0.0])  # running sums of the available ones, in order
        self.window = window
        self.record: deque[int] = deque()  # 2·s + (the prediction at s was exceeded)
        self.violations = 0
        self.fixed = 1.0  # the margin of a candidate without a calibration (``guard``'s)

    @property
    def margin(self) -> float:
        return self.calibration.value if self.calibration is not None else self.fixed

    def predict(self, base: float, u: float, present: float | None) -> float | None:
        """The prediction now from the rule's base, the current usage and (for ``arrivals``)
        the ``present`` candidate's prediction now; None while it is not calibrated."""
        m = self.margin
        if not math.isfinite(m):
            return None
        if self.kind == ARRIVALS:
            if present is None or math.isnan(present):
                return None
            return max(present + max(0.0, m), u)
        if self.kind == HEADROOM:
            return u + max(0.0, m) * base
        return max(m * base, u)

    def push(self, p: float | None) -> None:
        self.at.append(math.nan if p is None else p)
        if p is not None:
            self.sums.append(self.sums[-1] + p)

    def available(self) -> int:
        """How many of its predictions the window holds (the newest ones)."""
        return min(self.window, len(self.sums) - 1)

    def mean_cost(self, n: int) -> float:
        """Average of its last ``n`` realised predictions (a choice by today's margin alone
        would favour whichever candidate's recent errors happened to be kindest); ``n`` at most
        `available`, the same for every candidate compared (`_Engine.choose`)."""
        sums = self.sums
        return (sums[-1] - sums[-1 - n]) / n if n else math.inf


class _Engine:
    """Per-history state of one `Tidal` parameter set, extended one sample at a time.

    Everything here is a function of the samples seen so far, so a fresh history built from the
    same samples gives the same predictions.
    """

    def __init__(self, p: Tidal, history: NodeHistory) -> None:
        self.p = p
        self.k = len(history.series_ids)
        self.h = history.steps(p.horizon_seconds)
        self.cal = history.steps(p.calibration_seconds)
        self.prior = history.steps(p.prior_seconds) if p.prior_seconds > 0 else 0
        self.alpha = p.target_rate(history.step)
        self.min_points = max(1, math.ceil(1.0 / self.alpha) - 1)
        self.period = history.steps(p.period_seconds) if p.period_seconds > 0 else 0
        self.bases: dict[str, array] = {name: array("d") for name in RULES + WARMUP_RULES + HEADROOM_RULES}
        self.candidates = [_Candidate(name, RAW, self.cal) for name in PEER_RULES + WARMUP_RULES]
        self.warming = True  # no rule calibrated yet
        self.rc = [RollingSorted(history.steps(p.rc_window_seconds)) for _ in range(self.k)]
        self.candidates += [_Candidate(name, kind, self.cal)
                            for kind in (PRESENT, ALL, ARRIVALS) for name in RULES]
        self.candidates += [_Candidate(name, HEADROOM, self.cal) for name in HEADROOM_RULES]
        self.by_name = {c.name: c for c in self.candidates}
        self.current: _Candidate | None = None
        self.fallback = False  # the current choice is `fall_back`'s
        self.half_lives = {"level-2h": 7200 / history.step, "level-30m": 1800 / history.step}
        self.pod_level: dict[str, list[float | None]] = {n: [None] * self.k for n in self.half_lives}
        self.nsigma = RollingStats(history.steps(p.nsigma_window_seconds))
        self.recent = RollingMax(self.h)  # the node total's maximum over the last horizon
        self.age = [0] * self.k
        self.young_idle = 0.0
        self.mask: list[int] = []  # bitmask of the pods on the node at s
        self.chosen = array("d")  # the chosen rule's prediction at s, floored
        self.final = array("d")  # P(s)
        # peak / the calibrated choice: the choice's own calibration, on what the choice among
        # the calibrated candidates was at s whether it was used or a peer's rule was
        self.ensemble = _Conformal()
        self.shadow = array("d")  # that choice's prediction at s, floored (NaN: none usable)
        self.last_arrival = -1  # the last step a pod arrived on the node (-1: none yet)
        self.waiting: _Candidate | None = None  # the calibrated choice, when not used now
        self.seen = 0
        self.calibrated = 0
        # level shifts up: the detector, fed the calibrated decision points (`_watch`); on an
        # alarm the guard floors P for as long as a re-calibration on data since would take
        self.detector = ShiftDetector(self.alpha, p.shift_miss_rate, math.log(
            max(math.e, p.budget_period_seconds / history.step))) if p.detect_shifts else None
        self.armed = False  # the prediction just made was a calibrated candidate's
        self.open: deque[int] = deque()  # those decision points whose horizon is still open
        self.guard = _Candidate("recent-peak", GUARD, self.cal)
        self.guard_until = -1  # the last step the guard applies to
        self.guarded = False  # the guard raised P now
        self.last_shift: tuple[int, int] | None = None  # (detected at, change point)
        self.shifts = 0

    # bases at step s, from samples ≤ s only
    def _bases(self, history: NodeHistory, s: int) -> dict[str, float]:
        p = self.p
        total = history.total_usage
        req = history.total_request
        u, r = total[s], req[s]
        out = {"koordinator": r * (1.0 - p.koordinator_threshold) + u}
        lo = max(0, s - p.volcano_samples + 1)
        weight, num, den = 1.0, 0.0, 0.0
        for i in range(lo, s + 1):
            num += weight * max(0.0, req[i] - total[i])
            den += weight
            weight *= 2.0
        out["volcano"] = r - p.volcano_ratio * num / den
        self.nsigma.sync(total, s + 1)
        mean, std = self.nsigma.mean_std()
        out["nsigma"] = mean + p.nsigma_n * std
        k = self.k
        us = [history.usage(j)[s] for j in range(k)]  # this step's per-pod readings, once
        rs = [history.request(j)[s] for j in range(k)]
        if self.warming:
            if not self.rc:  # warming up again (every calibration window emptied): windows anew
                self.rc = [RollingSorted(history.steps(p.rc_window_seconds)) for _ in range(k)]
            rc = 0.0
            for j in range(k):
                w = self.rc[j]
                w.sync(history.usage(j), s + 1)
                if rs[j] > 0.0 or us[j] > 0.0:
                    rc += linear_quantile(w.sorted, p.rc_q)
            out["rc-nsigma-max"] = max(rc, mean + p.rc_nsigma_n * std)
        elif self.rc:
            self.rc = []
        mask = 0
        young_idle = 0.0
        present: list[int] = []
        for j in range(k):
            uj = us[j]
            rj = rs[j]
            if rj <= 0.0 and uj <= 0.0:
                self.age[j] = 0  # not on the node: its level leaves with it
                for pods in self.pod_level.values():
                    pods[j] = None
                continue
            mask |= 1 << j
            present.append(j)
            # the pods on the node when the history starts count as established: their age is
            # unknown (the agent may just have restarted), and a new node must not hold back
            # every request for an hour
            self.age[j] = self.h + 1 if s == 0 else self.age[j] + 1
            if self.age[j] == 1:
                self.last_arrival = s
            if self.age[j] <= self.h:
                young_idle += max(0.0, rj - uj)
        for name, hl in self.half_lives.items():
            a = 1.0 - 0.5 ** (1.0 / hl)
            pods = self.pod_level[name]
            level = 0.0
            for j in present:
                uj = us[j]
                prev = pods[j]
                cur = uj if prev is None else prev + a * (uj - prev)
                pods[j] = cur
                level += cur
            out[name] = level
        self.mask.append(mask)
        self.young_idle = young_idle
        self.recent.sync(total, s + 1)
        out["recent-peak"] = self.recent.maximum()
        out["requests"] = r
        floor = p.level_floor_fraction * r
        return {k: max(v, floor) for k, v in out.items()}

    def advance(self, history: NodeHistory) -> None:
        n = len(history)
        if n < self.seen:
            raise ValueError("a NodeHistory only grows")
        for s in range(self.seen, n):
            bases = self._bases(history, s)
            u = history.total_usage[s]
            for name, values in self.bases.items():
                values.append(bases.get(name, math.nan))
            if self.detector is not None:
                self._watch(s, u)
            self._calibrate(history, s)
            for c in self.candidates:  # PRESENT before ARRIVALS
                present = self.by_name[f"{c.rule}/{PRESENT}"].at[-1] if c.kind == ARRIVALS else None
                base = bases.get(c.rule)
                c.push(None if base is None else c.predict(base, u, present))
            self.guard.push(self.guard.predict(bases["recent-peak"], u, None))
            self.warming = not any(math.isfinite(c.margin) for c in self.candidates if c.kind == ALL)
            upper = max(history.total_request[s], u)
            choice, shadow, ready = self.choose(s)
            self.waiting = None if ready else shadow
            floor = u + self.young_idle
            self.shadow.append(math.nan if shadow is None else min(upper, max(shadow.at[-1], floor)))
            self.fallback = choice is None
            choice = self.current = self.fall_back() if choice is None else choice
            calibrated = choice.kind in CALIBRATED_KINDS
            self.armed = calibrated
            # never below what is in use now; a calibrated rule's not below the young pods'
            # requests either (its margins were learnt on pods that had a history); a peer's
            # rule is used as its system uses it, judged on its own record, arrivals included
            chosen = min(upper, max(choice.at[-1], floor if calibrated else u))
            self.chosen.append(chosen)
            # the choice's own margin is a calibrated candidate's; a peer's rule is used as its
            # system uses it (and chosen as such: `choose`)
            final = min(upper, (self.choice_margin() if calibrated else 1.0) * chosen)
            self.guarded = s <= self.guard_until and self.guard.at[-1] > final
            if self.guarded:
                final = min(upper, self.guard.at[-1])
            self.final.append(final)
        self.seen = n

    def _peak(self, history: NodeHistory, s: int) -> float:
        """The maximum over (s, s + horizon] of the usage of the pods on the node at s (their
        level, which the ``present`` margins calibrate; what later arrivals add is the
        ``arrivals`` reserve's)."""
        end = s + self.h + 1
        m = self.mask[s]
        if not any(self.mask[i] & ~m for i in range(s + 1, end)):
            return max(history.total_usage[s + 1 : end])
        present = [j for j in range(self.k) if m >> j & 1]
        return max(math.fsum(history.usage(j)[i] for j in present) for i in range(s + 1, end))

    def _watch(self, s: int, u: float) -> None:
        """Feed the detector the calibrated decision points decided by now: those the usage
        now exceeds (missed) and those whose horizon elapsed without a miss (clean)."""
        opened = self.open
        if self.armed:
            opened.append(s - 1)
        detector = self.detector
        while opened and opened[0] < s - self.h:
            cp = detector.step(opened.popleft(), False)
            if cp is not None:
                return self._shift(s, cp)
        final = self.final
        for d in [d for d in opened if u > final[d]]:
            opened.remove(d)
            cp = detector.step(d, True)
            if cp is not None:
                return self._shift(s, cp)

    def _shift(self, s: int, cp: int) -> None:
        """A level shift up detected at ``s`` (begun at decision point ``cp``): the calibrated
        margins lag it until they hold data from after it, so until a re-calibration on that
        data would be complete (the minimum calibration points plus a horizon), P is at least
        the recent peak × the recent-peak rule's margin on the pods present, as it was before
        the shift (never below 1). The margins themselves are kept: jumps recur, and a window
        without them would not cover the next one."""
        self.shifts += 1
        self.last_shift = (s, cp)
        self.open.clear()
        m = self.by_name[f"recent-peak/{PRESENT}"].margin
        self.guard.fixed = max(1.0, m) if math.isfinite(m) else 1.0
        self.guard_until = s + self.min_points + self.h

    def _calibrate(self, history: NodeHistory, now: int) -> None:
        """Fold the decision points whose horizon elapsed by ``now`` into the windows."""
        h = self.h
        total = history.total_usage
        requests = history.total_request
        last = now - h  # newest decision point whose horizon has elapsed
        for s in range(self.calibrated, last + 1):
            if requests[s] <= 0.0 and total[s] <= 0.0:
                continue  # no online pod on the node: nothing was predicted
            full = max(total[s + 1 : s + h + 1])
            peak = self._peak(history, s)
            for c in self.candidates:
                if c.kind == ARRIVALS:
                    q = self.by_name[f"{c.rule}/{PRESENT}"].at[s]
                    if not math.isnan(q):
                        c.calibration.add(s, full - q)
                elif c.kind == HEADROOM:
                    c.calibration.add(s, _ratio(full - total[s], self.bases[c.rule][s]))
                elif c.calibration is not None:
                    c.calibration.add(s, _ratio(full if c.kind == ALL else peak, self.bases[c.rule][s]))
                # every candidate is judged as the benchmark judges it: arrivals count
                p = c.at[s]
                if not math.isnan(p):
                    violated = full > p
                    c.record.append(2 * s + violated)
                    c.violations += violated
            if not math.isnan(self.shadow[s]):
                self.ensemble.add(s, _ratio(peak, self.shadow[s]))
        self.calibrated = max(self.calibrated, last + 1)
        oldest = last - self.cal + 1
        self.ensemble.update(oldest, self.alpha, self.min_points)
        for c in self.candidates:
            if c.calibration is not None:
                c.calibration.update(oldest, self.alpha, self.min_points)
            while c.record and c.record[0] >> 1 < oldest:
                c.violations -= c.record.popleft() & 1

    def within_budget(self, violations: int, points: int) -> bool:
        """Observed violations within α, with a prior of one clean day of points."""
        return violations <= self.alpha * (points + self.prior)

    def usable(self, c: _Candidate, s: int) -> bool:
        """May ``c`` be used now? A calibrated ``all``, ``arrivals`` or ``headroom`` candidate
        may (its margin covers the node's whole peak at level α) from one elapsed horizon of its
        calibrated predictions; a peer's rule as it is may while its
        realised record on this node stays within α with a clean day's prior; ``present`` never
        (it is blind to arrivals, which the node is judged on)."""
        if math.isnan(c.at[-1]) or c.kind == PRESENT:
            return False
        if c.kind == RAW:
            if c.rule not in PEER_RULES:
                # not a production default: only on its own record, which must be clean, and
                # only where the node's pods have not changed (its per-pod statistics know
                # nothing of arrivals, which miss it in runs: `choice_ready`)
                return (len(c.record) >= self.h and c.violations <= self.alpha * len(c.record)
                        and self.stable(s))
            return self.within_budget(c.violations, len(c.record))
        # and once a horizon of its calibrated predictions has elapsed: the choice compares
        # averages of realised predictions, which one point does not make
        return len(c.record) >= self.h

    def choice_margin(self) -> float:
        """The conformal margin on the chosen calibrated prediction (never below 1); before it
        has its minimum points, the largest of its ratios so far (`choice_ready` says when
        that may be used)."""
        e = self.ensemble
        if not math.isfinite(e.value):
            return max(1.0, e.sorted[-1]) if e.sorted else 1.0
        return max(1.0, e.value)

    def stable(self, s: int) -> bool:
        """No pod arrived on the node over the calibration window up to ``s``."""
        return self.last_arrival < 0 or self.last_arrival <= s - self.cal

    def choice_ready(self, s: int) -> bool:
        """May a calibrated candidate be the choice at ``s``? Never before the node's history
        spans the traffic's period (`Tidal.period_seconds`, a day): a margin learnt on half a day
        has not seen the day's peak hours (on one-day synthetic traces with a 2 h warm-up, the
        calibrated rules, used from about 14 h, missed at 5–11 % of their points: 1.5–2.1 % of
        the node's day, 13 of 40 nodes over 3 %). Then once the choice among them has its
        own conformal margin (its minimum points of record, used or not: about 12 h after the
        first rule is calibrated); before that only on a node whose pods have not changed over
        the window, from one horizon of that record (its margin then the largest ratio so
        far). Where pods come and go, a margin learnt on a dozen horizons of other pods misses
        in runs: on the synthetic ``jobs`` shape the calibrated rules, used from about 13 h,
        missed at 2.8 % of their points and put 3 of 40 seeds over the 3 % worst-node bar in
        one run each, where Volcano's rule, which they replaced, missed at 0.01 %."""
        if s + 1 < self.period:
            return False
        e = self.ensemble
        return math.isfinite(e.value) or (len(e) >= self.h and self.stable(s))

    def choose(self, s: int) -> tuple[_Candidate | None, _Candidate | None, bool]:
        """The usable candidate whose predictions were lowest on average over the window (the
        span of the newest usable one, the same for all), as they would be used: a calibrated
        candidate's times the choice's margin, a peer's rule as it is (without that, a choice
        margin learnt on a bad first day would keep a calibrated rule ahead of a peer's rule
        that never missed, and above it); the calibrated candidate that choice would be among
        the calibrated ones (the choice margin's calibration); and whether a calibrated
        candidate may be the choice yet (`choice_ready`)."""
        best = shadow = None
        margin = self.choice_margin()
        ready = self.choice_ready(s)
        usable = [(i, c) for i, c in enumerate(self.candidates) if self.usable(c, s)]
        # over the same span for all: the newest usable one's (before 2026-12-05 each over its
        # own, so a candidate calibrated at night was compared on its nights with a peer's
        # average over days and nights)
        n = min((c.available() for _, c in usable), default=0)
        for i, c in usable:
            calibrated = c.kind in CALIBRATED_KINDS
            cost = c.mean_cost(n)
            key = (cost * margin if calibrated else cost, i)
            if calibrated and (shadow is None or key < shadow[0]):
                shadow = (key, c)
            if (ready or not calibrated) and (best is None or key < best[0]):
                best = (key, c)
        return (None if best is None else best[1]), (None if shadow is None else shadow[1]), ready

    def fall_back(self) -> _Candidate:
        """No candidate may be used: the peer's rule with the lowest realised violation rate
        (ties: the higher prediction). Holding the whole request back would be no answer:
        what made both peers miss before any rule is calibrated is pods arriving, and an
        arrival exceeds today's request too."""
        return min((c for c in self.candidates if c.rule in PEER_RULES and c.kind == RAW),
                   key=lambda c: (c.violations / max(1, len(c.record)), -c.at[-1]))
