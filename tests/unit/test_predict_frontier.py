"""The hindsight frontier (`tidal.predict.frontier`): the pure constant search, table-driven; the
bound it claims, checked against the realisable rules it bounds; the CLI."""
from __future__ import annotations

import json
import math

import pytest
from tidal.predict.cli import main
from tidal.predict.frontier import FAMILIES, frontier, hindsight
from tidal.predict.series import write_long_csv
from tidal.predict.synthetic import GENERATORS, trace_rows


@pytest.mark.parametrize("a, b, peak, requests, upper, budget, expected", [
    # P = k: one of four points may exceed it (25 %): k = 3, the 4 misses; 7 of 10 free each time
    ([0] * 4, [1] * 4, [1, 2, 3, 4], [10] * 4, [10] * 4, 0.25, (3.0, 0.7, 0.25)),
    # no miss allowed: k = 4
    ([0] * 4, [1] * 4, [1, 2, 3, 4], [10] * 4, [10] * 4, 0.0, (4.0, 0.6, 0.0)),
    # fewer points than one budget's worth of misses: the floor of n × budget may miss
    ([0] * 4, [1] * 4, [1, 2, 3, 4], [10] * 4, [10] * 4, 0.2, (4.0, 0.6, 0.0)),
    # an offset: P = a + k b; the scale differs per point
    ([1, 1], [2, 1], [5, 2], [10, 10], [10, 10], 0.0, (2.0, (5 + 7) / 20, 0.0)),
    # nothing to scale (b = 0) and the offset missed: no k keeps the budget
    ([1], [0], [2], [10], [10], 0.0, (None, 0.0, 0.0)),
    # P is clamped to the larger of the requests and the usage now: a peak above it misses anyway
    ([0], [1], [12], [10], [10], 0.0, (12.0, 0.0, 1.0)),
])
def test_hindsight(a, b, peak, requests, upper, budget, expected):
    k, reclaimed, violation = hindsight(a, b, peak, requests, upper, budget)
    assert (k, round(reclaimed, 9), violation) == (expected[0], round(expected[1], 9), expected[2])


def test_hindsight_needs_a_point():
    with pytest.raises(ValueError, match="no decision point"):
        hindsight([], [], [], [], [], 0.01)


@pytest.mark.parametrize("shape", ["daily-cycle", "rare-spikes"])
def test_each_family_bounds_the_realisable_rule_of_its_own(shape):
    """N-sigma (mean + 5 σ over 2 h) and Koordinator's rule (u + 0.35 R) are members of two
    families: where they keep the budget, the family's hindsight row reclaims at least as much."""
    result = frontier(GENERATORS[shape](0), warmup_seconds=86400)
    rows = {r.family: r for r in result.rows}
    assert set(rows) == {f.name for f in FAMILIES}
    members = {"nsigma": "mean+k·σ 2h", "koordinator": "u+k·R"}
    checked = 0
    for predictor, family in members.items():
        r = result.evaluation.result(predictor)
        assert rows[family].violation_60m <= 0.01 + 1e-12
        if r.violation_60m <= 0.01:
            assert rows[family].reclaimed >= r.reclaimed - 1e-9, (predictor, r, rows[family])
            checked += 1
    assert checked, "neither rule kept the budget on this trace: nothing was checked"
    oracle = result.evaluation.result("oracle").reclaimed
    assert all(row.reclaimed <= oracle + 1e-9 for row in result.rows)


def test_cli_frontier_json_and_table(tmp_path, capsys):
    path = tmp_path / "daily.csv"
    with path.open("w") as f:
        write_long_csv(trace_rows(GENERATORS["daily-cycle"](1)), f)
    assert main(["frontier", "--trace", str(path), "--json"]) == 0
    [out] = json.loads(capsys.readouterr().out)
    assert out["trace"].endswith("daily.csv") and out["best_family"] in {f.name for f in FAMILIES}
    assert all(0 <= f["reclaimed"] <= out["oracle"] + 1e-9 for f in out["families"])
    assert math.isclose(out["predictors"]["oracle"]["reclaimed"], out["oracle"])
    assert main(["frontier", "--trace", str(path), "--warmup", "2h"]) == 0
    table = capsys.readouterr().out
    assert "| family | k (in hindsight) |" in table and "Upper bounds" in table


def test_cli_frontier_names_a_bad_trace(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,series_id,usage,request\n0,a,x,1\n")
    assert main(["frontier", "--trace", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.csv:2: column 'usage'" in err
