"""Level shifts up in the default predictor: the CUSUM detector (pure, table-driven) and the guard
it raises (`tidal.predict.predictors.tidal`)."""

from __future__ import annotations

import math
import random

import pytest
from tidal.predict.predictors import Tidal
from tidal.predict.predictors.oracle import future_max
from tidal.predict.predictors.tidal import ShiftDetector
from tidal.predict.series import NodeHistory
from tidal.predict.synthetic import level_shift

STEP = 300
DAY = 86400 // STEP
ALPHA = Tidal().target_rate(STEP)
THRESHOLD = math.log(30 * DAY)  # one budget period of 5-minute steps


def feed(outcomes: str) -> list[tuple[int, int]]:
    """Run a detector on ``outcomes`` ('x' a miss, '.' a clean point): (trial, change point)
    of each alarm."""
    d = ShiftDetector(ALPHA, 0.5, THRESHOLD)
    return [(i, cp) for i, o in enumerate(outcomes) if (cp := d.step(i, o == "x")) is not None]


@pytest.mark.parametrize(
    ("outcomes", "alarms"),
    [
        ("." * 5000, []),  # clean: never
        ("x", []),  # one miss is what the level allows
        ("xx", []),  # two in a row: 2 × ln(p1/p0) ≈ 8.6, below ln(8640) ≈ 9.1
        ("xxx", [(2, 0)]),  # three in a row: an alarm, the excursion began at the first
        ("..x.x.x", [(6, 2)]),  # three among five points: still an alarm, at the third
        ("x" + "." * 8 + "xx", []),  # the first miss has been forgotten by the eighth point
        ("xxx" + "xxx", [(2, 0), (5, 3)]),  # starts afresh after an alarm
        ("x" * 3 + "." * 100 + "x" * 3, [(2, 0), (105, 103)]),
    ],
)
def test_cusum_alarms_on_misses_that_come_faster_than_the_level(outcomes: str, alarms) -> None:
    assert feed(outcomes) == alarms


def test_cusum_on_misses_at_the_level_rarely_alarms() -> None:
    # independent misses at α for ten budget periods: a false alarm is about once a period
    rng = random.Random(1)
    n = 10 * 30 * DAY
    got = feed("".join("x" if rng.random() < ALPHA else "." for _ in range(n)))
    assert len(got) <= 20, len(got)


@pytest.mark.parametrize(
    ("p0", "p1", "threshold", "field"),
    [(0.0, 0.5, 9.0, "p0"), (0.5, 0.5, 9.0, "p1"), (0.01, 1.0, 9.0, "p1"), (0.01, 0.5, 0.0, "threshold")],
)
def test_cusum_rejects_parameters_naming_them(p0: float, p1: float, threshold: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ShiftDetector(p0, p1, threshold)


def test_tidal_rejects_a_shift_miss_rate_outside_the_unit_interval() -> None:
    with pytest.raises(ValueError, match="shift_miss_rate"):
        Tidal(shift_miss_rate=1.0)


def shifted(seed: int, days: int, at: int, factor: float) -> list[list[float]]:
    """Two pods at a noisy level that jumps by ``factor`` at step ``at`` and stays there."""
    rng = random.Random(seed)
    return [[max(0.0, rng.gauss(lv, 0.1 * lv)) for lv in ((0.6, 0.5) if i < at else (0.6 * factor, 0.5 * factor))]
            for i in range(days * DAY)]


def run(rows: list[list[float]], p: Tidal) -> tuple[NodeHistory, list[float], list[dict]]:
    h = NodeHistory(["a", "b"], STEP)
    said, basis = [], []
    for row in rows:
        h.append(row, [4.0, 4.0])
        said.append(p.predict(h))
        basis.append(p.explain(h))
    return h, said, basis


def test_a_level_shift_up_is_detected_guarded_and_explained() -> None:
    at = 2 * DAY + 7
    rows = shifted(3, 4, at, 2.5)
    h, said, basis = run(rows, Tidal())
    # detected within a horizon of the jump (noise may have raised an alarm before: a miss of
    # the first calibrated predictions comes in a run, not alone)
    detected = [i for i in range(at, at + 13) if basis[i].get("shift", {}).get("detectedAt") == i * STEP]
    assert detected, [basis[i]["regime"] for i in range(at, at + 13)]
    first = detected[0]
    b = basis[first]
    assert b["regime"] == "shift-detected"
    assert b["shift"]["detectedAt"] == first * STEP and b["shift"]["changePointAt"] <= first * STEP
    assert "level shift up" in b["reason"]
    if b["form"] == "guard":  # the floor applies: the rules' choice is kept under "choice"
        assert b["rule"] == "recent-peak" and b["margin"] >= 1.0 and b["choice"]["cpuCores"] < b["cpuCores"]
    # the guard lasts as long as a re-calibration takes (the minimum points plus a horizon)
    until = b["shift"]["guardUntil"] // STEP
    assert until == first + math.ceil(1 / ALPHA) - 1 + 12
    assert all(basis[i]["regime"] == "shift-detected" for i in range(first, until + 1)
               if "lastShift" not in basis[i])
    later = basis[until + 1]
    assert later["regime"] != "shift-detected" and later["lastShift"]["detectedAt"] == first * STEP


def test_the_guard_cuts_the_misses_where_levels_shift_for_little_reclaim() -> None:
    # level shifts up and down at random times (seeds not used by the benchmark tables)
    on = off = 0
    free_on = free_off = 0.0
    for seed in range(100, 104):
        t = level_shift(seed, days=3)
        peak = future_max(t.total_usage, 12)
        for p in (Tidal(), Tidal(detect_shifts=False)):
            h = NodeHistory(t.series_ids, t.step)
            misses, free = 0, 0.0
            for i in range(len(t)):
                h.append([u[i] for u in t.usage], [r[i] for r in t.request])
                said = p.predict(h)
                if DAY <= i < len(t) - 12:
                    misses += peak[i] > said
                    free += t.total_request[i] - said
            if p.detect_shifts:
                on, free_on = on + misses, free_on + free
            else:
                off, free_off = off + misses, free_off + free
    assert on < 0.85 * off, (on, off)
    assert free_on > 0.97 * free_off, (free_on, free_off)
