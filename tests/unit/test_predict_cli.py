"""``tidal predict``: durations, the JSON shape, errors, converters, and the Azure benchmark."""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

import pytest
from tidal.cli import main as tidal_main
from tidal.predict import shared_traces_dir
from tidal.predict.cli import main, parse_budget, parse_duration
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
    for empty in (",", ""):  # an empty table with exit 0, before
        code, out, err = run(["evaluate", "--trace", str(small_trace), "--predictors", empty], capsys)
        assert code == 1 and "--predictors names no predictor; known: " in err and out == ""


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


def _azure_to_nodes(tmp_path, capsys, *extra: str):
    return run(["convert-azure", "--cpu", str(DATA / "azure_cpu_small.csv"), "--meta",
                str(DATA / "azure_meta_small.csv"), *extra], capsys)


def test_convert_azure_places_the_vms_on_nodes_a_pooled_evaluation_reads(tmp_path, capsys) -> None:
    out = tmp_path / "nodes"
    code, _, err = _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "-o", str(out))
    assert code == 0 and "wrote 7 readings of 3 VMs (strict) to 2 node traces of up to 2 VMs" in err
    assert sorted(p.name for p in out.iterdir()) == ["node-000.csv", "node-001.csv"]
    first, second = (read_trace(out / f"node-00{i}.csv") for i in (0, 1))
    # in VM id order, the last node takes the rest; every reading kept, none on two nodes
    assert first.series_ids == ("vmA", "vmB") and second.series_ids == ("vmC",)
    whole = tmp_path / "one.csv"
    assert _azure_to_nodes(tmp_path, capsys, "-o", str(whole))[0] == 0
    one = read_trace(whole)
    for t in (first, second):  # a node's trace spans its own VMs' readings (vmC's last is empty)
        for sid, usage in zip(t.series_ids, t.usage):
            assert usage == one.usage[one.series_ids.index(sid)][: len(usage)]
    assert (len(first), len(second)) == (3, 2)


def test_a_placement_seed_shuffles_which_vms_share_a_node(tmp_path, capsys) -> None:
    groups = set()
    for seed in range(8):
        out = tmp_path / f"seed{seed}"
        assert _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "--placement-seed", str(seed),
                               "-o", str(out))[0] == 0
        groups.add(read_trace(out / "node-001.csv").series_ids)
        again = tmp_path / f"again{seed}"
        assert _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "--placement-seed", str(seed),
                               "-o", str(again))[0] == 0
        assert (again / "node-000.csv").read_text() == (out / "node-000.csv").read_text()
    assert len(groups) > 1  # the VM left alone differs between seeds; the same seed, the same nodes


@pytest.mark.parametrize(("extra", "message"), [
    (["--vms-per-node", "0"], "'0' must be a positive whole number"),
    (["--vms-per-node", "two"], "'two' is not a whole number"),
])
def test_vms_per_node_must_be_a_positive_number(tmp_path, capsys, extra, message) -> None:
    code, _, err = _azure_to_nodes(tmp_path, capsys, *extra, "-o", str(tmp_path / "n"))
    assert code == 2 and message in err and not (tmp_path / "n").exists()


def test_nodes_are_not_written_over_existing_traces_or_without_a_node_size(tmp_path, capsys) -> None:
    out = tmp_path / "nodes"
    out.mkdir()
    (out / "mine.csv").write_text("keep me\n")
    code, _, err = _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "-o", str(out))
    assert code == 1 and f"{out} already holds traces (mine.csv)" in err
    assert sorted(p.name for p in out.iterdir()) == ["mine.csv"]
    code, _, err = _azure_to_nodes(tmp_path, capsys, "--placement-seed", "1", "-o", str(tmp_path / "x.csv"))
    assert code == 1 and "give --vms-per-node too" in err and not (tmp_path / "x.csv").exists()
    code, _, err = _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "-o", "-")
    assert code == 1 and "not to stdout: give -o DIR" in err
    (tmp_path / "file").write_text("")
    code, _, err = _azure_to_nodes(tmp_path, capsys, "--vms-per-node", "2", "-o", str(tmp_path / "file"))
    assert code == 1 and "is a file" in err


