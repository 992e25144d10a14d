# SPDX-License-Identifier: Apache-2.0
"""Oversell predictors and their benchmark on real traces.

* `tidal.predict.series` — the data model (`Trace`, `NodeHistory`), reading the long CSV format;
* `tidal.predict.predictors` — one strategy per module, all ``predict(history) -> float``;
* `tidal.predict.evaluate` — the metrics of ``shared/data/traces/README.md``;
* `tidal.predict.azure`, `tidal.predict.alibaba` — converters for the public traces;
* `tidal.predict.cli` — ``tidal predict evaluate|convert-azure|convert-alibaba``.
"""

import os
from pathlib import Path


def shared_traces_dir() -> Path | None:
    """Where the public traces are: ``$TIDAL_TRACES_DIR``, else ``shared/data/traces`` beside
    the repository (the development layout); None when neither exists."""
    candidates = [os.environ.get("TIDAL_TRACES_DIR"),
                  Path(__file__).resolve().parents[4] / "shared" / "data" / "traces"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "azure2019_20vms_meta.csv").exists():
            return Path(candidate)
    return None
