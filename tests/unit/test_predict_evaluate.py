"""tidal.predict.evaluate: the benchmark's metrics, checked on series small enough to do by hand."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

import pytest
from tidal.predict.evaluate import evaluate, pool, window_steps
from tidal.predict.predictors import NSigma, Oracle, Predictor, Tidal, realisable
from tidal.predict.series import NodeHistory, Trace


def one_pod(usage: list[float], request: float = 10.0, step: int = 300, source: str = "") -> Trace:
    return Trace(step=step, start=0, series_ids=("p",), usage=[list(usage)],
                 request=[[request] * len(usage)], source=source)


@dataclass(frozen=True)
class Constant(Predictor):
    name: ClassVar[str] = "constant"
    value: float = 5.0

    def predict(self, history: NodeHistory) -> float:
        return self.value


@dataclass(frozen=True)
class Current(Predictor):
    name: ClassVar[str] = "current"

    def predict(self, history: NodeHistory) -> float:
        return history.current_usage


@dataclass(frozen=True)
class Broken(Predictor):
    name: ClassVar[str] = "broken"

    def predict(self, history: NodeHistory) -> float:
        return float("nan")


def test_metrics_on_a_ramp_match_the_hand_computation() -> None:
    # usage at step i is i cores, requests 10, no warm-up, 10-minute horizon (2 steps).
    # The 60-minute window needs 12 steps ahead, so decisions are i = 0..7 of 20 steps.
    ev = evaluate(one_pod([float(i) for i in range(20)]), [Constant(5.0), Current()],
                  horizon_seconds=600, warmup_seconds=0)
    assert ev.decisions == 8
    c = ev.result("constant")
    assert c.reclaimed == pytest.approx(0.5)  # (10 − 5) / 10 at every decision
    assert c.violation_5m == pytest.approx(3 / 8)  # i + 1 > 5 for i = 5, 6, 7
    assert c.violation == pytest.approx(4 / 8)  # i + 2 > 5 for i = 4..7
    assert c.violation_60m == pytest.approx(1.0)  # i + 12 > 5 always
    assert c.overshoot == pytest.approx((1 + 2 + 3 + 4) / (8 * 10))
    assert c.mean_prediction == pytest.approx(0.5)
    cur = ev.result("current")  # P(t) = u(t) = i: always below the next step
    assert cur.violation_5m == 1.0
    assert cur.reclaimed == pytest.approx(sum(10 - i for i in range(8)) / 80)
    assert cur.overshoot == pytest.approx(2 * 8 / 80)


def test_warmup_skips_decision_points_but_not_the_past() -> None:
    usage = [1.0] * 30 + [2.0] * 30
    ev = evaluate(one_pod(usage), [NSigma(n=0.0, window_seconds=300 * 40)], warmup_seconds=300 * 40)
    assert ev.decisions == 60 - 40 - 12
    # the 40-sample window at the first decision already holds 29 ones and 11 twos:
    # the predictor saw the samples before the warm-up ended.
    assert ev.result("nsigma").violation_5m == 1.0


def test_reclaimed_is_a_ratio_of_sums_when_requests_change() -> None:
    t2 = Trace(step=300, start=0, series_ids=("p",), usage=[[0.0] * 15],
               request=[[10.0, 30.0, 10.0] + [10.0] * 12])
    ev2 = evaluate(t2, [Constant(5.0)], warmup_seconds=0)
    assert ev2.decisions == 3
    assert ev2.result("constant").reclaimed == pytest.approx((5 + 25 + 5) / (10 + 30 + 10))


def test_the_oracle_has_no_violations_and_reclaims_the_most_of_any_safe_predictor() -> None:
    rng = random.Random(1)
    rows = [[rng.random() * 2, rng.random() * 5] for _ in range(3 * 288)]
    t = Trace(step=300, start=0, series_ids=("a", "b"), usage=[[r[0] for r in rows], [r[1] for r in rows]],
              request=[[4.0] * len(rows), [8.0] * len(rows)])
    ev = evaluate(t, [Oracle.for_trace(t, 3600), *realisable(3600)])
    oracle = ev.result("oracle")
    assert oracle.violation_5m == oracle.violation_60m == oracle.violation == oracle.overshoot == 0.0
    for r in ev.results:
        if r.violation_60m == 0.0:
            assert r.reclaimed <= oracle.reclaimed + 1e-12
    assert sum(r.default for r in ev.results) == 1 and ev.result("tidal").default


@pytest.mark.parametrize(
    ("step", "seconds", "expected"),
    [(300, 300, 1), (300, 3600, 12), (60, 300, 5), (600, 300, 1), (3600, 3600, 1)],
)
def test_window_holds_whole_steps_and_at_least_one(step: int, seconds: int, expected: int) -> None:
    assert window_steps(seconds, step) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"horizon_seconds": 450}, "must be a positive multiple of the trace's 300-second step"),
        ({"warmup_seconds": 86400}, "trace too short: 40 steps of 300 s"),
    ],
)
def test_impossible_evaluations_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate(one_pod([1.0] * 40), [Constant()], **kwargs)


def test_a_nan_prediction_is_reported_with_the_predictor_and_time() -> None:
    with pytest.raises(ValueError, match=r"predictor 'broken' returned nan at t=0"):
        evaluate(one_pod([1.0] * 40), [Broken()], warmup_seconds=0)


def test_duplicate_predictor_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        evaluate(one_pod([1.0] * 40), [Tidal(), Tidal()], warmup_seconds=0)


# -- pooled over nodes (the pooling arithmetic itself: test_predict_pool.py) ---------------------
def test_pool_of_evaluations_matches_the_sums_over_both_nodes() -> None:
    # node a: 8 decisions (20 steps, no warm-up), requests 10, usage 1; node b: 18, requests 20
    a = evaluate(one_pod([1.0] * 20, 10.0, source="a"), [Constant(5.0), Current()], warmup_seconds=0)
    b = evaluate(one_pod([float(i % 10) for i in range(30)], 20.0, source="b"), [Constant(5.0), Current()],
                 warmup_seconds=0)
    assert (a.decisions, b.decisions) == (8, 18)
    p = pool([a, b])
    c = p.result("constant")
    assert c.reclaimed == pytest.approx((8 * 5 + 18 * 15) / (8 * 10 + 18 * 20))
    assert c.violation_60m == pytest.approx((0 * 8 + 1.0 * 18) / 26)  # b peaks at 9 > 5 in 1 h
    assert c.worst_violation_60m == 1.0 and c.worst_node_60m == "b"
    assert p.decisions == 26 and p.nodes == 2 and p.traces == ["a", "b"]
    assert p.mean_request == pytest.approx((10 * 8 + 20 * 18) / 26)
    assert p.baseline is None and p.note and "no peer (constant, current)" in p.note
    doc = p.to_json()
    assert doc["budget"] == 0.01 and doc["worst_node_budget"] == pytest.approx(0.03)
    assert [e["name"] for e in doc["predictors"]] == ["constant", "current"]


def test_pool_refuses_mixed_horizons() -> None:
    a = evaluate(one_pod([1.0] * 30, 10.0, source="a"), [Constant()], warmup_seconds=0)
    b = evaluate(one_pod([1.0] * 30, 10.0, source="b"), [Constant()], warmup_seconds=0, horizon_seconds=600)
    with pytest.raises(ValueError, match="different horizons"):
        pool([a, b])
