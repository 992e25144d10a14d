# SPDX-License-Identifier: Apache-2.0
"""History for a freshly started exporter, written into Prometheus with promtool's backfill.

Volcano's usage plugin averages a 5-minute rate over 10 minutes; a series that has existed for a
minute reads as an almost idle-less (busy) node for the next 10. A test that starts a replayed
node now backfills the same series for the past minutes — exactly the labels the live scrape
will give it — as if the agent had been running; Prometheus loads the new block within a minute.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Series", "backfill"]


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    kind: str  # "counter" (value grows by `rate` per second) or "gauge" (constant `value`)
    rate: float = 0.0
    value: float = 0.0


def _openmetrics(series: Sequence[Series], start: int, end: int, step: int) -> str:
    lines = []
    for family in sorted({s.name for s in series}):
        members = [s for s in series if s.name == family]
        kind = members[0].kind
        base = family.removesuffix("_total") if kind == "counter" else family
        lines.append(f"# TYPE {base} {kind}")
        for s in members:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            for t in range(start, end, step):
                value = (t - start) * s.rate if kind == "counter" else s.value
                lines.append(f"{family}{{{labels}}} {value} {t}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def backfill(data_dir: Path, series: Sequence[Series], minutes: int = 15, step: int = 5,
             wait_until_visible: str | None = None, timeout: float = 150) -> None:
    """Write ``minutes`` of history up to a few seconds ago into ``data_dir`` (Prometheus's
    ``--storage.tsdb.path``). With ``wait_until_visible`` (a Prometheus URL) wait until the first
    series answers a query."""
    end = int(time.time()) - 5
    start = end - minutes * 60
    with tempfile.TemporaryDirectory(prefix="tidal-backfill-") as tmp:
        source = Path(tmp) / "series.om"
        source.write_text(_openmetrics(series, start, end, step))
        out = Path(tmp) / "blocks"
        out.mkdir()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(out)],
                       check=True, capture_output=True, text=True)
        for block in out.iterdir():
            shutil.move(str(block), data_dir / block.name)
    if wait_until_visible:
        import json
        import urllib.parse
        import urllib.request
        first = series[0]
        selector = first.name + "{" + ",".join(f'{k}="{v}"' for k, v in first.labels.items()) + "}"
        query = urllib.parse.urlencode({"query": f"count_over_time({selector}[{minutes}m])", "time": end})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # Prometheus reloads blocks about once a minute
            answer = json.loads(urllib.request.urlopen(f"{wait_until_visible}/api/v1/query?{query}", timeout=10).read())
            if answer["data"]["result"]:
                return
            time.sleep(2)
        raise TimeoutError(f"backfilled {selector} not visible in Prometheus after {timeout:g}s")
