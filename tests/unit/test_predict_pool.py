"""tidal.predict.evaluate: pooling over nodes, the violation budget and the gap-closed baseline.

Hand-made `PredictorResult` lists, so nothing here depends on any predictor's numbers.
"""

from __future__ import annotations

import pytest
from tidal.predict.evaluate import (
    PredictorResult,
    apply_budget,
    decision_range,
    pool_results,
)


def res(name: str, reclaimed: float, v60: float = 0.0, *, worst60: float | None = None,
        v5: float = 0.0, d: int = 100, req: float = 1000.0, default: bool = False,
        overshoot: float = 0.0) -> PredictorResult:
    return PredictorResult(
        name=name, default=default, reclaimed=reclaimed, violation_5m=v5, violation_60m=v60,
        violation=v60, overshoot=overshoot, mean_prediction=1 - reclaimed, decisions=d,
        request_sum=req, worst_violation_60m=worst60,
    )


# -- pooling ------------------------------------------------------------------------------------


def test_pooled_reclaimed_is_a_ratio_of_sums_and_violations_are_decision_weighted() -> None:
    # node a: 100 decisions, Σ requests 1000; node b: 300 decisions, Σ requests 9000
    a = [res("oracle", 0.8, d=100, req=1000.0), res("x", 0.5, 0.02, v5=0.01, d=100, req=1000.0,
                                                      overshoot=0.004)]
    b = [res("oracle", 0.6, d=300, req=9000.0), res("x", 0.3, 0.00, v5=0.03, d=300, req=9000.0,
                                                      overshoot=0.001)]
    oracle, x = pool_results([("a", a), ("b", b)])
    assert oracle.reclaimed == pytest.approx((800 + 5400) / 10000)
    assert x.reclaimed == pytest.approx((500 + 2700) / 10000)  # Σ free / Σ requests
    assert x.overshoot == pytest.approx((4 + 9) / 10000)
    assert x.violation_60m == pytest.approx((0.02 * 100 + 0.0 * 300) / 400)
    assert x.violation_5m == pytest.approx((0.01 * 100 + 0.03 * 300) / 400)
    assert (x.worst_violation_60m, x.worst_node_60m) == (0.02, "a")
    assert (x.worst_violation_5m, x.worst_node_5m) == (0.03, "b")
    assert x.decisions == 400 and x.request_sum == 10000.0
    assert x.within_budget is None and x.gap_closed is None  # left to apply_budget


def test_pooling_keeps_the_worst_of_already_pooled_nodes() -> None:
    inner = pool_results([("a", [res("x", 0.5, 0.01)]), ("b", [res("x", 0.5, 0.05)])])
    outer = pool_results([("ab", inner), ("c", [res("x", 0.5, 0.02)])])
    assert outer[0].worst_violation_60m == 0.05 and outer[0].worst_node_60m == "b"


def test_one_node_pools_to_itself() -> None:
    (x,) = pool_results([("a", [res("x", 0.4, 0.03, v5=0.01)])])
    assert (x.reclaimed, x.violation_60m, x.worst_violation_60m, x.violation_5m) == pytest.approx(
        (0.4, 0.03, 0.03, 0.01))


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([], "no nodes"),
        ([("a", [res("x", 0.5)]), ("b", [res("y", 0.5)])], r"b: predictors \['y'\] differ"),
        ([("a", [res("x", 0.5, d=0)])], "no decision points"),
    ],
)
def test_pooling_refuses_what_cannot_be_pooled(nodes, message) -> None:
    with pytest.raises(ValueError, match=message):
        pool_results(nodes)


# -- budget and baseline --------------------------------------------------------------------------

ORACLE = res("oracle", 0.9)

BUDGET_CASES = [
    # (id, results, budget, worst-node budget, expected baseline, expected within-budget names)
    ("highest-reclaim in-budget peer",
     [ORACLE, res("a", 0.5, 0.0), res("b", 0.7, 0.01), res("c", 0.8, 0.02)], 0.01, None,
     "b", {"oracle", "a", "b"}),
    ("default excluded even if best",
     [ORACLE, res("a", 0.5), res("d", 0.85, 0.0, default=True)], 0.01, None,
     "a", {"oracle", "a", "d"}),
    ("worst node over 3 × budget excluded",
     [ORACLE, res("a", 0.5), res("b", 0.7, 0.005, worst60=0.031)], 0.01, None,
     "a", {"oracle", "a"}),
    ("worst node exactly at 3 × budget allowed",
     [ORACLE, res("a", 0.5), res("b", 0.7, 0.005, worst60=0.03)], 0.01, None,
     "b", {"oracle", "a", "b"}),
    ("explicit worst-node budget",
     [ORACLE, res("a", 0.5), res("b", 0.7, 0.005, worst60=0.03)], 0.01, 0.02,
     "a", {"oracle", "a"}),
    ("a larger budget admits more",
     [ORACLE, res("a", 0.5), res("c", 0.8, 0.02)], 0.02, None,
     "c", {"oracle", "a", "c"}),
    ("first of equals",
     [ORACLE, res("a", 0.6), res("b", 0.6)], 0.01, None,
     "a", {"oracle", "a", "b"}),
]