def test_convert_alibaba_writes_a_readable_gzipped_trace(tmp_path, capsys) -> None:
    out = tmp_path / "alibaba.csv.gz"
    code, _, err = run(["convert-alibaba", "--usage", str(DATA / "alibaba_usage_small.csv"), "--meta",
                        str(DATA / "alibaba_meta_small.csv"), "--step", "5m", "-o", str(out)], capsys)
    assert code == 0 and "1 readings without cpu skipped" in err
    t = read_trace(out)
    assert t.step == 300 and t.series_ids == ("m_1", "m_2")


@pytest.mark.parametrize("command, option, data", [("convert-azure", "--cpu", "azure_cpu_small.csv"),
                                                    ("convert-alibaba", "--usage", "alibaba_usage_small.csv")])
@pytest.mark.parametrize("damage", ["gzip-cut-short", "not-utf-8"])
def test_convert_names_an_input_that_is_not_a_text_csv(tmp_path, capsys, command, option, data, damage) -> None:
    """A truncated download or a binary file: an error naming the file, never a traceback."""
    import gzip
    raw = (DATA / data).read_bytes()
    if damage == "gzip-cut-short":
        bad = tmp_path / f"{data}.gz"
        bad.write_bytes(gzip.compress(raw)[:-12])  # the CRC and size trailer and some data gone
    else:
        bad = tmp_path / data
        bad.write_bytes(b"\xff\xfe" + raw)
    meta = "azure_meta_small.csv" if command == "convert-azure" else "alibaba_meta_small.csv"
    code, _, err = run([command, option, str(bad), "--meta", str(DATA / meta), "-o", str(tmp_path / "o.csv")],
                       capsys)
    assert code == 1 and f"{bad}: not a text CSV file" in err and "Traceback" not in err, err


def test_convert_reports_a_missing_file(tmp_path, capsys) -> None:
    code, _, err = run(["convert-azure", "--cpu", str(tmp_path / "none.csv"), "--meta",
                        str(DATA / "azure_meta_small.csv"), "-o", str(tmp_path / "o.csv")], capsys)
    assert code == 1 and "none.csv: cannot read" in err


