# SPDX-License-Identifier: Apache-2.0
"""bench/predict_agent_window.py: the agent's window against the evaluator on one synthetic trace."""
from __future__ import annotations

import sys
from pathlib import Path

from tidal.predict.series import write_long_csv
from tidal.predict.synthetic import daily_cycle, trace_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import predict_agent_window  # noqa: E402


def _write(trace, path: Path) -> str:
    with open(path, "w") as out:
        write_long_csv(trace_rows(trace), out)
    return str(path)


def test_a_trace_longer_than_the_window_is_scored_both_ways(tmp_path):
    path = _write(daily_cycle(0, days=14.2, pods=3), tmp_path / "cycle.csv")
    result = predict_agent_window.score(path, every=6)
    assert result is not None and result["points"] >= 3 and result["window_steps"] == 14 * 288 + 12
    for side in ("evaluator", "agent"):
        assert 0.0 < result[side]["reclaimed"] < 1.0 and 0.0 <= result[side]["violation_60m"] <= 1.0


def test_a_trace_shorter_than_the_window_is_skipped(tmp_path):
    assert predict_agent_window.score(_write(daily_cycle(0, days=2, pods=2), tmp_path / "short.csv"), every=6) is None