@pytest.mark.parametrize(("results", "budget", "wnb", "baseline", "within"),
                         [c[1:] for c in BUDGET_CASES], ids=[c[0] for c in BUDGET_CASES])
def test_baseline_is_the_best_peer_within_budget(results, budget, wnb, baseline, within) -> None:
    out, got, note = apply_budget(results, budget=budget, worst_node_budget=wnb)
    assert got == baseline and note is None
    assert {r.name for r in out if r.within_budget} == within
    best = next(r for r in out if r.name == baseline)
    for r in out:
        assert r.gap_closed == pytest.approx((r.reclaimed - best.reclaimed) / (0.9 - best.reclaimed))
    assert next(r for r in out if r.name == "oracle").gap_closed == pytest.approx(1.0)
    assert best.gap_closed == 0.0


def test_nobody_within_budget_gives_no_baseline_and_no_gap_closed() -> None:
    results = [ORACLE, res("a", 0.5, 0.02), res("b", 0.7, 0.05), res("d", 0.6, 0.0, default=True)]
    out, baseline, note = apply_budget(results, budget=0.01)
    assert baseline is None
    assert all(r.gap_closed is None for r in out)
    assert note is not None and "no peer (a, b) within budget" in note and "1 %" in note
    # the default is within budget, but is never its own baseline
    assert [r.within_budget for r in out] == [True, False, False, True]


@pytest.mark.parametrize(
    ("results", "baseline", "note"),
    [
        ([res("a", 0.5)], "a", "no oracle"),
        ([res("oracle", 0.5), res("a", 0.5)], "a", "reclaims as much as the oracle"),
        ([res("oracle", 0.9), res("d", 0.5, default=True)], None, "no peer predictor"),
    ],
)
def test_gap_closed_undefined_cases_have_a_note(results, baseline, note) -> None:
    out, got, why = apply_budget(results)
    assert got == baseline and why is not None and note in why
    assert all(r.gap_closed is None for r in out)


def test_the_rc_nsigma_max_figure_is_kept_whatever_its_violations() -> None:
    results = [ORACLE, res("rc-nsigma-max", 0.7, 0.2), res("d", 0.8, default=True)]
    out, baseline, _ = apply_budget(results)
    assert baseline is None
    assert [r.gap_closed_vs_rc_nsigma_max for r in out] == pytest.approx([1.0, 0.0, 0.5])


def test_apply_budget_does_not_modify_its_input() -> None:
    results = [ORACLE, res("a", 0.5)]
    apply_budget(results)
    assert all(r.within_budget is None and r.gap_closed is None for r in results)


# -- the decision range: short warm-ups, too-short traces -------------------------------------


@pytest.mark.parametrize(("warmup", "first"), [(0, 0), (1800, 6), (7200, 24), (400, 2)])
def test_short_warmups_are_first_class(warmup: int, first: int) -> None:
    assert decision_range(60, 300, horizon_seconds=3600, warmup_seconds=warmup) == (first, 60 - 1 - 12)


def test_trace_too_short_names_the_trace_and_the_arithmetic() -> None:
    with pytest.raises(ValueError) as e:
        decision_range(30, 300, horizon_seconds=3600, warmup_seconds=7200, source="n1.csv")
    msg = str(e.value)
    assert msg.startswith("n1.csv: trace too short: 30 steps of 300 s")
    assert "warm-up (2 h, 24 steps)" in msg and "look-ahead (1 h, 12 steps" in msg
    assert "need at least 37 steps" in msg and "shorter warm-up" in msg
    with pytest.raises(ValueError, match=r"need at least 13 steps for one decision point$"):
        decision_range(12, 300, horizon_seconds=3600, warmup_seconds=0)
