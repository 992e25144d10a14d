# SPDX-License-Identifier: Apache-2.0
"""Convert Alibaba cluster-trace-v2018 machine usage into the long CSV trace format.

Inputs (no header rows, ``.gz`` allowed):

* ``machine_usage.csv``: machine_id, time_stamp (s), cpu_util_percent, mem_util_percent,
  mem_gps, mkpi, net_in, net_out, disk_io_percent; irregular steps (10 s to minutes);
* ``machine_meta.csv``: machine_id, time_stamp, failure_domain_1, failure_domain_2, cpu_num,
  mem_size, status (several rows per machine; the latest row with a cpu_num wins).

Each machine becomes one series with ``request`` = cpu_num and
``usage`` = cpu_util_percent/100 × cpu_num. Readings are resampled onto a regular grid of
``step`` seconds (default 300, aligned on multiples of the step): ``strict`` takes the maximum of
the readings inside each step, ``lenient`` their mean. A step without readings gets no row (a
missing reading for the trace reader). Readings with an empty cpu_util_percent are skipped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tidal.predict.series import TraceFormatError, csv_records, parse_number, parse_percent

__all__ = ["AlibabaConversion", "convert_alibaba", "read_alibaba_meta"]


@dataclass
class AlibabaConversion:
    rows: list[tuple[int, str, float, float]]
    machines: int
    readings: int
    skipped: int  # readings without a cpu value



def read_alibaba_meta(path: str | Path) -> dict[str, float]:
    """machine_id → cpu_num (from the latest row of each machine that has one)."""
    label = str(path)
    latest: dict[str, tuple[float, float]] = {}
    for where, row in csv_records(path):
        if len(row) < 5:
            raise TraceFormatError(f"{where}: expected 7 columns, got {len(row)}")
        machine, ts_raw, cpu_raw = row[0].strip(), row[1].strip(), row[4].strip()
        if cpu_raw == "":
            continue
        ts = parse_number(ts_raw, where, "time_stamp") if ts_raw else -math.inf
        cpu = parse_number(cpu_raw, where, "cpu_num")
        if cpu <= 0:
            raise TraceFormatError(f"{where}: column 'cpu_num': must be > 0, got {cpu_raw!r}")
        if machine not in latest or ts >= latest[machine][0]:
            latest[machine] = (ts, cpu)
    if not latest:
        raise TraceFormatError(f"{label}: no machines with a cpu_num")
    return {m: cpu for m, (_, cpu) in latest.items()}


def convert_alibaba(
    usage_path: str | Path,
    meta_path: str | Path,
    *,
    variant: str = "strict",
    step: int = 300,
) -> AlibabaConversion:
    """Resample machine usage onto ``step``-second points; rows sorted by (timestamp, machine)."""
    if variant not in ("strict", "lenient"):
        raise ValueError(f"variant must be strict or lenient, not {variant!r}")
    if step <= 0:
        raise ValueError(f"step must be positive, not {step}")
    cpus = read_alibaba_meta(meta_path)
    buckets: dict[tuple[str, int], list[float]] = defaultdict(list)
    readings = skipped = 0
    for where, row in csv_records(usage_path):
        if len(row) < 3:
            raise TraceFormatError(f"{where}: expected 9 columns, got {len(row)}")
        machine = row[0].strip()
        if machine not in cpus:
            raise TraceFormatError(
                f"{where}: column 'machine_id': {machine!r} has no cpu_num in {meta_path}"
            )
        raw = row[2].strip()
        if raw == "":
            skipped += 1
            continue
        ts = parse_number(row[1].strip(), where, "time_stamp")
        pct = parse_percent(raw, where, "cpu_util_percent")
        buckets[(machine, int(ts // step) * step)].append(pct)
        readings += 1
    rows = []
    for (machine, ts), values in buckets.items():
        pct = max(values) if variant == "strict" else math.fsum(values) / len(values)
        cpu = cpus[machine]
        rows.append((ts, machine, pct / 100.0 * cpu, cpu))
    rows.sort(key=lambda r: (r[0], r[1]))
    return AlibabaConversion(
        rows=rows, machines=len({m for m, _ in buckets}), readings=readings, skipped=skipped
    )
