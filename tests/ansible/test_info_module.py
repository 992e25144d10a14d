"""tidal.colocation.info's per-node report (pure `node_summary`): the mode, read as Tidal reads it
(Tidal's labels, else Volcano's aliases, not the Volcano label tidal-manager wrote itself)."""
import pytest

from ansible_collections.tidal.colocation.plugins.modules import info

CO, OV = "colocation.tidal.io/colocation", "colocation.tidal.io/oversubscription"
VCO, VOV = "volcano.sh/colocation", "volcano.sh/oversubscription"
WRITTEN = {"colocation.tidal.io/volcano-oversubscription-written": "true"}


@pytest.mark.parametrize("labels, annotations, mode, colocation, oversubscription", [
    ({}, {}, "off", False, False),
    ({CO: "true"}, {}, "colocation", True, False),
    ({OV: "true"}, {}, "oversubscription", False, True),
    ({CO: "true", OV: "true"}, {}, "colocation+oversubscription", True, True),
    ({VCO: "true", VOV: "true"}, {}, "colocation+oversubscription", True, True),
    ({CO: "true", VOV: "true"}, WRITTEN, "colocation", True, False),
    ({CO: "false", VCO: "true"}, {}, "off", False, False),
])
def test_info_reports_each_nodes_mode(labels, annotations, mode, colocation, oversubscription):
    node = {"metadata": {"name": "n1", "labels": labels, "annotations": annotations}, "spec": {}, "status": {}}
    summary = info.node_summary(node, None, [], 0)
    assert (summary["mode"], summary["colocation"], summary["oversubscription"]) == (mode, colocation, oversubscription)
    assert summary["labels"] == {k: v for k, v in labels.items() if k.startswith("colocation.tidal.io/")}
