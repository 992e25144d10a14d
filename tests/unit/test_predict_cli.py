"""``tidal predict``: durations, the JSON shape, errors, converters, and the Azure benchmark."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest
from tidal.cli import main as tidal_main
from tidal.predict import shared_traces_dir
from tidal.predict.cli import main, parse_duration
from tidal.predict.predictors import NAMES
from tidal.predict.series import read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
SHARED = shared_traces_dir() or Path("/nonexistent")
AZURE_CPU = SHARED / "azure2019_20vms_cpu_5min.csv.gz"
AZURE_META = SHARED / "azure2019_20vms_meta.csv"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60m", 3600), ("5m", 300), ("3600s", 3600), ("1h", 3600), ("1d", 86400), ("90", 90), ("1.5h", 5400), ("0", 0)],
)
def test_durations_accept_units(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "5x", "0.5s", "-5m", ""])
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """Two days of three pods at 5-minute steps, with a daily swing and noise."""
    rng = random.Random(42)
    p = tmp_path / "small.csv"
    lines = ["timestamp,series_id,usage,request"]
    for i in range(2 * 288 + 20):
        for j, req in enumerate((2, 4, 8)):
            base = req * (0.2 + 0.1 * ((i // 72) % 2))
            lines.append(f"{i * 300},pod{j},{base * (0.5 + rng.random()):.4f},{req}")
    p.write_text("\n".join(lines) + "\n")
    return p


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_json_has_every_predictor_and_exactly_one_default(small_trace, capsys) -> None:
    code, out, _ = run(["evaluate", "--trace", str(small_trace), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    entries = doc["predictors"]
    assert [e["name"] for e in entries] == list(NAMES)
    assert [e["name"] for e in entries if e["default"] is True] == ["tidal"]
    assert all(isinstance(e["default"], bool) for e in entries)
    for e in entries:
        for key in ("reclaimed", "violation_5m", "violation_60m", "overshoot"):
            assert isinstance(e[key], float) and 0.0 <= e[key] <= 1.0, (e["name"], key)
    assert doc["horizon_seconds"] == 3600 and doc["step_seconds"] == 300
    assert doc["decisions"] == 2 * 288 + 20 - 288 - 12


def test_evaluate_goes_through_the_top_level_cli(small_trace, capsys) -> None:
    assert tidal_main(["predict", "evaluate", "--trace", str(small_trace), "--horizon", "5m", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["horizon_seconds"] == 300
    oracle = doc["predictors"][0]
    assert oracle["name"] == "oracle" and oracle["violation_5m"] == 0.0


def test_evaluate_prints_a_table_without_json(small_trace, capsys) -> None:
    code, out, _ = run(["evaluate", "--trace", str(small_trace), "--horizon", "30m"], capsys)
    assert code == 0
    assert "| predictor | reclaimed | violation 5 min | violation 60 min | violation 30 min |" in out
    assert "| **tidal** (default) |" in out
    assert "| oracle | " in out


def test_evaluate_subset_of_predictors(small_trace, capsys) -> None:
    code, out, _ = run(["evaluate", "--trace", str(small_trace), "--json", "--predictors", "oracle,nsigma"], capsys)
    assert code == 0
    assert [e["name"] for e in json.loads(out)["predictors"]] == ["oracle", "nsigma"]
    code, _, err = run(["evaluate", "--trace", str(small_trace), "--predictors", "magic"], capsys)
    assert code == 1 and "unknown predictor(s) magic" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("timestamp,series_id,usage,request\n0,a,1,2\n300,a,x,2\n", "bad.csv:3: column 'usage': not a number: 'x'"),
        ("time,series_id,usage,request\n", "bad.csv:1: header lacks column(s) 'timestamp'"),
    ],
)
def test_evaluate_reports_bad_input_with_file_line_and_column(tmp_path, capsys, content, message) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(content)
    code, out, err = run(["evaluate", "--trace", str(p)], capsys)
    assert code == 1 and out == ""
    assert message in err


@pytest.mark.parametrize(
    "argv",
    [[], ["evaluate"], ["evaluate", "--trace", "x", "--horizon", "soon"], ["frobnicate"]],
)
def test_usage_errors_exit_2(argv, capsys) -> None:
    assert main(argv) == 2


def test_horizon_off_the_step_is_refused(small_trace, capsys) -> None:
    code, _, err = run(["evaluate", "--trace", str(small_trace), "--horizon", "450s"], capsys)
    assert code == 1 and "multiple of the trace's 300-second step" in err


def test_convert_azure_writes_a_readable_trace(tmp_path, capsys) -> None:
    out = tmp_path / "azure.csv"
    code, _, err = run(["convert-azure", "--cpu", str(DATA / "azure_cpu_small.csv"), "--meta",
                        str(DATA / "azure_meta_small.csv"), "--variant", "lenient", "-o", str(out)], capsys)
    assert code == 0 and "wrote 8 readings of 3 VMs (lenient)" in err
    t = read_trace(out)
    assert t.series_ids == ("vmA", "vmB", "vmC") and len(t) == 3


def test_convert_alibaba_writes_a_readable_gzipped_trace(tmp_path, capsys) -> None:
    out = tmp_path / "alibaba.csv.gz"
    code, _, err = run(["convert-alibaba", "--usage", str(DATA / "alibaba_usage_small.csv"), "--meta",
                        str(DATA / "alibaba_meta_small.csv"), "--step", "5m", "-o", str(out)], capsys)
    assert code == 0 and "1 readings without cpu skipped" in err
    t = read_trace(out)
    assert t.step == 300 and t.series_ids == ("m_1", "m_2")


def test_convert_reports_a_missing_file(tmp_path, capsys) -> None:
    code, _, err = run(["convert-azure", "--cpu", str(tmp_path / "none.csv"), "--meta",
                        str(DATA / "azure_meta_small.csv"), "-o", str(tmp_path / "o.csv")], capsys)
    assert code == 1 and "none.csv: cannot read" in err


@pytest.mark.skipif(not AZURE_CPU.exists(), reason="shared Azure 2019 trace not found: set TIDAL_TRACES_DIR")
def test_default_predictor_meets_the_target_on_the_strict_azure_trace(tmp_path, capsys) -> None:
    """README benchmark, strict variant: ≤ 1 % violations at 60 min, ≥ half the gap closed.

    Also checks that the evaluator reproduces the README's reference figures.
    """
    trace = tmp_path / "azure_strict.csv"
    assert main(["convert-azure", "--cpu", str(AZURE_CPU), "--meta", str(AZURE_META),
                 "--variant", "strict", "-o", str(trace)]) == 0
    capsys.readouterr()
    code, out, _ = run(["evaluate", "--trace", str(trace), "--horizon", "60m", "--json"], capsys)
    assert code == 0
    by = {e["name"]: e for e in json.loads(out)["predictors"]}
    # reference figures (traces README): N-sigma n=5 72.7 % / 0.66 %, max(RC, N-sigma) 67.9 % / 0,
    # oracle 80.3 %
    assert by["nsigma"]["reclaimed"] == pytest.approx(0.727, abs=0.001)
    assert by["nsigma"]["violation_60m"] == pytest.approx(0.0066, abs=0.0005)
    assert by["rc-nsigma-max"]["reclaimed"] == pytest.approx(0.679, abs=0.001)
    assert by["rc-nsigma-max"]["violation_60m"] == 0.0
    assert by["oracle"]["reclaimed"] == pytest.approx(0.803, abs=0.001)
    assert by["oracle"]["violation_60m"] == 0.0

    default = [e for e in by.values() if e["default"]]
    assert len(default) == 1
    d = default[0]
    assert d["violation_60m"] <= 0.01
    gap = by["oracle"]["reclaimed"] - by["rc-nsigma-max"]["reclaimed"]
    assert d["reclaimed"] - by["rc-nsigma-max"]["reclaimed"] >= 0.5 * gap
