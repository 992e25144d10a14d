# SPDX-License-Identifier: Apache-2.0
"""make bench-predict-agent-window: the default predictor as the agent runs it, against the evaluator.

`tidal predict evaluate` replays a trace from its first step, so the predictor's calibration at
step t has every step before t. The agent keeps the last `tidal.agent.history.KEEP_STEPS` steps
(14 days and an hour) and rebuilds the predictor on that window at every closed step, so after
14 days its calibration starts at the window's start, not the node's. This bench scores both on
the same decision points (every ``--every``-th step once the window is full, each with a whole
horizon after it): the evaluator's prediction from the whole history, the agent's from a fresh
predictor on the window. Reclaimed (share of the requests) and the 60-minute violation rate.

    python bench/predict_agent_window.py --trace FILE [--trace ...] [--every 6]

One JSON line per trace (traces shorter than the window have no such point and are skipped).
"""
from __future__ import annotations

import argparse
import json
import sys

from tidal.agent.history import KEEP_STEPS
from tidal.predict.evaluate import future_max
from tidal.predict.predictors import Tidal
from tidal.predict.series import NodeHistory, read_trace


def score(path: str, every: int, horizon_seconds: int = 3600) -> dict | None:
    t = read_trace(path)
    keep = KEEP_STEPS * 300 // t.step
    kh = horizon_seconds // t.step
    fm = future_max(t.total_usage, kh)
    points = set(range(keep + kh, len(t) - kh, every))
    if not points:
        return None
    full, predictor, rows = NodeHistory(t.series_ids, t.step, start=t.start), Tidal(), []
    for i in range(len(t)):
        full.append([u[i] for u in t.usage], [r[i] for r in t.request])
        if i in points:
            window = NodeHistory(t.series_ids, t.step, start=t.start + (i - keep + 1) * t.step)
            for k in range(i - keep + 1, i + 1):
                window.append([u[k] for u in t.usage], [r[k] for r in t.request])
            rows.append((t.total_request[i], fm[i], predictor.predict(full), Tidal().predict(window)))
            print(f"{path}: {len(rows)}/{len(points)}", file=sys.stderr, end="\r")
    requests = sum(r[0] for r in rows)
    out = {"trace": path, "points": len(rows), "every_steps": every, "window_steps": keep}
    for name, col in (("evaluator", 2), ("agent", 3)):
        out[name] = {"reclaimed": round(sum(max(0.0, r[0] - r[col]) for r in rows) / requests, 4),
                     "violation_60m": round(sum(1 for r in rows if r[1] > r[col]) / len(rows), 4)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", required=True, help="a converted trace (repeatable)")
    parser.add_argument("--every", type=int, default=6, help="score every this many steps (default 6)")
    args = parser.parse_args()
    for path in args.trace:
        result = score(path, args.every)
        print(json.dumps(result if result else {"trace": path, "skipped": "shorter than the agent's window"}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
