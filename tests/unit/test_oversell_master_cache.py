"""What the oversell master's watch caches keep: the nodes it has something to do with (labelled
for overselling, or still carrying batch amounts to undo), without the parts no decision reads;
and the BE pods' requests reduced to (node, cpu, memory)."""
from tidal.api import qos
from tidal.manager.oversell.loop import be_pod_request, sum_by_node
from tidal.manager.oversell.master import master_node
from tidal.manager.oversell.node_decision import VOLCANO_CPU_ANNOTATION


def _node(labels=None, annotations=None, allocatable=None):
    return {"metadata": {"name": "n1", "uid": "u1", "labels": labels or {}, "annotations": annotations or {},
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"allocatable": allocatable or {"cpu": "16"}, "images": [{"names": ["big"]}] * 3}}


def test_nodes_the_master_has_nothing_to_do_with_are_not_kept():
    assert master_node(_node()) is None
    assert master_node(_node(labels={qos.OVERSUBSCRIPTION_NODE_LABEL: "false"})) is None
    assert master_node(_node(allocatable={qos.BATCH_CPU_RESOURCE: "0", qos.BATCH_MEMORY_RESOURCE: "0"})) is None


def test_labelled_nodes_and_nodes_with_batch_amounts_in_either_mode_are_kept_slim():
    for node in (_node(labels={qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}),
                 _node(allocatable={qos.BATCH_CPU_RESOURCE: "2000"}),
                 _node(annotations={VOLCANO_CPU_ANNOTATION: "2000"})):
        kept = master_node(node)
        assert kept is not None and "images" not in kept["status"] and "managedFields" not in kept["metadata"]
        assert kept["spec"] == node["spec"] and kept["metadata"]["name"] == "n1"
        assert kept["status"]["allocatable"] == node["status"]["allocatable"]
        assert "images" in node["status"]  # the watched object itself is left alone


def _pod(level="BE", node="n1", phase="Running", batch_cpu="1500"):
    return {"metadata": {"annotations": {qos.QOS_ANNOTATION: level}}, "spec": {"nodeName": node, "containers": [
        {"name": "c", "resources": {"requests": {qos.BATCH_CPU_RESOURCE: batch_cpu, qos.BATCH_MEMORY_RESOURCE: "1024"}}}]},
        "status": {"phase": phase}}


def test_be_pods_reduce_to_their_node_and_batch_requests_others_to_nothing():
    assert be_pod_request(_pod()) == ("n1", 1500, 1024)
    assert be_pod_request(_pod(level="LS")) is None
    assert be_pod_request(_pod(node=None)) is None
    assert be_pod_request(_pod(phase="Succeeded")) is None
    assert sum_by_node([("n1", 1500, 1024), ("n1", 500, 1), ("n2", 1, 2)]) == {
        "n1": {"cpu": 2000, "memory": 1025}, "n2": {"cpu": 1, "memory": 2}}
