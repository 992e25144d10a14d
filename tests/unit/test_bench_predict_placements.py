# SPDX-License-Identifier: Apache-2.0
"""bench/predict_placements.py: seeds, the summary's counts, and one placement of the shared
Azure trace scored as `tidal predict evaluate --trace DIR` scores the same folder."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tidal.predict import shared_traces_dir
from tidal.predict.cli import main as predict_main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import predict_placements  # noqa: E402

SHARED = shared_traces_dir() or Path("/nonexistent")


@pytest.mark.parametrize(("text", "expected"), [("1-3", [1, 2, 3]), ("4", [4]), ("1,5-6", [1, 5, 6])])
def test_seeds(text, expected):
    assert predict_placements.seeds(text) == expected


def _row(variant, met, within=True, gap=0.5, peer="volcano"):
    return {"variant": variant, "warmup": "86400s", "met": met, "within_budget": within,
            "reclaim_met": met or not within, "gap_closed": gap,
            "tidal": {"reclaimed": 0.6, "violation_60m": 0.005, "worst_violation_60m": 0.007},
            "best_peer": {"name": peer}}


def test_the_summary_counts_placements_and_what_each_missed():
    rows = [_row("strict", True), _row("strict", False, peer="rc", gap=-0.2),
            _row("strict", False, within=False), _row("lenient", True, gap=0.8)]
    s = predict_placements.summarise(rows)
    strict = s["strict"]["86400s"]
    assert (strict["placements"], strict["met"], strict["missed_reclaim"], strict["missed_violation"]) == (3, 1, 1, 1)
    assert strict["best_peer_counts"] == {"volcano": 2, "rc": 1} and strict["gap_closed_min"] == -0.2
    assert s["lenient"]["86400s"]["met"] == 1


@pytest.mark.skipif(not (SHARED / "azure2019_20vms_cpu_5min.csv.gz").exists(),
                    reason="the shared Azure trace is not on this machine")
def test_a_placement_is_scored_as_the_cli_scores_its_folder(tmp_path, capsys):
    assert predict_placements.main(["--traces", str(SHARED), "--variant", "strict", "--seeds", "3",
                                    "--warmup", "1d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row, summary = json.loads(lines[0]), json.loads(lines[-1])["summary"]
    assert row["nodes"] == 2 and summary["strict"]["86400s"]["placements"] == 1
    # the same placement through the CLI: convert to a folder, evaluate it pooled
    out = tmp_path / "nodes"
    assert predict_main(["convert-azure", "--cpu", str(SHARED / "azure2019_20vms_cpu_5min.csv.gz"),
                         "--meta", str(SHARED / "azure2019_20vms_meta.csv"), "--vms-per-node", "10",
                         "--placement-seed", "3", "-o", str(out)]) == 0
    capsys.readouterr()
    assert predict_main(["evaluate", "--trace", str(out), "--json"]) == 0
    pooled = json.loads(capsys.readouterr().out)["pooled"]
    tidal = next(r for r in pooled["predictors"] if r["name"] == "tidal")
    assert row["tidal"]["reclaimed"] == pytest.approx(tidal["reclaimed"], abs=1e-5)
    assert (row["best_peer"] or {}).get("name") == pooled["baseline"]
    assert row["met"] == (tidal["violation_60m"] <= 0.01 and tidal["worst_violation_60m"] <= 0.03
                          and (pooled["baseline"] is None or row["reclaim_met"]))