@pytest.mark.skipif(not AZURE_CPU.exists(), reason="shared Azure 2019 trace not found: set TIDAL_TRACES_DIR")
def test_default_predictor_meets_the_target_on_the_strict_azure_trace(tmp_path, capsys) -> None:
    """README benchmark, strict variant: ≤ 1 % violations at 60 min and at least the reclaim of
    the best peer within that budget (issue 18's bar; its "half the gap closed" is not met).

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
    peers = [e for e in by.values() if not e["default"] and e["name"] != "oracle"
             and e["violation_60m"] <= 0.01]
    assert d["reclaimed"] >= max(e["reclaimed"] for e in peers)


# -- several traces: one node each, per trace and pooled ------------------------------------------


def write_node(path: Path, seed: int, steps: int = 60, pods: tuple[int, ...] = (2, 4)) -> Path:
    """A tiny node: ``steps`` 5-minute steps of a few pods with noise (evaluated with --warmup 30m)."""
    rng = random.Random(seed)
    lines = ["timestamp,series_id,usage,request"]
    for i in range(steps):
        for j, req in enumerate(pods):
            lines.append(f"{i * 300},pod{j},{req * (0.1 + 0.6 * rng.random()):.4f},{req}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_5_minute_column_of_a_coarser_trace_says_what_it_counts(tmp_path, capsys) -> None:
    """On an hourly trace the 5-minute window is one step (an hour): said under each table."""
    hourly = tmp_path / "hourly.csv"
    fine = write_node(tmp_path / "fine.csv", 1)
    header, *rows = fine.read_text().splitlines()
    hourly.write_text("\n".join([header, *(f"{int(t) * 12},{rest}" for t, rest in (r.split(",", 1) for r in rows))])
                      + "\n")
    code, out, _ = run(["evaluate", "--trace", str(hourly), "--warmup", "6h", "--predictors", "oracle,nsigma"], capsys)
    assert code == 0 and "this trace's step is 3600 s, so the column counts the next step (60 min)" in out, out
    code, out, _ = run(["evaluate", "--trace", str(fine), *FAST, "--predictors", "oracle,nsigma"], capsys)
    assert code == 0 and "the column counts the next step" not in out
    code, out, _ = run(["evaluate", "--trace", str(hourly), "--trace", str(fine), "--warmup", "1h",
                        "--predictors", "oracle,nsigma"], capsys)
    assert code == 0 and "5 min columns: traces with a step of 3600 s count their next step there" in out, out


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    d = tmp_path / "nodes"
    d.mkdir()
    write_node(d / "n2.csv", 2)
    write_node(d / "n1.csv", 1, steps=50)
    with gzip.open(d / "n3.csv.gz", "wt") as f:
        f.write(write_node(tmp_path / "tmp.csv", 3, pods=(8,)).read_text())
    (d / "notes.txt").write_text("not a trace\n")
    return d


FAST = ["--warmup", "30m"]


def test_a_directory_is_evaluated_per_trace_and_pooled(node_dir, capsys) -> None:
    code, out, err = run(["evaluate", "--trace", str(node_dir), *FAST, "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert [Path(t["trace"]).name for t in doc["traces"]] == ["n1.csv", "n2.csv", "n3.csv.gz"]
    assert [t["decisions"] for t in doc["traces"]] == [50 - 6 - 12, 60 - 6 - 12, 60 - 6 - 12]
    assert doc["budget"] == 0.01 and doc["worst_node_budget"] == pytest.approx(0.03)
    pooled = doc["pooled"]
    assert pooled["nodes"] == 3 and pooled["decisions"] == 32 + 42 + 42
    assert doc["baseline"] == pooled["baseline"]
    assert doc["baseline"] is None or doc["baseline"] in {"volcano", "koordinator", "nsigma", "rc", "rc-nsigma-max"}
    assert [e["name"] for e in pooled["predictors"]] == list(NAMES)
    # the pooled numbers follow from the per-trace ones (request sums = mean request × decisions)
    for j, e in enumerate(pooled["predictors"]):
        per = [t["predictors"][j] for t in doc["traces"]]
        d = [t["decisions"] for t in doc["traces"]]
        r = [t["mean_request"] * t["decisions"] for t in doc["traces"]]
        assert e["reclaimed"] == pytest.approx(sum(p["reclaimed"] * w for p, w in zip(per, r)) / sum(r))
        for key in ("violation_5m", "violation_60m"):
            assert e[key] == pytest.approx(sum(p[key] * w for p, w in zip(per, d)) / sum(d))
            assert e["worst_" + key] == max(p[key] for p in per)
        assert isinstance(e["within_budget"], bool)
        assert e["within_budget"] == (e["violation_60m"] <= 0.01 and e["worst_violation_60m"] <= 0.03)
        if doc["baseline"] is None:
            assert e["gap_closed"] is None
    assert pooled["predictors"][0]["name"] == "oracle"
    assert pooled["predictors"][0]["worst_violation_60m"] == 0.0
    lines = [x for x in err.splitlines() if "decision points," in x]
    assert len(lines) == 3 and lines[0].startswith("tidal predict: [1/3] ") and "n1.csv: 32 decision points, " in lines[0]


def test_traces_from_several_flags_and_a_directory_are_deduplicated(node_dir, tmp_path, capsys) -> None:
    extra = write_node(tmp_path / "extra.csv", 9)
    code, out, _ = run(["evaluate", "--trace", str(extra), "--trace", str(node_dir), "--trace",
                        str(node_dir / "n1.csv"), *FAST, "--json", "--predictors", "oracle,rc"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert [Path(t["trace"]).name for t in doc["traces"]] == ["extra.csv", "n1.csv", "n2.csv", "n3.csv.gz"]
    assert doc["pooled"]["nodes"] == 4


def test_few_traces_print_one_table_each_and_the_pooled_table(node_dir, capsys) -> None:
    code, out, _ = run(["evaluate", "--trace", str(node_dir), *FAST], capsys)
    assert code == 0
    assert out.count("| predictor | reclaimed | violation 5 min | violation 60 min |") == 3
    assert ("| predictor | reclaimed | mean viol 5 min | worst 5 min | mean viol 60 min | worst 60 min "
            "| mean overshoot | within budget | gap closed (vs best in-budget peer) |") in out
    assert "pooled over 3 nodes" in out
    assert "within budget: mean violation at 60 min over the nodes ≤ 1 % and the worst node's ≤ 3 %" in out


def test_many_traces_print_the_pooled_table_only_unless_per_trace(node_dir, capsys) -> None:
    write_node(node_dir / "n4.csv", 4)
    code, out, _ = run(["evaluate", "--trace", str(node_dir), *FAST, "--predictors", "oracle,rc"], capsys)
    assert code == 0 and "| violation 5 min |" not in out and "pooled over 4 nodes" in out
    code, out, _ = run(["evaluate", "--trace", str(node_dir), *FAST, "--predictors", "oracle,rc",
                        "--per-trace"], capsys)
    assert code == 0 and out.count("| violation 5 min |") == 4 and "pooled over 4 nodes" in out


def test_a_bad_file_in_a_directory_fails_before_any_result(node_dir, capsys) -> None:
    (node_dir / "n2b.csv").write_text("timestamp,series_id,usage,request\n0,a,1,2\n300,a,x,2\n")
    write_node(node_dir / "n9.csv", 9)
    code, out, err = run(["evaluate", "--trace", str(node_dir), *FAST], capsys)
    assert code == 1 and out == ""
    assert "n2b.csv:3: column 'usage': not a number: 'x'" in err
    assert "decision points," not in err  # nothing was evaluated


def test_a_too_short_trace_among_others_is_named(node_dir, capsys) -> None:
    write_node(node_dir / "n2b.csv", 0, steps=10)
    code, out, err = run(["evaluate", "--trace", str(node_dir), *FAST], capsys)
    assert code == 1 and out == ""
    assert "n2b.csv: trace too short: 10 steps of 300 s" in err and "need at least 19 steps" in err


def test_an_empty_directory_is_an_error_naming_it(tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("no traces here\n")
    code, out, err = run(["evaluate", "--trace", str(empty)], capsys)
    assert code == 1 and out == ""
    assert f"{empty}: no trace files (*.csv, *.csv.gz) in this directory" in err


def test_a_single_trace_keeps_its_fields_at_the_top_level(tmp_path, capsys) -> None:
    one = write_node(tmp_path / "one.csv", 1)
    code, out, err = run(["evaluate", "--trace", str(one), *FAST, "--json", "--budget", "2%"], capsys)
    assert code == 0 and "decision points," not in err
    doc = json.loads(out)
    assert doc["decisions"] == 42 and [e["name"] for e in doc["predictors"]] == list(NAMES)
    assert len(doc["traces"]) == 1 and doc["pooled"]["nodes"] == 1
    assert doc["budget"] == 0.02 and doc["worst_node_budget"] == pytest.approx(0.06)
    for e in doc["predictors"]:
        assert e["worst_violation_60m"] == e["violation_60m"] and e["worst_node_60m"] == str(one)
        assert "gap_closed_vs_rc_nsigma_max" in e and "gap_closed" in e
    code, out, _ = run(["evaluate", "--trace", str(one), *FAST], capsys)
    assert code == 0 and "pooled over" not in out
    assert "| gap closed vs rc-nsigma-max | within budget | gap closed vs best in-budget peer |" in out


@pytest.mark.parametrize(("warmup", "decisions"), [("0", 48), ("30m", 42), ("2h", 24)])
def test_short_warmups(tmp_path, capsys, warmup: str, decisions: int) -> None:
    one = write_node(tmp_path / "one.csv", 1)
    code, out, _ = run(["evaluate", "--trace", str(one), "--warmup", warmup, "--json",
                        "--predictors", "oracle,nsigma"], capsys)
    assert code == 0 and json.loads(out)["decisions"] == decisions


@pytest.mark.parametrize(("text", "value"), [("1%", 0.01), ("0.01", 0.01), ("0.5 %", 0.005), ("0", 0.0)])
def test_budgets_accept_percent_or_fraction(text: str, value: float) -> None:
    assert parse_budget(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "150%", "2", "-1%", "nan", "1"])  # a bare 1: 100 %, or 1 % meant?
def test_bad_budgets_are_usage_errors(text: str, capsys) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_budget(text)
    assert main(["evaluate", "--trace", "x.csv", "--budget", text]) == 2
