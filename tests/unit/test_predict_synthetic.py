"""The default predictor on synthetic stress traces it was not designed on (`tidal.predict.synthetic`).

Issue 18's bars, per shape over three seeds: mean 60-minute violation ≤ 1 %, worst seed ≤ 3 %,
and on average at least the reclaim of the best peer that stays within the 1 % budget on the
same trace. The shapes where pods arrive all the time (jobs refilled back to back with the
issue's 2-hour warm-up on a one-day trace; pods starting one after another) are the shape of the
held-back trace where the default once lost to the peers: a pod arriving counts as a violation
of the prediction made before it arrived.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from tidal.predict.evaluate import evaluate
from tidal.predict.predictors import DEFAULT, Oracle, realisable
from tidal.predict.series import Trace
from tidal.predict.synthetic import GENERATORS

SEEDS = (0, 1, 2)
#: Level-shift seeds kept out of the design (looked at, not developed on): see predict/README.md
HELD_OUT = tuple(range(3, 15))
#: Seeds first looked at on 2026-12-03, for every shape at once, after the predictor's last
#: change; nothing was changed after (predict/README.md, "Fresh seeds"). A change tuned to make
#: the strict xfails below pass must be judged on seeds nobody has looked at yet.
FRESH = tuple(range(200, 240))
#: Seeds first looked at on 2026-12-06, once, at main 1e08c36 (no predictor change since
#: 2026-12-05): a second fresh set, to tell the misses of ``FRESH`` that recur from those of one
#: set of 40 seeds (predict/README.md, "Fresh seeds").
SECOND_FRESH = tuple(range(1000, 1040))
#: Seeds first looked at on 2026-12-03 (later), once, to validate the change made for the jobs
#: shape on seeds 300-339 (predict/README.md, "Where pods come and go").
VALIDATION = tuple(range(500, 540))
#: One-day traces with a 2-hour warm-up (issue 18's cold-start bar): seeds first looked at on
#: 2026-12-05, once, to validate the wait for a day of history (`Tidal.period_seconds`) chosen
#: on seeds 700-739 (predict/README.md, "One span; a day before a calibrated rule").
ONE_DAY = tuple(range(900, 940))
BUDGET = 0.01


def first_day(trace: Trace) -> Trace:
    """The trace's first day and the horizon after it (the decision points of one day)."""
    n = 86400 // trace.step + 3600 // trace.step
    return replace(trace, usage=[u[:n] for u in trace.usage], request=[r[:n] for r in trace.request])


def scores(shape: str, warmup: int, seeds: tuple[int, ...] | None = None,
           one_day: bool = False) -> list[tuple[float, float, float]]:
    """(default's reclaimed, default's 60-min violation, best in-budget peer's reclaimed) per seed."""
    out = []
    for seed in SEEDS if seeds is None else seeds:
        trace = GENERATORS[shape](seed)
        if one_day:
            trace = first_day(trace)
        ev = evaluate(trace, [Oracle.for_trace(trace, 3600), *realisable(3600)], warmup_seconds=warmup)
        peers = [r.reclaimed for r in ev.results
                 if r.name not in (DEFAULT, Oracle.name) and r.violation_60m <= BUDGET]
        d = ev.result(DEFAULT)
        out.append((d.reclaimed, d.violation_60m, max(peers, default=0.0)))
    return out


def check(rows: list[tuple[float, float, float]]) -> None:
    n = len(rows)
    assert sum(v for _, v, _ in rows) / n <= BUDGET, rows
    assert max(v for _, v, _ in rows) <= 3 * BUDGET, rows
    assert sum(r for r, _, _ in rows) / n >= sum(p for _, _, p in rows) / n, rows


@pytest.mark.parametrize("shape", ["level-shift", "daily-cycle", "rare-spikes"])
def test_default_keeps_the_budget_and_beats_the_peers_on_stress_shapes(shape: str) -> None:
    check(scores(shape, warmup=86400))


