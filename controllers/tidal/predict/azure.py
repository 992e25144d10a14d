# SPDX-License-Identifier: Apache-2.0
"""Convert the Azure Public Dataset V2 (2019) files into the long CSV trace format.

Inputs (``shared/data/traces``):

* ``vm_cpu_readings``-style CSV (``.gz`` allowed) with header
  ``timestamp,vm_id,min_cpu,max_cpu,avg_cpu``: percent of the VM's vCPUs per 5-minute interval;
* ``vmtable``-style CSV with header, at least ``vm_id``, ``vm_category`` and
  ``vm_virtual_core_count_bucket``.

Output rows ``timestamp,series_id,usage,request`` with, per the traces README benchmark,
``request`` = vCPUs and ``usage`` = ``max_cpu``/100 × vCPUs (variant ``strict``, the in-interval
peak) or ``avg_cpu``/100 × vCPUs (``lenient``). The README benchmark treats all 20 VMs as the
online pods of one node, so the default category is ``all``; ``--category Interactive`` keeps
only the VMs the vmtable calls interactive. A reading with an empty value in the chosen column
is a missing reading: it is left out (and counted), and the trace reader carries the previous
reading forward.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tidal.predict.series import TraceFormatError, csv_records, parse_number, parse_percent

__all__ = ["VARIANTS", "AzureConversion", "convert_azure", "read_azure_meta"]

VARIANTS = {"strict": "max_cpu", "lenient": "avg_cpu"}


@dataclass
class AzureConversion:
    rows: list[tuple[int, str, float, float]]
    vms: int
    skipped_category: int  # readings of VMs outside the category
    missing: int  # readings without a value in the chosen column


def _header_index(header: list[str], wanted: tuple[str, ...], where: str) -> dict[str, int]:
    names = [h.strip() for h in header]
    missing = [w for w in wanted if w not in names]
    if missing:
        raise TraceFormatError(
            f"{where}:1: header lacks column(s) {', '.join(repr(m) for m in missing)} "
            f"(got {','.join(names)})"
        )
    return {w: names.index(w) for w in wanted}


def read_azure_meta(path: str | Path) -> dict[str, tuple[str, int]]:
    """vm_id → (vm_category, vCPUs) from a vmtable CSV."""
    label = str(path)
    out: dict[str, tuple[str, int]] = {}
    records = csv_records(path)
    header = _header(records, label)
    col = _header_index(header, ("vm_id", "vm_category", "vm_virtual_core_count_bucket"), label)
    for where, row in records:
        if len(row) <= max(col.values()):
            raise TraceFormatError(f"{where}: expected {len(header)} columns, got {len(row)}")
        vm = row[col["vm_id"]].strip()
        raw = row[col["vm_virtual_core_count_bucket"]].strip()
        try:
            cores = float(raw)
        except ValueError:
            raise TraceFormatError(
                f"{where}: column 'vm_virtual_core_count_bucket': not a number: {raw!r}"
            ) from None
        if not math.isfinite(cores) or cores <= 0:
            raise TraceFormatError(
                f"{where}: column 'vm_virtual_core_count_bucket': must be > 0, got {raw!r}"
            )
        out[vm] = (row[col["vm_category"]].strip(), int(cores) if cores.is_integer() else cores)
    if not out:
        raise TraceFormatError(f"{label}: no VMs")
    return out


def convert_azure(
    cpu_path: str | Path,
    meta_path: str | Path,
    *,
    variant: str = "strict",
    category: str = "all",
) -> AzureConversion:
    """Read the two Azure files and return the long-format rows, sorted by (timestamp, VM)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
    column = VARIANTS[variant]
    meta = read_azure_meta(meta_path)
    if category.lower() == "all":
        keep = set(meta)
    else:
        keep = {vm for vm, (cat, _) in meta.items() if cat.lower() == category.lower()}
        if not keep:
            cats = sorted({cat for cat, _ in meta.values()})
            raise ValueError(
                f"no VM of category {category!r} in {meta_path} (categories: {', '.join(cats)}, all)"
            )
    label = str(cpu_path)
    rows: list[tuple[int, str, float, float]] = []
    skipped = missing = 0
    seen: set[str] = set()
    records = csv_records(cpu_path)
    header = _header(records, label)
    col = _header_index(header, ("timestamp", "vm_id", column), label)
    for where, row in records:
        if len(row) <= max(col.values()):
            raise TraceFormatError(f"{where}: expected {len(header)} columns, got {len(row)}")
        vm = row[col["vm_id"]].strip()
        if vm not in meta:
            raise TraceFormatError(f"{where}: column 'vm_id': VM {vm!r} is not in {meta_path}")
        if vm not in keep:
            skipped += 1
            continue
        ts = parse_number(row[col["timestamp"]], where, "timestamp")
        raw = row[col[column]].strip()
        if raw == "":
            missing += 1
            continue
        pct = parse_percent(raw, where, column)
        cores = meta[vm][1]
        if ts != int(ts):
            raise TraceFormatError(f"{where}: column 'timestamp': not whole seconds: {ts!r}")
        rows.append((int(ts), vm, pct / 100.0 * cores, float(cores)))
        seen.add(vm)
    rows.sort(key=lambda r: (r[0], r[1]))
    return AzureConversion(rows=rows, vms=len(seen), skipped_category=skipped, missing=missing)


def _header(records: Iterator[tuple[str, list[str]]], label: str) -> list[str]:
    """The first record of a CSV file (its header); an empty file is an error."""
    try:
        return next(records)[1]
    except StopIteration:
        raise TraceFormatError(f"{label}: empty file") from None
