"""tidal.predict.series: reading the long CSV, missing readings, and NodeHistory's windows."""

from __future__ import annotations

import gzip
import io
import math
import random
import statistics
from pathlib import Path

import pytest
from tidal.predict.series import TOTAL, NodeHistory, TraceFormatError, read_trace, write_long_csv
from tidal.predict.windows import linear_quantile

HEADER = "timestamp,series_id,usage,request\n"


def parse(text: str, **kw):
    return read_trace(io.StringIO(text), name="t.csv", **kw)


# -- errors name the line and the column -------------------------------------------------------

BAD = [
    ("empty file", "", "t.csv: empty file"),
    ("header only", HEADER, "no readings"),
    ("missing column", "timestamp,series_id,usage\n0,a,1\n", "t.csv:1: header lacks column(s) 'request'"),
    ("duplicate column", "timestamp,series_id,usage,request,usage\n", "column 'usage' appears more than once"),
    ("short row", HEADER + "0,a,1\n", "t.csv:2: expected 4 columns, got 3"),
    ("usage not a number", HEADER + "0,a,1,2\n300,a,abc,2\n", "t.csv:3: column 'usage': not a number: 'abc'"),
    ("request empty", HEADER + "0,a,1,\n", "t.csv:2: column 'request': empty value"),
    ("negative usage", HEADER + "0,a,-1,2\n", "t.csv:2: column 'usage': negative value '-1'"),
    ("nan usage", HEADER + "0,a,nan,2\n", "t.csv:2: column 'usage': not a finite number"),
    ("inf request", HEADER + "0,a,1,inf\n", "t.csv:2: column 'request': not a finite number"),
    ("fractional timestamp", HEADER + "0.5,a,1,2\n", "t.csv:2: column 'timestamp': timestamps are whole seconds"),
    ("empty series id", HEADER + "0, ,1,2\n", "t.csv:2: column 'series_id': empty value"),
    ("duplicate reading", HEADER + "0,a,1,2\n300,a,1,2\n0,a,3,2\n", "t.csv:4: series 'a' has a second reading at timestamp 0 (first on line 2)"),
    ("off the grid", HEADER + "0,a,1,2\n200,a,1,2\n500,b,1,2\n", "t.csv:4: column 'timestamp': 500 is not on the 200-second grid"),
    ("single timestamp", HEADER + "0,a,1,2\n0,b,1,2\n", "a single timestamp (0); cannot infer the step"),
    # found by fuzzing (2026-12-06): one stray reading used to shrink the grid to its difference
    # (1 s: a 0.3-s evaluation ran for minutes); the step is the most common difference
    ("one stray reading", HEADER + "".join(f"{t},a,1,2\n" for t in range(0, 3000, 300)) + "1501,a,1,2\n",
     "t.csv:12: column 'timestamp': 1501 is not on the 300-second grid starting at 0"),
    # series sampled 60 s out of phase: a 60-s grid would be 78 % carried forward
    ("out of phase", HEADER + "".join(f"{t},a,1,2\n{t + 60},b,1,2\n" for t in range(0, 3000, 300)),
     "the 60-second step inferred from the timestamps would carry forward 78 % of the series' grid points"),
    ("usage of another unit", HEADER + "0,a,1e155,2\n",
     "t.csv:2: column 'usage': 1e155 is above 1e+09: not a number of cores"),
    ("request of another unit", HEADER + "0,a,1,2e9\n", "t.csv:2: column 'request': 2e9 is above 1e+09"),
    ("underscores", HEADER + "0,a,3_00,2\n", "t.csv:2: column 'usage': not a number: '3_00'"),
    # the quote swallowed the rest of the file: named where it opened, not at the end
    ("unterminated quote", HEADER + "0,a,1,2\n300,\"b,1,2\n" + "600,a,1,2\n" * 3,
     "t.csv:3: a quoted field opened on this line runs on to line 6: a quote not closed?"),
]


