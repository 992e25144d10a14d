"""tidal.predict.azure / alibaba: the public traces into the long CSV format."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tidal.predict.alibaba import convert_alibaba, read_alibaba_meta
from tidal.predict.azure import convert_azure
from tidal.predict.series import TraceFormatError, read_trace, write_long_csv

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
AZ_CPU = DATA / "azure_cpu_small.csv"
AZ_META = DATA / "azure_meta_small.csv"
AL_USAGE = DATA / "alibaba_usage_small.csv"
AL_META = DATA / "alibaba_meta_small.csv"


@pytest.mark.parametrize(
    ("variant", "category", "expected"),
    [
        # usage = pct/100 × vCPUs (vmA 2, vmB 4, vmC 8); vmB has no reading at 300,
        # vmC's max_cpu at 600 is empty (a missing reading, left out)
        ("strict", "all", [(0, "vmA", 1.0), (0, "vmB", 1.0), (0, "vmC", 6.4), (300, "vmA", 0.8),
                           (300, "vmC", 4.8), (600, "vmA", 0.6), (600, "vmB", 4.0)]),
        ("lenient", "all", [(0, "vmA", 0.2), (0, "vmB", 0.2), (0, "vmC", 1.6), (300, "vmA", 0.25),
                            (300, "vmC", 1.2), (600, "vmA", 0.15), (600, "vmB", 2.0), (600, "vmC", 1.6)]),
        ("strict", "Interactive", [(0, "vmA", 1.0), (0, "vmC", 6.4), (300, "vmA", 0.8),
                                   (300, "vmC", 4.8), (600, "vmA", 0.6)]),
        ("strict", "delay-insensitive", [(0, "vmB", 1.0), (600, "vmB", 4.0)]),
    ],
)
def test_azure_usage_is_percent_of_vcpus_and_request_is_vcpus(variant, category, expected) -> None:
    conv = convert_azure(AZ_CPU, AZ_META, variant=variant, category=category)
    got = [(ts, vm, u) for ts, vm, u, _ in conv.rows]
    assert [(ts, vm) for ts, vm, _ in got] == [(ts, vm) for ts, vm, _ in expected]
    assert [u for *_, u in got] == pytest.approx([u for *_, u in expected])
    requests = {vm: r for _, vm, _, r in conv.rows}
    assert all(requests[vm] == {"vmA": 2.0, "vmB": 4.0, "vmC": 8.0}[vm] for vm in requests)


def test_azure_counts_missing_and_other_category_readings() -> None:
    conv = convert_azure(AZ_CPU, AZ_META, variant="strict", category="Interactive")
    assert conv.missing == 1 and conv.skipped_category == 2 and conv.vms == 2


def test_azure_output_reads_back_as_a_trace_with_the_missing_reading_filled() -> None:
    buf = io.StringIO()
    write_long_csv(convert_azure(AZ_CPU, AZ_META).rows, buf)
    t = read_trace(io.StringIO(buf.getvalue()), name="azure")
    assert t.step == 300 and len(t) == 3 and t.series_ids == ("vmA", "vmB", "vmC")
    assert t.usage[1] == pytest.approx([1.0, 1.0, 4.0])  # vmB at 300 carried forward
    assert t.usage[2] == pytest.approx([6.4, 4.8, 0.0])  # vmC's last reading is at 300
    assert t.total_request == [14.0, 14.0, 6.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("timestamp,vm_id,min_cpu,avg_cpu\n", "header lacks column(s) 'max_cpu'"),
        ("timestamp,vm_id,min_cpu,max_cpu,avg_cpu\n0,vmZ,1,2,3\n", ":2: column 'vm_id': VM 'vmZ' is not in"),
        ("timestamp,vm_id,min_cpu,max_cpu,avg_cpu\n0,vmA,1,x,3\n", ":2: column 'max_cpu': not a number: 'x'"),
        ("timestamp,vm_id,min_cpu,max_cpu,avg_cpu\n0,vmA,1,-2,3\n", ":2: column 'max_cpu': negative"),
        ("timestamp,vm_id,min_cpu,max_cpu,avg_cpu\n0,vmA,1,100.5,3\n",
         ":2: column 'max_cpu': a percentage must be 0 to 100, got '100.5'"),
    ],
)
def test_azure_bad_input_names_line_and_column(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "cpu.csv"
    p.write_text(content)
    with pytest.raises(TraceFormatError) as err:
        convert_azure(p, AZ_META)
    assert message in str(err.value)


def test_a_whole_busy_vm_is_100_percent_and_the_other_column_is_not_checked(tmp_path: Path) -> None:
    p = tmp_path / "cpu.csv"
    p.write_text("timestamp,vm_id,min_cpu,max_cpu,avg_cpu\n0,vmA,1,100,300\n")
    assert [u for _, _, u, _ in convert_azure(p, AZ_META).rows] == [2.0]  # vmA has 2 vCPUs


def test_azure_unknown_category_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="categories: Delay-insensitive, Interactive, all"):
        convert_azure(AZ_CPU, AZ_META, category="Batch")


def test_alibaba_meta_takes_the_latest_cpu_num() -> None:
    assert read_alibaba_meta(AL_META) == {"m_1": 96.0, "m_2": 96.0, "m_3": 32.0}


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        # m_1 readings at 0/100/290 s fall into step 0 (10, 30, 20 %), 310 s into step 300,
        # 900 s into step 900; m_2's reading at 20 s has no cpu value and is skipped.
        ("strict", [(0, "m_1", 28.8), (0, "m_2", 48.0), (300, "m_1", 38.4), (600, "m_2", 67.2), (900, "m_1", 4.8)]),
        ("lenient", [(0, "m_1", 19.2), (0, "m_2", 48.0), (300, "m_1", 38.4), (600, "m_2", 67.2), (900, "m_1", 4.8)]),
    ],
)
def test_alibaba_resamples_to_steps_with_max_or_mean(variant, expected) -> None:
    conv = convert_alibaba(AL_USAGE, AL_META, variant=variant)
    assert [(ts, m) for ts, m, _, _ in conv.rows] == [(ts, m) for ts, m, _ in expected]
    assert [u for _, _, u, _ in conv.rows] == pytest.approx([u for *_, u in expected])
    assert {r for *_, r in conv.rows} == {96.0}
    assert conv.readings == 7 and conv.skipped == 1 and conv.machines == 2


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "usage.csv:1: column 'cpu_util_percent': negative value '-1'"),
    ("101", "usage.csv:1: column 'cpu_util_percent': a percentage must be 0 to 100, got '101'"),
])
def test_alibaba_utilisation_outside_0_to_100_is_an_error(tmp_path: Path, value: str, message: str) -> None:
    p = tmp_path / "usage.csv"
    p.write_text(f"m_1,0,{value},50,,,1,1,5\n")
    with pytest.raises(TraceFormatError) as err:
        convert_alibaba(p, AL_META)
    assert message in str(err.value)


def test_alibaba_machine_without_meta_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "usage.csv"
    p.write_text("m_9,0,10,50,,,1,1,5\n")
    with pytest.raises(TraceFormatError, match=r"usage.csv:1: column 'machine_id': 'm_9' has no cpu_num"):
        convert_alibaba(p, AL_META)


# -- found by fuzzing (2026-12-06): the converters' malformed records and damaged files are named

def _with_line(src: Path, dst: Path, line: str, at: int = 2) -> Path:
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(lines[:at] + [line] + lines[at:]))
    return dst


HUGE = '"' + "x" * 200_000 + '"'


def test_a_malformed_record_is_named_with_its_file_and_line_in_every_converter_input(tmp_path: Path) -> None:
    """A field over the csv module's limit (or a quote that swallows the file) was a traceback in
    the meta readers, and an error naming neither file nor line in the Azure CPU file."""
    meta = _with_line(AZ_META, tmp_path / "meta.csv", f"vmX,s,d,0,900,1,1,1,{HUGE},2,4,900\n")
    with pytest.raises(TraceFormatError, match=r"meta.csv:3: malformed CSV: field larger than field limit"):
        convert_azure(AZ_CPU, meta)
    cpu = _with_line(AZ_CPU, tmp_path / "cpu.csv", f"0,vmA,1,{HUGE},1\n")
    with pytest.raises(TraceFormatError, match=r"cpu.csv:3: malformed CSV: field larger than field limit"):
        convert_azure(cpu, AZ_META)
    ali_meta = _with_line(AL_META, tmp_path / "ali_meta.csv", f"m_9,0,1,1,{HUGE},100,USING\n")
    with pytest.raises(TraceFormatError, match=r"ali_meta.csv:3: malformed CSV"):
        read_alibaba_meta(ali_meta)
    ali_usage = _with_line(AL_USAGE, tmp_path / "ali_usage.csv", f"m_1,0,{HUGE}\n", at=1)
    with pytest.raises(TraceFormatError, match=r"ali_usage.csv:2: malformed CSV"):
        convert_alibaba(ali_usage, AL_META)


def test_a_damaged_gzip_is_named_by_the_converters(tmp_path: Path) -> None:
    import gzip
    data = bytearray(gzip.compress(AZ_CPU.read_bytes() * 200))
    for k in range(100, 140):
        data[k] ^= 0x55
    (tmp_path / "cpu.csv.gz").write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=r"cpu.csv.gz: not a text CSV file \(or a damaged gzip\)"):
        convert_azure(tmp_path / "cpu.csv.gz", AZ_META)
