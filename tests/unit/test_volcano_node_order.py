"""Volcano's nodeorder plugin scores the admission webhook's preferred node affinities: the pure
render ensures the plugin and a positive ``nodeaffinity.weight``, keeping everything else."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML
from tidal.api.policy import LoadAwareScheduling
from tidal.manager.policy import volcano_node_order, volcano_usage
from tidal.manager.policy.volcano_node_order import VolcanoConfigError, render

LAB_CONF = """\
# a user's comment
actions: "allocate, backfill, preempt"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: binpack
"""


def load(text: str):
    return YAML(typ="safe").load(text)


def nodeorder(conf) -> tuple[int, int, dict]:
    """(tier index, position, entry) of the nodeorder plugin."""
    found = [(t, p, plugin) for t, tier in enumerate(conf["tiers"])
             for p, plugin in enumerate(tier.get("plugins") or []) if plugin["name"] == "nodeorder"]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("text", "where", "arguments"),
    [
        pytest.param("", (0, 0), {"nodeaffinity.weight": 2}, id="empty-configuration"),
        pytest.param(LAB_CONF, (1, 1), {"nodeaffinity.weight": 2}, id="plugin-without-arguments"),
        pytest.param("tiers:\n- plugins:\n  - name: priority\n- plugins:\n  - name: drf\n",
                     (1, 1), {"nodeaffinity.weight": 2}, id="missing-plugin-goes-to-the-last-tier"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      leastrequested.weight: 3\n",
                     (0, 0), {"leastrequested.weight": 3, "nodeaffinity.weight": 2},
                     id="other-weights-kept"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: 5\n",
                     (0, 0), {"nodeaffinity.weight": 5}, id="a-users-positive-weight-kept"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: 0\n",
                     (0, 0), {"nodeaffinity.weight": 2}, id="zero-would-ignore-the-preferences"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: -1\n",
                     (0, 0), {"nodeaffinity.weight": 2}, id="negative"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: high\n",
                     (0, 0), {"nodeaffinity.weight": 2}, id="not-an-integer"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: true\n",
                     (0, 0), {"nodeaffinity.weight": 2}, id="a-boolean-is-not-a-weight"),
        pytest.param("tiers:\n- plugins:\n", (0, 0), {"nodeaffinity.weight": 2}, id="tier-with-null-plugins"),
    ],
)
def test_nodeorder_scores_node_affinity(text: str, where: tuple[int, int], arguments: dict) -> None:
    rendered = render(text)
    tier, position, entry = nodeorder(load(rendered))
    assert (tier, position) == where
    assert entry["arguments"] == arguments
    assert render(rendered) == rendered, "a second render changes nothing"


def test_everything_else_is_kept() -> None:
    rendered = render(LAB_CONF)
    assert rendered.startswith("# a user's comment\n")
    before, after = load(LAB_CONF), load(rendered)
    nodeorder(after)[2].pop("arguments")
    assert after == before


def test_unchanged_configuration_is_returned_as_is() -> None:
    text = "tiers:\n- plugins:\n  - name: nodeorder\n    arguments:\n      nodeaffinity.weight: 2   # scored\n"
    assert render(text) is text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("tiers: [", "not valid YAML", id="yaml"),
        pytest.param("- a\n", "must be a mapping", id="not-a-mapping"),
        pytest.param("tiers: 3\n", "tiers must be a list", id="tiers"),
        pytest.param("tiers:\n- plugins:\n  - name: nodeorder\n    arguments: [1]\n",
                     "plugin nodeorder: arguments must be a mapping", id="arguments"),
    ],
)
def test_configurations_it_cannot_edit_are_errors(text: str, message: str) -> None:
    with pytest.raises(VolcanoConfigError, match=message):
        render(text)


@pytest.mark.parametrize("weight", [0, -2, True, 1.5])
def test_the_weight_tidal_sets_must_be_a_positive_integer(weight) -> None:
    with pytest.raises(ValueError, match="nodeaffinity.weight must be a positive integer"):
        render(LAB_CONF, weight)


def test_the_reconciler_renders_usage_then_node_order_and_both_hold() -> None:
    """What the policy reconciler writes: the usage plugin's thresholds and nodeorder's weight,
    each idempotent on the other's output."""
    las = LoadAwareScheduling()
    text = volcano_node_order.render(volcano_usage.render(LAB_CONF, las))
    conf = load(text)
    usage = next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == "usage")
    assert usage["arguments"]["thresholds"] == {"cpu": las.cpu_threshold_percent, "mem": las.memory_threshold_percent}
    assert nodeorder(conf)[2]["arguments"] == {"nodeaffinity.weight": volcano_node_order.NODE_AFFINITY_WEIGHT}
    assert volcano_node_order.render(volcano_usage.render(text, las)) == text