@pytest.mark.parametrize(("case", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_csv_is_rejected_with_line_and_column(case: str, text: str, message: str) -> None:
    with pytest.raises(TraceFormatError) as err:
        parse(text)
    assert message in str(err.value)


def test_off_grid_timestamp_against_an_explicit_step_is_rejected() -> None:
    with pytest.raises(TraceFormatError, match=r"t.csv:3: .* 450 is not on the 300-second grid"):
        parse(HEADER + "0,a,1,2\n450,a,1,2\n", step=300)


def test_unreadable_path_is_a_trace_format_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace(tmp_path / "nope.csv")


def test_the_explicit_step_reads_series_out_of_phase_carried_forward() -> None:
    trace = parse(HEADER + "".join(f"{t},a,1,2\n{t + 60},b,1,2\n" for t in range(0, 3000, 300)), step=60)
    assert trace.step == 60 and trace.filled > 3 * trace.readings


def test_a_grid_too_large_for_memory_is_refused_before_it_is_built(monkeypatch) -> None:
    import tidal.predict.series as series
    monkeypatch.setattr(series, "MAX_GRID_CELLS", 1000)
    text = HEADER + "".join(f"{t},s{j},1,2\n" for j in range(20) for t in range(0, 60 * 60, 60))  # 20 × 60
    with pytest.raises(TraceFormatError, match=r"20 series × 60 grid points of 60 s is more than 1,000 values"):
        parse(text)


def test_a_damaged_gzip_is_named(tmp_path: Path) -> None:
    data = bytearray(gzip.compress((HEADER + "".join(f"{t},a,{t % 7},8\n" for t in range(0, 300000, 300))).encode()))
    for k in range(200, 260):
        data[k] ^= 0x55
    p = tmp_path / "t.csv.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=r"t.csv.gz: not a text CSV file \(or a damaged gzip\)"):
        read_trace(p)


def test_not_utf8_is_named_with_the_line_reached(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes((HEADER + "0,a,1,2\n" * 1 + "300,caf\xe9,1,2\n").encode("latin-1"))
    with pytest.raises(TraceFormatError, match=r"t.csv: not a text CSV file"):
        read_trace(p)


# -- what is read -------------------------------------------------------------------------------


def test_columns_in_any_order_extra_columns_ignored_and_rows_unsorted() -> None:
    t = parse("request,usage,note,series_id,timestamp\n2,1.5,x,b,300\n4,1,y,a,0\n4,2,z,a,300\n2,0.5,w,b,0\n")
    assert t.step == 300 and t.start == 0 and len(t) == 2
    assert t.series_ids == ("b", "a")
    assert t.usage == [[0.5, 1.5], [1.0, 2.0]]
    assert t.total_usage == [1.5, 3.5]
    assert t.total_request == [6.0, 6.0]


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    """Spreadsheets write one; it was read into the first column's name ("header lacks column(s)
    'timestamp' (expected timestamp,..., got timestamp,...)")."""
    for name, opener in (("t.csv", open), ("t.csv.gz", gzip.open)):
        p = tmp_path / name
        with opener(p, "wt", encoding="utf-8-sig") as f:
            f.write(HEADER + "0,a,1,2\n60,a,2,2\n")
        assert read_trace(p).usage == [[1.0, 2.0]]


def test_gzip_file_is_read(tmp_path: Path) -> None:
    p = tmp_path / "t.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write(HEADER + "0,a,1,2\n60,a,2,2\n")
    t = read_trace(p)
    assert t.step == 60 and t.usage == [[1.0, 2.0]]


MISSING = HEADER + (
    "0,a,1,2\n0,b,5,8\n"
    "300,a,2,2\n"  # b missing at 300: carried forward
    "600,a,3,2\n600,b,6,8\n"
    "900,a,4,2\n1200,a,5,2\n0,c,1,1\n300,c,1,1\n"  # b gone after 600 (last reading); c leaves after 300
)


def test_missing_reading_inside_a_series_life_repeats_the_previous_one() -> None:
    t = parse(MISSING)
    b = t.series_ids.index("b")
    assert t.usage[b] == [5.0, 5.0, 6.0, 0.0, 0.0]
    assert t.request[b] == [8.0, 8.0, 8.0, 0.0, 0.0]
    assert t.filled == 1
    assert t.readings == 9


def test_series_is_absent_before_its_first_and_after_its_last_reading() -> None:
    t = parse(HEADER + "0,a,1,2\n300,a,1,2\n600,a,1,2\n300,b,3,4\n")
    b = t.series_ids.index("b")
    assert t.usage[b] == [0.0, 3.0, 0.0]
    assert t.request[b] == [0.0, 4.0, 0.0]
    assert t.absent == 2


def test_max_gap_bounds_the_carry_forward() -> None:
    text = HEADER + "".join(f"{i * 300},a,1,2\n" for i in range(6)) + "0,b,2,2\n1500,b,4,2\n"
    unbounded = parse(text)
    bounded = parse(text, max_gap_seconds=600)
    b = unbounded.series_ids.index("b")
    assert unbounded.usage[b] == [2.0, 2.0, 2.0, 2.0, 2.0, 4.0]
    assert bounded.usage[b] == [2.0, 2.0, 2.0, 0.0, 0.0, 4.0]


def test_written_csv_reads_back_to_the_same_numbers() -> None:
    rows = [(0, "a", 0.1 + 0.2, 2.0), (300, "a", 1 / 3, 2.5)]
    buf = io.StringIO()
    assert write_long_csv(rows, buf) == 2
    assert buf.getvalue().splitlines()[0] == "timestamp,series_id,usage,request"
    t = parse(buf.getvalue())
    assert t.usage == [[0.1 + 0.2, 1 / 3]] and t.request == [[2.0, 2.5]]


# -- NodeHistory ----------------------------------------------------------------------------------


def test_history_rejects_bad_samples() -> None:
    h = NodeHistory(["a", "b"], 300)
    with pytest.raises(ValueError, match="expected 2"):
        h.append([1.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        h.append([1.0, math.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        h.append([1.0, -1.0], [1.0, 1.0])


def test_bound_clamps_to_requests_unless_usage_exceeds_them() -> None:
    h = NodeHistory(["a"], 300)
    h.append([1.0], [2.0])
    assert [h.bound(x) for x in (-1.0, 1.5, 5.0, math.inf, math.nan)] == [0.0, 1.5, 2.0, 2.0, 2.0]
    h.append([3.0], [2.0])  # a burstable pod above its request
    assert h.bound(5.0) == 3.0


def brute_quantile(values: list[float], q: float) -> float:
    return linear_quantile(sorted(values), q)


def test_incremental_windows_match_recomputation() -> None:
    rng = random.Random(7)
    h = NodeHistory(["a", "b"], 60)
    for i in range(400):
        h.append([rng.random() * 3, 100.0 + rng.random()], [4.0, 200.0])
        tot = h.total_usage
        for n in (1, 5, 37):
            w = list(tot[-n:])
            mean, std, count = h.mean_std(TOTAL, n)
            assert count == len(w)
            assert mean == pytest.approx(statistics.fmean(w), rel=1e-12, abs=1e-12)
            assert std == pytest.approx(statistics.pstdev(w), rel=1e-9, abs=1e-9)
            assert h.maximum(TOTAL, n) == max(w)
            assert list(h.sorted_window(1, n)) == sorted(h.usage(1)[-n:])
            assert h.quantile(0, n, 0.95) == brute_quantile(list(h.usage(0)[-n:]), 0.95)
        if i % 50 == 0:  # a fresh history over the same samples gives the same answers
            fresh = NodeHistory(["a", "b"], 60)
            for k in range(len(h)):
                fresh.append([h.usage(0)[k], h.usage(1)[k]], [4.0, 200.0])
            assert fresh.quantile(TOTAL, 37, 0.5) == h.quantile(TOTAL, 37, 0.5)


def test_linear_quantile_matches_numpys_default_definition() -> None:
    # numpy.percentile([1, 2, 3, 4], [0, 25, 50, 95, 100]) == [1, 1.75, 2.5, 3.85, 4]
    got = [linear_quantile([1.0, 2.0, 3.0, 4.0], q) for q in (0, 0.25, 0.5, 0.95, 1)]
    assert got == pytest.approx([1.0, 1.75, 2.5, 3.85, 4.0])
    with pytest.raises(ValueError):
        linear_quantile([], 0.5)


def test_ewma_and_derived_series_extend_as_the_history_grows() -> None:
    h = NodeHistory(["a"], 300)
    for x in (4.0, 0.0, 0.0):
        h.append([x], [10.0])
    e = list(h.ewma(TOTAL, 1.0))  # half-life one sample: halves the distance each step
    assert e == [4.0, 2.0, 1.0]
    peaks = h.derived("next", lambda hist, s: hist.total_usage[s + 1], lag=1)
    assert peaks == [0.0, 0.0]
    h.append([8.0], [10.0])
    assert list(h.ewma(TOTAL, 1.0)) == [4.0, 2.0, 1.0, 4.5]
    assert h.source("next") == [0.0, 0.0, 8.0]
    with pytest.raises(ValueError, match="lag"):
        h.derived("next", lambda hist, s: 0.0, lag=2)
