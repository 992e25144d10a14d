# SPDX-License-Identifier: Apache-2.0
"""bench/predict_bound.py: the exact quantile regression, the pods' sums, the bound on a
synthetic trace (within the budget, never above the oracle), the CLI's refusals."""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from tidal.predict.series import write_long_csv
from tidal.predict.synthetic import GENERATORS, trace_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import predict_bound  # noqa: E402


def test_the_quantile_regression_finds_a_known_conditional_quantile():
    # y = 1 + 2 x + e, e uniform on [0, 1): the 0.9 quantile of y given x is 1.9 + 2 x
    rng = random.Random(7)
    xs = [rng.uniform(0, 10) for _ in range(2000)]
    x = np.column_stack([np.ones(len(xs)), xs])
    y = np.array([1 + 2 * v + rng.random() for v in xs])
    intercept, slope = predict_bound.quantile_regression(x, y, 0.9)
    assert slope == pytest.approx(2.0, abs=0.02) and intercept == pytest.approx(1.9, abs=0.05)
    assert np.mean(y <= x @ np.array([intercept, slope])) == pytest.approx(0.9, abs=0.01)


@pytest.mark.parametrize("stat, hours, expected", [
    # 1-hour windows of 3 steps (1200 s steps): each pod's maximum within the window, summed; an
    # absent reading (NaN) counts as nothing
    ("max", 1, [1 + 5, 3 + 5, 3 + 5, 3 + 0]),
    # a window longer than the series: the maximum so far
    ("max", 24, [1 + 5, 3 + 5, 3 + 5, 3 + 5]),
    # linear percentiles so far: [1] 1, [1 3] 2.9, [1 2 3] 2.9, [1 1 2 3] 2.85; [5] 5, [0 5] 4.75, [0 0 5] 4.5
    ("p95", 24, [1 + 5, 2.9 + 5, 2.9 + 4.75, 2.85 + 4.5]),
])
def test_pod_sums(stat, hours, expected):
    usage = [[1.0, 3.0, 2.0, 1.0], [5.0, math.nan, 0.0, 0.0]]
    assert list(np.round(predict_bound.pod_sums(usage, 1200, stat, hours), 9)) == pytest.approx(expected)


def test_the_bound_keeps_the_budget_and_stays_below_the_oracle():
    result = predict_bound.bound(GENERATORS["daily-cycle"](0), tau=0.99, horizon_seconds=3600,
                                 warmup_seconds=86400, budget=0.01)
    linear = result["linear_bound"]
    assert linear["violation_60m"] <= 0.01 + 1e-12
    assert 0 < linear["reclaimed"] <= result["oracle"] + 1e-9
    assert set(result["split"]) == {"linear", "families"} and result["split"]["families"]
    assert linear["features"][0] == "constant" and "Σ pods' p95 24h" in linear["features"]


def test_the_cli_prints_a_line_per_trace_and_the_summary(tmp_path, capsys):
    with open(tmp_path / "spikes.csv", "w") as out:
        write_long_csv(trace_rows(GENERATORS["rare-spikes"](1)), out)
    assert predict_bound.main(["--trace", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["traces"][0] == json.loads(lines[0])


@pytest.mark.parametrize("args, message", [
    (["--tau", "1"], "--tau must be between 0 and 1"),
    (["--budget", "2"], "budget '2': a number without % is a fraction below 1"),
    (["--budget", "200%"], "budget '200%' must lie between 0 and 1"),
])
def test_the_cli_refuses_bad_arguments_naming_them(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as refused:
        predict_bound.main(["--trace", str(tmp_path), *args])
    assert refused.value.code == 2 and message in capsys.readouterr().err
