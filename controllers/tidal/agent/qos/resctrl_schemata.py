# SPDX-License-Identifier: Apache-2.0
"""resctrl schemata, pure: parse a group's ``schemata``, compute L3 masks and MB percentages for a
share, render the lines to write.

Both vendors use the kernel's resctrl interface:

* Intel RDT: ``L3:0=fffff;1=fffff`` (a contiguous capacity bit mask per cache domain; ``info/L3/
  cbm_mask`` is the full mask, ``min_cbm_bits`` the fewest bits a mask may have) and
  ``MB:0=100;1=100`` (memory bandwidth percent per domain, in steps of ``info/MB/bandwidth_gran``,
  at least ``min_bandwidth``).
* Arm MPAM (upstream and openEuler kernels): the same ``L3`` and ``MB`` lines (cache portion
  bitmap, bandwidth percent), plus vendor lines (openEuler: ``MBMIN``, ``MBMAX``, ``MBHDL``,
  ``MBPRI``, ``L3PRI``, ...) that are read and left alone.

Only ``L3`` and ``MB`` lines are ever written, with every domain of the root group's schemata.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ResctrlInfo", "Schemata", "l3_mask", "mb_percent", "parse_schemata", "render", "share_lines"]


@dataclass(frozen=True)
class ResctrlInfo:
    """What ``info/`` says (None: the resource is not offered)."""

    cbm_mask: int | None = None       # info/L3/cbm_mask, e.g. 0xfffff
    min_cbm_bits: int = 1             # info/L3/min_cbm_bits
    bandwidth_gran: int | None = None  # info/MB/bandwidth_gran, e.g. 10
    min_bandwidth: int = 10           # info/MB/min_bandwidth

    @property
    def cbm_bits(self) -> int:
        return 0 if self.cbm_mask is None else self.cbm_mask.bit_length()


#: resource -> domain id -> value text, in file order
Schemata = dict[str, dict[str, str]]


def parse_schemata(text: str) -> Schemata:
    """``L3:0=fffff;1=fffff`` lines -> {"L3": {"0": "fffff", "1": "fffff"}} (whitespace ignored)."""
    out: Schemata = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        resource, sep, domains = line.partition(":")
        if not sep:
            raise ValueError(f"schemata line {raw!r}: expected <resource>:<id>=<value>;...")
        values = {}
        for item in domains.split(";"):
            domain, eq, value = item.strip().partition("=")
            if not eq or not domain:
                raise ValueError(f"schemata line {raw!r}: bad domain {item!r}")
            values[domain.strip()] = value.strip()
        out[resource.strip()] = values
    return out


def l3_mask(percent: int, info: ResctrlInfo) -> int:
    """A contiguous mask from bit 0 holding ``percent`` of the cache ways (rounded, at least
    ``min_cbm_bits`` and one way, at most all)."""
    bits = info.cbm_bits
    if bits == 0:
        raise ValueError("no L3 cbm_mask: L3 allocation not offered")
    ways = max(info.min_cbm_bits, 1, round(bits * percent / 100))
    return (1 << min(ways, bits)) - 1


def mb_percent(percent: int, info: ResctrlInfo) -> int:
    """Bandwidth percent rounded down to the granularity, at least the minimum, at most 100."""
    if info.bandwidth_gran is None:
        raise ValueError("no MB bandwidth_gran: memory bandwidth allocation not offered")
    gran = max(1, info.bandwidth_gran)
    value = percent - percent % gran
    return min(100, max(info.min_bandwidth, value))


def share_lines(l3_percent: int | None, mb: int | None, info: ResctrlInfo, root: Schemata) -> Schemata:
    """The L3 and MB lines for a group with these shares, over the root group's domains (a
    resource the root schemata lacks, or that ``info`` does not offer, is skipped)."""
    out: Schemata = {}
    if l3_percent is not None and info.cbm_mask is not None and "L3" in root:
        mask = format(l3_mask(l3_percent, info), "x")
        out["L3"] = {domain: mask for domain in root["L3"]}
    if mb is not None and info.bandwidth_gran is not None and "MB" in root:
        value = str(mb_percent(mb, info))
        out["MB"] = {domain: value for domain in root["MB"]}
    return out


def render(lines: Mapping[str, Mapping[str, str]]) -> str:
    return "".join(f"{res}:{';'.join(f'{d}={v}' for d, v in domains.items())}\n" for res, domains in lines.items())


def satisfied(current: Schemata, wanted: Schemata) -> bool:
    """Whether the group's schemata already holds the wanted values (masks compared as numbers:
    the kernel may print leading zeros or another case)."""
    for resource, domains in wanted.items():
        have = current.get(resource, {})
        for domain, value in domains.items():
            if domain not in have:
                return False
            if resource == "L3":
                if int(have[domain], 16) != int(value, 16):
                    return False
            elif have[domain] != value:
                return False
    return True