@pytest.mark.parametrize("shape,warmup", [
    pytest.param("jobs", 7200, marks=pytest.mark.xfail(strict=True, reason=(
        "issue 18, since the RC peers take a pod's percentile over its own samples (2026-12-06): on seed 1 "
        "rc-nsigma-max stays within the budget (0.79 %) and reclaims 44.6 % against the default's 35.0 % "
        "(Volcano's rule); mean of the 3 seeds 37.2 % against 40.4 %"))),
    ("mid-start", 86400),
])
def test_default_keeps_the_budget_and_beats_the_peers_where_pods_arrive_all_the_time(
        shape: str, warmup: int) -> None:
    check(scores(shape, warmup))


@functools.cache
def held_out_level_shifts() -> tuple[tuple[float, float, float], ...]:
    return tuple(scores("level-shift", 86400, HELD_OUT))


def test_level_shifts_out_of_sample_keep_the_violation_bars() -> None:
    # the shift detector's guard: 1.14 % mean and 2.59 % worst before it
    rows = held_out_level_shifts()
    assert sum(v for _, v, _ in rows) / len(rows) <= BUDGET, rows
    assert max(v for _, v, _ in rows) <= 3 * BUDGET, rows


@pytest.mark.xfail(strict=True, reason="issue 18: on the held-out level-shift seeds the default reclaims "
                   "38.7 % on average against the best in-budget peer's 39.3 %")
def test_level_shifts_out_of_sample_reclaim_at_least_the_best_peer() -> None:
    rows = held_out_level_shifts()
    assert sum(r for r, _, _ in rows) >= sum(p for _, _, p in rows), rows


def _fresh_miss(reason: str):
    return pytest.mark.xfail(strict=True, reason=f"issue 18, on 40 fresh seeds: {reason}")


@pytest.mark.parametrize("shape,warmup", [
    pytest.param("level-shift", 86400, marks=_fresh_miss("worst seed 3.29 % (seed 213) over the 3 % bar")),
    ("daily-cycle", 86400),
    pytest.param("rare-spikes", 86400, marks=_fresh_miss("mean violation 1.01 % over the 1 % bar")),
    pytest.param("jobs", 7200, marks=_fresh_miss(
        "reclaims 37.2 % against the best in-budget peer's 39.3 %, seed by seed (Volcano's rule, which "
        "the default follows on a one-day node where pods come and go, 37.4 %; N-sigma where it "
        "happened to stay within the budget, 10 of 40 seeds); the violation bars hold (next test)")),
    ("mid-start", 86400),
])
def test_default_keeps_the_bars_on_fresh_seeds(shape: str, warmup: int) -> None:
    """Issue 18's three bars on 40 seeds of each shape that nothing was designed or tuned on."""
    check(scores(shape, warmup, FRESH))


@pytest.mark.parametrize("shape,warmup", [
    ("level-shift", 86400),
    ("daily-cycle", 86400),
    ("rare-spikes", 86400),
    pytest.param("jobs", 7200, marks=pytest.mark.xfail(strict=True, reason=(
        "issue 18, on the second 40 fresh seeds: reclaims 37.0 % against the best in-budget peer's 39.0 %, "
        "seed by seed (−1.97 points, s.e. 0.72; 38.4 % and −1.36 before the RC peers' fix of 2026-12-06); "
        "the violation bars hold (0.10 % mean, 1.59 % worst)"))),
    ("mid-start", 86400),
])
def test_default_keeps_the_bars_on_a_second_set_of_fresh_seeds(shape: str, warmup: int) -> None:
    """The three bars on 40 more seeds of each shape, looked at once after the last predictor
    change: the level-shift and rare-spike misses of ``FRESH`` (worst seed 3.29 %, mean 1.003 %) do
    not recur here (2.03 % worst, 0.73 % mean); the jobs shape's reclaim shortfall does."""
    check(scores(shape, warmup, SECOND_FRESH))


