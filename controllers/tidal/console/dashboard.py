# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard of Tidal, generated from the console's own charts so both show the same
views with the same PromQL (``monitoring/grafana-dashboard.json`` is this function's output;
``python -m tidal.console.dashboard > monitoring/grafana-dashboard.json`` rewrites it, and a
test fails when the two drift apart)."""
from __future__ import annotations

import json

from tidal.console.monitoring import panels_for

__all__ = ["grafana_dashboard"]

_UNITS = {"millicores": "none", "bytes": "bytes", "percent": "percent", "pods": "short", "count": "short"}


def grafana_dashboard() -> dict:
    charts = panels_for('node=~"$node"', per_node=True)
    grafana_panels = []
    for index, panel in enumerate(charts):
        grafana_panels.append({
            "id": index + 1, "type": "timeseries", "title": panel.title + (" (m)" if panel.unit == "millicores" else ""),
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": _UNITS[panel.unit]}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [{"refId": "A", "expr": panel.query,
                         "legendFormat": "{{" + panel.series_label + "}}" if panel.series_label else panel.title,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}],
        })
    return {
        "title": "Tidal colocation", "uid": "tidal-colocation", "schemaVersion": 39, "version": 1,
        "tags": ["tidal", "colocation"], "timezone": "browser", "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "node", "type": "query", "label": "Node", "includeAll": True, "multi": True,
             "allValue": ".*", "current": {"text": "All", "value": "$__all"},
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(tidal_node_cpu_usage_millicores, node)", "refId": "node"},
             "definition": "label_values(tidal_node_cpu_usage_millicores, node)", "refresh": 2, "sort": 1},
        ]},
        "annotations": {"list": [
            {"name": "Evictions", "enable": True, "iconColor": "red",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "expr": 'ALERTS{alertname="TidalNodeEvicting", alertstate="firing"}', "titleFormat": "{{node}} evicting"},
        ]},
        "panels": grafana_panels,
    }


if __name__ == "__main__":
    print(json.dumps(grafana_dashboard(), indent=2))
