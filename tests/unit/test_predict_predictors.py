"""The predictors on hand-made series: one interface, sane values, the formulas they claim."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from tidal.predict.evaluate import evaluate
from tidal.predict.predictors import (
    DEFAULT,
    NAMES,
    RC,
    Koordinator,
    NSigma,
    Oracle,
    Predictor,
    RCNSigmaMax,
    Tidal,
    Volcano,
    realisable,
)
from tidal.predict.series import NodeHistory, Trace

STEP = 300
DAY = 86400 // STEP


def history(rows: list[list[float]], requests: list[float] | None = None) -> NodeHistory:
    """rows[i] = per-pod usage at step i; requests per pod (default 4 cores each)."""
    k = len(rows[0]) if rows else 3
    req = requests or [4.0] * k
    h = NodeHistory([f"p{j}" for j in range(k)], STEP)
    for row in rows:
        h.append(row, req)
    return h


def trace(rows: list[list[float]], requests: list[float] | None = None) -> Trace:
    k = len(rows[0])
    req = requests or [4.0] * k
    return Trace(
        step=STEP,
        start=0,
        series_ids=tuple(f"p{j}" for j in range(k)),
        usage=[[r[j] for r in rows] for j in range(k)],
        request=[[req[j]] * len(rows) for j in range(k)],
    )


def every(h: NodeHistory) -> dict[str, float]:
    return {p.name: p.predict(h) for p in realisable()}


def test_registry_has_one_default_and_the_documented_names() -> None:
    assert NAMES == ("oracle", "volcano", "koordinator", "nsigma", "rc", "rc-nsigma-max", "tidal")
    assert DEFAULT == "tidal"
    assert all(isinstance(p, Predictor) for p in realisable())


def test_empty_history_predicts_zero() -> None:
    assert set(every(history([])).values()) == {0.0}


CONSTANT = [[2.0, 2.0, 2.0]] * (2 * DAY)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("volcano", 12 - 0.6 * (12 - 6)),  # R − ratio × idle
        ("koordinator", 12 * 0.35 + 6),  # R × (1 − threshold) + usage
        ("nsigma", 6.0),  # no variance
        ("rc", 6.0),  # every pod's p95 is 2
        ("rc-nsigma-max", 6.0),
        ("tidal", 6.0),  # calibrated margin 1: the peak always equalled the level
    ],
)
def test_constant_load_gives_the_formula_value(name: str, expected: float) -> None:
    got = every(history(CONSTANT))[name]
    assert got == pytest.approx(expected)


def test_tidal_reclaims_from_its_first_sample_as_the_better_peer_does() -> None:
    # a node new to the cluster: no elapsed horizon yet, the peers' rules as their systems use them
    for n in (1, 6, 12):
        h = history(CONSTANT[:n])
        peers = min(Volcano().predict(h), Koordinator().predict(h))
        assert Tidal().predict(h) == pytest.approx(peers)
        assert Tidal().predict(h) < h.current_request
        assert Tidal().explain(h)["regime"] == "warming-up"
    # after one elapsed horizon without a miss, the reference row max(RC, N-sigma) as it is
    h = history(CONSTANT[:60])
    explained = Tidal().explain(h)
    assert (explained["regime"], explained["rule"], explained["form"]) == ("warming-up", "rc-nsigma-max", "raw")
    assert explained["reason"].startswith("the reference row rc-nsigma-max (Σ per-pod 95th percentile over "
                                          "24 h, at least mean + 3 σ over 2 h) as it is"), explained
    assert "at none of its 48 points on this node (its own record: within the level" in explained["reason"]
    assert "prior" in explained["reason"] and "clean day's prior" not in explained["reason"]
    assert Tidal().predict(h) == pytest.approx(RCNSigmaMax().predict(h))


def test_tidal_drops_the_reference_row_at_its_first_miss_while_warming_up() -> None:
    h = NodeHistory(["a"], STEP)
    for i in range(60):  # steady, then one jump: rc-nsigma-max misses it, the peers' slack holds
        h.append([1.2 if i == 40 else 0.5], [4.0])
    explained = Tidal().explain(h)
    assert explained["rule"] in ("koordinator", "volcano"), explained


def test_tidal_moves_to_a_calibrated_rule_once_it_has_the_evidence() -> None:
    # 12 h of elapsed horizons (the rank exists), one more horizon of calibrated predictions, a
    # day of history (the online traffic's period) and, on a node whose pods have not changed,
    # one horizon of the choice's own record
    h = history(CONSTANT[: DAY - 1])
    waiting = Tidal().explain(h)
    assert waiting["regime"] == "warming-up" and waiting["calibratedChoice"]["form"] == "all", waiting
    assert ("until the node's history spans the online traffic's period (24 h: 287 of 288 samples)"
            in waiting["reason"]), waiting
    h = history(CONSTANT[:DAY])
    explained = Tidal().explain(h)
    assert explained["regime"] == "calibrated", explained
    assert explained["calibrationPoints"] >= 144
    # constant load: every calibrated rule predicts the load itself
    assert Tidal().predict(h) == pytest.approx(h.current_usage)
    # without a period to wait for, the choice's horizon of record is what remains
    p = Tidal(period_seconds=0)
    waiting = p.explain(history(CONSTANT[: DAY // 2 + 36]))
    assert "until their choice has a horizon of record" in waiting["reason"], waiting
    assert p.explain(history(CONSTANT[: DAY // 2 + 60]))["regime"] == "calibrated"


def test_tidal_waits_a_day_before_a_calibrated_rule_on_a_daily_cycle() -> None:
    # one day of a daily cycle, colocation switched on at night: margins learnt on the first
    # half day have not seen the afternoon's peak
    from tidal.predict.synthetic import GENERATORS
    t = GENERATORS["daily-cycle"](5)  # one of the seeds where the half day's margins miss
    total = [sum(u[i] for u in t.usage) for i in range(DAY + 12)]

    def missed(p: Tidal) -> float:  # the day's 60-minute violation rate after a 2 h warm-up
        h = NodeHistory(t.series_ids, t.step, start=t.start)
        predicted = []
        for i in range(DAY):
            h.append([u[i] for u in t.usage], [r[i] for r in t.request])
            predicted.append(p.predict(h))
        points = range(24, DAY)
        return sum(max(total[s + 1 : s + 13]) > predicted[s] for s in points) / len(points)

    waited, eager = missed(Tidal()), missed(Tidal(period_seconds=0))
    assert waited <= 0.01 < 0.03 < eager, (waited, eager)  # 0 and 5.7 %


def test_tidal_falls_back_on_the_peer_that_missed_least_when_both_missed_before_calibration() -> None:
    h = NodeHistory(["a"], STEP)
    for i in range(40):  # a quiet pod that jumps to its full request every hour: both rules miss
        h.append([4.0 if i % 12 == 11 else 0.2], [4.0])
    explained = Tidal().explain(h)
    assert explained["regime"] == "fallback", explained
    rates = {}
    for name, rule in (("koordinator", Koordinator()), ("volcano", Volcano())):
        past = NodeHistory(["a"], STEP)
        said = []
        for i in range(40):
            past.append([4.0 if i % 12 == 11 else 0.2], [4.0])
            said.append(max(rule.predict(past), past.current_usage))  # never below usage
        usage = [4.0 if i % 12 == 11 else 0.2 for i in range(40)]
        judged = range(40 - 12)
        rates[name] = sum(max(usage[s + 1 : s + 13]) > said[s] for s in judged) / len(judged)
    assert rates["koordinator"] > 0 and rates["volcano"] > 0  # both missed
    now = {"koordinator": Koordinator().predict(h), "volcano": Volcano().predict(h)}
    least = min(rates, key=lambda n: (rates[n], -now[n]))  # ties: the more cautious
    assert explained["rule"] == least, (explained, rates)
    assert explained["cpuCores"] < 4.0


def test_after_a_step_up_window_predictors_follow_the_new_level() -> None:
    rows = [[1.0, 1.0, 1.0]] * DAY + [[3.0, 3.0, 3.0]] * DAY
    got = every(history(rows))
    assert got["nsigma"] == pytest.approx(9.0)  # 2 h window all at the new level
    assert got["rc"] == pytest.approx(9.0)  # more than 5 % of the day at the new level
    assert got["tidal"] >= 9.0  # never below current usage
    assert got["koordinator"] == 12.0  # 0.35 × 12 + 9 is above the requests: clamped


def test_a_spike_widens_nsigma_and_the_oracle_sees_it_coming() -> None:
    rows = [[1.0, 1.0, 1.0]] * 100
    rows[60] = [4.0, 4.0, 4.0]
    t = trace(rows)
    oracle = Oracle.for_trace(t, 3600)
    before = t.history(55)  # decision at index 54: the spike is 6 steps ahead
    assert oracle.predict(before) == 12.0
    assert NSigma().predict(before) == pytest.approx(3.0)
    after = t.history(62)
    assert NSigma().predict(after) > 3.0 + 5 * 0.5  # the spike is in the 2 h window
    assert oracle.predict(t.history(70)) == 3.0


def test_rc_nsigma_max_is_the_max_of_its_parts() -> None:
    rng = random.Random(3)
    h = history([[rng.random() * 4 for _ in range(3)] for _ in range(400)])
    rc, ns = RC().predict(h), NSigma(n=3.0).predict(h)
    assert RCNSigmaMax().predict(h) == max(rc, ns)


def test_volcano_weights_recent_samples_most() -> None:
    # idle R − u over the last 10 samples: 9 at 2 cores idle, newest at 10 idle
    rows = [[10.0]] * 9 + [[2.0]]
    h = history(rows, requests=[12.0])
    weights = [2.0**i for i in range(10)]
    idle = [2.0] * 9 + [10.0]
    smoothed = sum(w * x for w, x in zip(weights, idle)) / sum(weights)
    assert Volcano().predict(h) == pytest.approx(12 - 0.6 * smoothed)


def test_rc_ignores_a_pod_that_left() -> None:
    rows = [[1.0, 3.0]] * 50 + [[1.0, 0.0]] * 10
    h = NodeHistory(["a", "b"], STEP)
    for i, row in enumerate(rows):
        h.append(row, [2.0, 4.0 if i < 50 else 0.0])
    assert RC().predict(h) == pytest.approx(1.0)


PATHOLOGICAL = {
    "all zero": [[0.0, 0.0]] * 300,
    "zero requests, some usage": [[0.5, 0.0]] * 300,
    "huge spike": [[0.1, 0.1]] * 150 + [[1e6, 0.0]] + [[0.1, 0.1]] * 150,
    "alternating": [[0.0, 5.0] if i % 2 else [5.0, 0.0] for i in range(300)],
}


@pytest.mark.parametrize("case", list(PATHOLOGICAL))
@pytest.mark.parametrize("requests", [[0.0, 0.0], [2.0, 2.0]], ids=["zero requests", "requests"])
def test_predictions_are_finite_non_negative_and_bounded(case: str, requests: list[float]) -> None:
    rows = PATHOLOGICAL[case]
    h = NodeHistory(["a", "b"], STEP)
    for row in rows:
        h.append(row, requests)
        if len(h) % 37 == 0 or len(h) == len(rows):
            upper = max(sum(requests), sum(row))
            for name, p in every(h).items():
                assert math.isfinite(p) and 0.0 <= p <= upper, (name, len(h), p)


def test_random_histories_never_give_nan_inf_or_negative() -> None:
    rng = random.Random(11)
    for _ in range(5):
        k = rng.randint(1, 4)
        h = NodeHistory([str(j) for j in range(k)], 60)
        for _ in range(rng.randint(1, 400)):
            req = [rng.choice([0.0, 1.0, 8.0]) for _ in range(k)]
            h.append([rng.choice([0.0, rng.random() * 10]) for _ in range(k)], req)
            for name, p in every(h).items():
                assert math.isfinite(p) and p >= 0.0, (name, p)
                assert p <= max(h.current_request, h.current_usage) + 1e-9, name


def test_tidal_reserves_a_new_pods_idle_request_for_its_first_horizon() -> None:
    h = NodeHistory(["a", "b"], STEP)
    for _ in range(2 * DAY):  # established: the calibrated choice has a margin of its own
        h.append([2.0, 0.0], [4.0, 0.0])
    p = Tidal()
    assert p.predict(h) == pytest.approx(2.0)
    assert p.explain(h)["regime"] == "calibrated"
    h.append([2.0, 1.0], [4.0, 6.0])  # pod b arrives
    assert p.predict(h) >= 2.0 + 6.0 - 1e-9
    for _ in range(30):  # longer than the horizon: b is established
        h.append([2.0, 1.0], [4.0, 6.0])
    assert p.predict(h) < 2.0 + 6.0
    assert p.predict(h) >= 3.0 - 1e-9


def test_tidal_waits_with_calibrated_rules_where_pods_come_and_go_until_its_choice_has_a_record() -> None:
    # pod b comes and goes every 3 h: a margin learnt on a dozen horizons of other pods misses in
    # runs, so the calibrated rules wait for the choice's own margin (its minimum points of
    # record, about 12 h after they are calibrated); meanwhile the peers' rules as their systems
    # use them, without the young pods' floor (their own record, arrivals included, judges them)
    h = NodeHistory(["a", "b"], STEP)
    p = Tidal()
    regimes = []
    for i in range(DAY + DAY // 2):
        b = (i // 36) % 2 == 1
        h.append([2.0, 1.0 if b else 0.0], [4.0, 2.0 if b else 0.0])
        if i == DAY + 12:  # where a node whose pods had not changed would be calibrated
            explained = p.explain(h)
            assert explained["regime"] == "warming-up", explained
            assert "because pods arrived on the node within the calibration window" in explained["reason"]
            waiting = explained["calibratedChoice"]
            assert waiting["choiceRecordPoints"] < waiting["choiceRecordNeeded"] == 144, waiting
            assert waiting["lastArrivalAt"] is not None
            peer = {"volcano": Volcano(), "koordinator": Koordinator()}[explained["rule"]]
            assert p.predict(h) == pytest.approx(max(peer.predict(h), h.current_usage))
            assert "youngPodsIdleRequestCores" not in explained
        regimes.append(p.explain(h)["regime"] if i % 12 == 0 else None)
    assert "calibrated" in regimes[DAY:], regimes  # within the second day


@pytest.mark.parametrize("peer_history,calibrated_history,chosen", [
    # the peer's rule lower than the calibrated rule over the calibrated rule's span (the night
    # it was calibrated in), higher over its own fortnight of days: compared on the same span
    ([10.0] * 90 + [2.0] * 10, [3.0] * 10, "volcano"),
    ([10.0] * 90 + [4.0] * 10, [3.0] * 10, "nsigma/all"),
    # one as young as the other: their whole records
    ([2.0] * 10, [3.0] * 10, "volcano"),
])
def test_tidal_chooses_by_averages_over_the_same_span(
        peer_history: list[float], calibrated_history: list[float], chosen: str) -> None:
    from tidal.predict.predictors.tidal import ALL, RAW, _Candidate, _Engine

    engine = _Engine.__new__(_Engine)  # only what `choose` reads
    peer, calibrated = _Candidate("volcano", RAW, 4032), _Candidate("nsigma", ALL, 4032)
    for c, values in ((peer, peer_history), (calibrated, calibrated_history)):
        for v in values:
            c.push(v)
    engine.candidates = [peer, calibrated]
    engine.usable = lambda c, s: True
    engine.choice_margin = lambda: 1.0
    engine.choice_ready = lambda s: True
    best, shadow, ready = engine.choose(0)
    assert (best.name, shadow.name, ready) == (chosen, "nsigma/all", True)


def test_tidal_is_a_pure_function_of_the_history() -> None:
    rng = random.Random(5)
    rows = [[rng.random() * 2, rng.random() * (1 + (i // 100) % 3)] for i in range(900)]
    grown = NodeHistory(["a", "b"], STEP)
    p = Tidal()
    for i, row in enumerate(rows):
        grown.append(row, [4.0, 4.0])
        if i in (300, 599, 899):
            fresh = NodeHistory(["a", "b"], STEP)
            for r in rows[: i + 1]:
                fresh.append(r, [4.0, 4.0])
            assert p.predict(fresh) == pytest.approx(p.predict(grown), rel=1e-12)


def test_tidal_target_rate_leaves_a_standard_deviation_of_headroom() -> None:
    p = Tidal()
    alpha = p.target_rate(STEP)
    h, n = 12, 30 * DAY
    assert alpha + math.sqrt(alpha * h / n) == pytest.approx(p.budget)
    assert 0.0068 < alpha < 0.0070
    with pytest.raises(ValueError):
        Tidal(budget=0.0)


def test_tidal_violation_rate_on_exchangeable_noise_stays_near_its_budget() -> None:
    # Heavy-tailed i.i.d. usage: the conformal margin should keep the realised rate near the
    # budget where fixed-margin predictors do not. Overlapping horizons make violations come in
    # runs, so a single run's rate is noisy (and early calibration sets are small): the check is
    # on the mean of four independent 20-day runs, with the bias measured in the design notes.
    rates, nsigma3 = [], []
    for seed in range(4):
        rng = random.Random(seed)
        rows = [[rng.lognormvariate(0, 0.5) for _ in range(4)] for _ in range(20 * DAY)]
        t = trace(rows)
        ev = evaluate(t, [Tidal(), NSigma(n=3.0)])
        rates.append(ev.result("tidal").violation_60m)
        nsigma3.append(ev.result("nsigma").violation_60m)
        assert ev.result("tidal").reclaimed > 0.2
    assert sum(rates) / len(rates) <= 1.5 * Tidal().budget
    assert sum(rates) < sum(nsigma3) / 2


def test_tidal_explains_the_headroom_form_when_it_is_the_choice() -> None:
    # a daily cycle (synthetic, seed 0): by step 209 the usage-plus-a-share-of-the-requests form
    # has the lowest predictions of the usable candidates
    from tidal.predict.synthetic import GENERATORS
    trace = GENERATORS["daily-cycle"](0)
    h = NodeHistory(trace.series_ids, trace.step, start=trace.start)
    for i in range(210):
        h.append([u[i] for u in trace.usage], [r[i] for r in trace.request])
    explained = Tidal(period_seconds=0).explain(h)  # calibrated before a day has passed
    assert (explained["regime"], explained["rule"], explained["form"]) == ("calibrated", "requests", "headroom")
    assert explained["baseCores"] == pytest.approx(h.current_request)
    assert "Koordinator's rule with its threshold calibrated on this node" in explained["reason"]
    share = explained["margin"]
    assert 0 <= share < 1
    # P = (usage now + share × requests) × the choice's own margin, never below the usage now
    expected = (h.current_usage + share * h.current_request) * explained.get("choiceMargin", 1.0)
    assert explained["cpuCores"] == pytest.approx(min(expected, h.current_request), abs=1e-3)


def test_tidal_warms_up_again_after_a_quiet_fortnight() -> None:
    """Online pods for two days, none for over 14 days (every calibration window empties), then
    another pod: the predictor is warming up again, on the peers' and the reference row's rules,
    and still predicts at every step (it raised IndexError: the reference row's windows, dropped
    once calibrated, were not rebuilt)."""
    rng = random.Random(0)
    n = 19 * DAY
    a = [rng.uniform(0.5, 1.5) if i < 2 * DAY else 0.0 for i in range(n)]
    b = [rng.uniform(0.5, 1.5) if i >= 17 * DAY else 0.0 for i in range(n)]
    trace = Trace(step=STEP, start=0, series_ids=("a", "b"), usage=[a, b],
                  request=[[2.0 if x > 0 else 0.0 for x in a], [2.0 if x > 0 else 0.0 for x in b]])
    result = evaluate(trace, [Tidal()], warmup_seconds=86400).results[0]
    assert 0.0 < result.reclaimed < 1.0
    assert Tidal().explain(trace.history(17 * DAY + 6))["regime"] in ("warming-up", "fallback")  # b's first 30 min
    assert Tidal().explain(trace.history())["regime"] == "calibrated"  # and calibrated again since


@pytest.mark.parametrize("name", ["level-shift", "daily-cycle", "rare-spikes", "jobs", "mid-start"])
def test_tidal_explains_every_number_of_its_prediction(name) -> None:
    """The basis reproduces its cpuCores: the rule's own prediction (ruleCores), raised to the
    floor (usage now + the young pods' idle requests) or capped at the requests when one of them
    decided (``bound``, named in the reason), times the choice's margin. Before, a floor that
    decided was nowhere: "koordinator × 0.715" next to a number that was the usage + arrivals."""
    from tidal.predict.synthetic import GENERATORS
    trace = GENERATORS[name](0)
    h = NodeHistory(trace.series_ids, trace.step, start=trace.start)
    bounds = set()
    for i in range(min(len(trace.usage[0]), 3 * DAY)):
        h.append([u[i] for u in trace.usage], [r[i] for r in trace.request])
        if i % 23:
            continue
        e = Tidal().explain(h)
        if "ruleCores" not in e or e["regime"] == "shift-detected":
            continue  # no history yet; or the shift guard decided (explained under `choice`)
        floor = e["usageNowCores"] + e.get("youngPodsIdleRequestCores", 0.0)
        upper = max(h.current_request, e["usageNowCores"])
        chosen = min(upper, max(e["ruleCores"], floor))
        assert e["cpuCores"] == pytest.approx(min(upper, chosen * e.get("choiceMargin", 1.0)), abs=2e-3), (i, e)
        bound = e.get("bound")
        bounds.add(bound)
        assert bound == ("floor" if floor > e["ruleCores"] + 1e-3 else bound)
        if bound == "floor":
            assert "raised to its floor, the usage now" in e["reason"], e["reason"]
        elif bound == "requests":
            assert "capped at the requests" in e["reason"], e["reason"]
    print(f"\n{name}: bounds seen {sorted(map(str, bounds))}")


def test_rc_takes_a_new_pods_percentile_over_its_own_samples() -> None:
    """Found by fuzzing (2026-12-06): the samples before a pod arrived counted as usage 0 in its
    24 h percentile, so a pod that arrived at 7 of 8 cores was predicted at 0 for 72 minutes."""
    h = NodeHistory(["steady", "new"], STEP)
    for i in range(432):
        h.append([1.0, 0.0], [2.0, 0.0])
    for i in range(3):
        h.append([1.0, 7.0], [2.0, 8.0])
    assert RC().predict(h) == pytest.approx(1.0 + 7.0)
    assert RCNSigmaMax().predict(h) >= 8.0
    # the same as a recomputation over the pod's own samples, as it comes and goes
    rng = random.Random(5)
    h = NodeHistory(["a", "b"], STEP)
    present = []
    for i in range(600):
        on = (i // 97) % 2 == 0
        u = rng.random() * 3 if on else 0.0
        h.append([1.0 + rng.random(), u], [2.0, 4.0 if on else 0.0])
        present.append(u if on else None)
        if on and i % 13 == 0:
            n = h.steps(24 * 3600)
            mine = sorted(x for x in present[-n:] if x is not None)
            a = statistics.quantiles(h.usage(0)[-n:], n=100, method="inclusive")[94] if len(h) > 1 else h.usage(0)[-1]
            b = statistics.quantiles(mine, n=100, method="inclusive")[94] if len(mine) > 1 else mine[0]
            assert RC().predict(h) == pytest.approx(min(a + b, 6.0)), i