@pytest.mark.parametrize("seeds", [FRESH, VALIDATION], ids=["fresh", "validation"])
def test_jobs_keep_the_violation_bars_out_of_sample(seeds: tuple[int, ...]) -> None:
    """Jobs coming and going, one day, 2 h warm-up: before the calibrated rules waited for their
    choice's own record where pods come and go, 1.05 % mean and 4.37 % worst on the fresh seeds
    (7 of 40 over 3 %), 0.64 % and 3.97 % on the validation seeds; 0.05 % / 1.59 % and 0.01 % /
    0.40 % since."""
    rows = scores("jobs", 7200, seeds)
    assert sum(v for _, v, _ in rows) / len(rows) <= BUDGET / 2, rows
    assert max(v for _, v, _ in rows) <= 3 * BUDGET, rows


@functools.cache
def one_day(shape: str) -> tuple[tuple[float, float, float], ...]:
    return tuple(scores(shape, 7200, ONE_DAY, one_day=True))


@pytest.mark.parametrize("shape", [
    "level-shift",
    "daily-cycle",
    pytest.param("rare-spikes", marks=pytest.mark.xfail(strict=True, reason=(
        "issue 18: worst seed 4.55 %, 3 of 40 over 3 %: the warm-up reference row max(RC, N-sigma), "
        "admitted on a horizon of clean record, misses a spike (12 % of its points here)"))),
    pytest.param("mid-start", marks=pytest.mark.xfail(strict=True, reason=(
        "issue 18: 7.31 % mean: every pod's arrival exceeds the prediction made before it; "
        "Volcano's and Koordinator's rules, which the default uses all that day, miss as often"))),
])
def test_one_day_with_two_hours_of_warm_up_keeps_the_violation_bars(shape: str) -> None:
    """A node new to the cluster, scored on its first day (issue 18: "with a 2-hour warm-up on a
    one-day trace: the same bounds"). Before the calibrated rules waited for a day of history,
    on these seeds: level shifts 1.55 % mean and 5.30 % worst, daily cycles 2.10 % and 9.47 %,
    rare spikes 1.49 % and 6.06 % (13, 13 and 12 of 40 seeds over 3 %)."""
    rows = one_day(shape)
    assert sum(v for _, v, _ in rows) / len(rows) <= BUDGET, rows
    assert max(v for _, v, _ in rows) <= 3 * BUDGET, rows


@pytest.mark.xfail(strict=True, reason=(
    "issue 18: on its first day the default reclaims about what Volcano's rule does (level shifts 40.7 %, "
    "daily cycles 42.4 %, rare spikes 52.1 %); the best peer within 1 % seed by seed reclaims 49.4, "
    "55.7 and 53.3 % — N-sigma or RC on the seeds where they stayed within it; over the 40 seeds "
    "each of those misses more than 1 % (predict/README.md)"))
def test_one_day_with_two_hours_of_warm_up_reclaims_at_least_the_best_peer() -> None:
    for shape in ("level-shift", "daily-cycle", "rare-spikes"):
        rows = one_day(shape)
        assert sum(r for r, _, _ in rows) >= sum(p for _, _, p in rows), (shape, rows)


def test_generators_are_deterministic_and_valid() -> None:
    for shape, make in GENERATORS.items():
        a, b = make(7), make(7)
        assert a.usage == b.usage and a.request == b.request, shape
        assert len(a) > 12 and all(len(u) == len(a) for u in a.usage), shape
        assert all(x >= 0 for u in a.usage for x in u), shape


def test_synthesize_writes_a_trace_that_reads_back_the_same(tmp_path) -> None:
    from tidal.predict.cli import main
    from tidal.predict.series import read_trace

    out = tmp_path / "mid.csv"
    assert main(["synthesize", "--shape", "mid-start", "--seed", "3", "-o", str(out)]) == 0
    back, made = read_trace(out), GENERATORS["mid-start"](3)
    # the file starts at its first reading: the steps before any pod started have no row
    skipped = len(made) - len(back)
    assert 0 <= skipped and not any(made.total_request[:skipped])
    assert list(back.total_usage) == pytest.approx(list(made.total_usage[skipped:]))
    assert list(back.total_request) == pytest.approx(list(made.total_request[skipped:]))
    assert main(["synthesize", "--shape", "no-such-shape", "-o", str(out)]) == 2
