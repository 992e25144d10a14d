"""The web console in headless Chromium (Debian's package, driven by Playwright through its
executable path) against tidal-console on the lab: every page loads, a node's mode selector
changes the node's labels at the API server, an invalid policy shows the field error, a chart answers a hover.
Screenshots go to tests/output/console/ (git-ignored)."""
import sys
from pathlib import Path

import pytest
from kubernetes import client

from tidal.agent.nri.probe import NRI_CAPABILITY
from tidal.agent.qos.capabilities import CAPABILITY_NAMES, Capability, to_status
from tidal.api import qos
from tidal_dev.lab.pytest_plugin import wait_for

from .conftest import http, patch_profile_status, promql

pytestmark = pytest.mark.lab
pytest.importorskip("playwright.sync_api")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_helpers import browser  # noqa: E402,F401 (a fixture)
from browser_helpers import go as _go, no_placeholders as _no_placeholders, signed_in as _signed_in  # noqa: E402


def _labels(core, node):
    """Tidal's two mode labels on the node."""
    labels = core.read_node(node).metadata.labels or {}
    return {k: v for k, v in labels.items() if k in (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL)}


def _capabilities(lab_api, node):
    # As a real agent writes them: the probe's own capability names (issue 20: invented names
    # such as "psiInterference" made this test pass while real data was never dimmed).
    capabilities = [Capability("cpu.cfs_burst", True, "/sys/fs/cgroup/cpu.max.burst"),
                    Capability("psi", False, "/proc/pressure/cpu unreadable: boot with psi=1"),
                    Capability("schedstat", False, "no /proc/self/schedstat: kernel without CONFIG_SCHED_INFO"),
                    Capability("cpu.idle", True, "/sys/fs/cgroup/cpu/cpu.idle"),
                    Capability(NRI_CAPABILITY, False, "no NRI socket at /var/run/nri/nri.sock (NRI disabled in "
                                                      "containerd?)")]
    assert {c.name for c in capabilities} <= {*CAPABILITY_NAMES, NRI_CAPABILITY}
    patch_profile_status(lab_api, node, {"capabilities": to_status(capabilities)})


def _breakdown(lab_api, node) -> dict:
    """The oversell master's breakdown for a node it gave 0 (as `decide_node` makes it: an
    oversold node without a NodeProfile), written into the node's NodeProfile, which the master
    leaves alone while the node is not oversold."""
    import datetime
    from tidal.manager.oversell.node_decision import OversellSettings, decide_node
    now = datetime.datetime.now(datetime.timezone.utc)
    oversold = {"metadata": {"name": node, "labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    breakdown = decide_node(oversold, None, OversellSettings(), now).to_status(now)
    patch_profile_status(lab_api, node, {"oversell": breakdown})
    return breakdown


def test_pages_switch_policy_errors_and_chart_hover(browser, console, users, nodes, components, prometheus,
                                                    lab_api, artefacts):
    core = client.CoreV1Api(lab_api)
    _capabilities(lab_api, nodes["oversold"])
    breakdown = _breakdown(lab_api, nodes["plain"])
    page, errors = _signed_in(browser, console, users["editor"])

    # Overview: the workflow with links into the pages, the roles' snippets and an example BE Job.
    _no_placeholders(page)
    assert page.locator(".step").count() == 4
    assert page.locator(".step a[href='#/policy']").count() == 1
    assert "kubelet" in page.inner_text(".step[data-step='1']")
    kubelet, containerd = (f".step[data-step='1'] .snippet[data-snippet='roles/{role}']"
                           for role in ("kubelet_cpu_manager", "containerd_nri"))
    page.click(f"{kubelet} summary")
    assert "cpuManagerPolicy: static" in page.inner_text(kubelet)
    page.click(f"{containerd} summary")
    assert "io.containerd.nri.v1.nri" in page.inner_text(containerd)
    assert "kind: Job" in page.inner_text(".step[data-step='3'] .snippet[data-snippet='example']")
    # ... and the cluster's state: each node's mode, BE pods and the Tidal Events (issue 16).
    page.wait_for_selector(f"#overview-nodes tr[data-node='{nodes['oversold']}']", timeout=10000)
    assert "colocation+oversubscription" in page.inner_text(f"#overview-nodes tr[data-node='{nodes['oversold']}']")
    assert page.locator("#overview-error").count() == 0
    # A node at 0 batch resources says why, in the master's words, its notes in the tooltip.
    plain = f"#overview-nodes tr[data-node='{nodes['plain']}']"
    page.wait_for_selector(f"{plain} td .why", timeout=10000)
    assert page.locator(f"{plain} td .why").all_inner_texts() == [
        breakdown["cpuMillicores"]["reason"], breakdown["memoryBytes"]["reason"]]
    assert breakdown["notes"][0] in page.locator(f"{plain} td.errors").first.get_attribute("title")
    assert page.locator(f"{plain} td .why-notes").all_inner_texts() == breakdown["notes"]
    assert page.locator("#be-summary").inner_text().startswith("BE pods: ")
    assert page.locator("#tidal-events, #events-empty").count() == 1
    page.screenshot(path=str(artefacts / "overview.png"), full_page=True)

    # Policy configuration: the mode selector of our own node labels it at the API server.
    _go(page, "#/policy")
    node = nodes["plain"]
    selector = page.locator(f"select.mode[data-node='{node}']")
    assert selector.input_value() == "off" and _labels(core, node) == {}
    assert selector.locator("option").all_inner_texts() == ["off", "colocation", "oversubscription",
                                                            "colocation+oversubscription"]
    assert page.locator("#modes dt").all_inner_texts() == ["off", "colocation", "oversubscription",
                                                           "colocation+oversubscription"]
    meaning = dict(zip(page.locator("#modes dt").all_inner_texts(),
                       (d.split(". BE pods are evicted")[0] for d in page.locator("#modes dd").all_inner_texts())))
    selector.select_option("colocation+oversubscription")
    page.wait_for_selector(f".toast:has-text('node {node} set to mode colocation+oversubscription')", timeout=10000)
    both = {qos.COLOCATION_NODE_LABEL: "true", qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}
    wait_for(lambda: _labels(core, node) == both, 10, f"labels colocation and oversubscription on {node}")
    assert page.inner_text(f".mode-meaning[data-node='{node}']") == meaning["colocation+oversubscription"]
    selector.select_option("colocation")
    page.wait_for_selector(f".toast:has-text('node {node} set to mode colocation: ')", timeout=10000)
    wait_for(lambda: _labels(core, node) == {qos.COLOCATION_NODE_LABEL: "true"}, 10, f"colocation label only on {node}")
    assert page.inner_text(f".mode-meaning[data-node='{node}']") == meaning["colocation"]
    assert selector.input_value() == "colocation"
    # The Rollout table: one row shape, every cell filled; the conditions in a table of their own.
    for row in page.locator("#rollout tbody tr").all():
        cells = row.locator("td").all_inner_texts()
        assert len(cells) == 5 and all(c.strip() for c in cells), cells
    assert page.locator("#rollout thead th").count() == 5
    # An unsupported feature is dimmed with its reason.
    chip = page.locator(f"tr[data-node='{nodes['oversold']}'] .chip.off[data-capability='psi']")
    assert chip.get_attribute("title") == "/proc/pressure/cpu unreadable: boot with psi=1"
    page.screenshot(path=str(artefacts / "policy-nodes.png"), full_page=True)
    selector.select_option("off")
    page.wait_for_selector(f".toast:has-text('node {node} set to mode off: ')", timeout=10000)
    wait_for(lambda: _labels(core, node) == {}, 10, f"labels removed from {node}")

    # The policy dialog: an invalid watermark pair is refused, the field named, nothing written.
    before = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    _go(page, "#/policy")
    page.click("#open-policy")
    unsupported = page.locator("fieldset[data-section='spec.features.psiInterference'] [data-unsupported]")
    assert unsupported.count() == 1 and "psi: /proc/pressure/cpu unreadable" in unsupported.inner_text()
    assert page.locator("fieldset[data-section='spec.features.cpuBurst'] [data-unsupported]").count() == 0
    # Issue 14's run-queue delay control: a section of its own (its knobs not repeated under BE
    # isolation), dimmed with the probe's reason where the kernel has no schedstat.
    interference = "fieldset[data-section='spec.beIsolation.cpuInterference']"
    assert "schedstat: no /proc/self/schedstat" in page.locator(f"{interference} [data-unsupported]").inner_text()
    target = "spec.beIsolation.cpuInterference.targetDelayMicroseconds"
    assert page.locator(f"{interference} [id='{target}']").count() == 1
    assert page.locator(f"[id='{target}']").count() == 1
    # BE isolation as a section is not dimmed; a switch in it with needs of its own (the BE idle
    # group needs NRI) is dimmed alone, with the reason.
    assert [e.get_attribute("data-unsupported") for e in page.locator(
        "fieldset[data-section='spec.beIsolation'] [data-unsupported]").all()] == [
        "spec.beIsolation.cpuPriority.idleGroup"]
    assert page.locator("[data-unsupported='spec.beIsolation']").count() == 0
    idle_group = "spec.beIsolation.cpuPriority.idleGroup"
    alone = page.locator(f"[data-unsupported='{idle_group}']")
    assert alone.count() == 1 and "nri: no NRI socket at /var/run/nri/nri.sock" in alone.inner_text()
    assert page.locator(f"div.field.dim:has([id='{idle_group}'])").count() == 1
    assert page.locator("div.field.dim:has([id='spec.beIsolation.cpuPriority.enabled'])").count() == 0
    assert "[10–100000]" in page.locator(f"{interference} label[for='{target}']").inner_text()
    low = "spec.evictionWatermarks.cpu.lowPercent"
    page.fill(f"[id='{low}']", "95")
    page.click("#policy-save")
    error = page.locator(f"[id='{low}.error']")
    error.wait_for(state="visible", timeout=10000)
    page.wait_for_function("id => document.getElementById(id).textContent.length > 0", arg=f"{low}.error")
    assert "must be lower than highPercent" in error.inner_text()
    assert page.get_attribute(f"[id='{low}']", "aria-invalid") == "true"
    page.screenshot(path=str(artefacts / "policy-invalid.png"), full_page=True)
    after = http("GET", f"{console}/api/v1/policy", users["viewer"])[2]
    # generation and spec, not resourceVersion: the manager may write the policy's status meanwhile
    assert (after["generation"], after["spec"]) == (before["generation"], before["spec"])

    # Monitoring: the node's charts from Prometheus; hovering shows the values.
    oversold = nodes["oversold"]
    wait_for(lambda: promql(prometheus, f'count_over_time(tidal_qos_cpu_usage_millicores{{node="{oversold}"}}[1m]) > 2'),
             90, f"Prometheus to hold a few samples of {oversold}")
    _go(page, f"#/monitoring?node={oversold}&range=900")
    chart = page.locator(".chart[data-panel='cpuByQoS']")
    assert int(chart.get_attribute("data-series")) == 3
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 40, box["y"] + box["height"] / 2)
    tooltip = page.locator(".chart[data-panel='cpuByQoS'] .chart-tooltip")
    tooltip.wait_for(state="visible", timeout=10000)
    assert "LS" in tooltip.inner_text() and "HLS" in tooltip.inner_text()
    page.screenshot(path=str(artefacts / "monitoring-node.png"), full_page=True)
    # The legend is centred with BE, HLS, LS: its middle item is HLS; clicking it hides the series.
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + 24 + 7)
    page.mouse.move(box["x"] + box["width"] - 60, box["y"] + box["height"] / 2)
    page.wait_for_function("() => { const t = document.querySelector(\".chart[data-panel='cpuByQoS'] .chart-tooltip\");"
                           " return t && t.innerText.includes('LS') && !t.innerText.includes('HLS'); }", timeout=10000)
    page.screenshot(path=str(artefacts / "monitoring-legend-toggled.png"), full_page=True)
    # Several nodes: the cluster view filtered to them, one line per node.
    both = ",".join(sorted(nodes.values()))
    _go(page, f"#/monitoring?nodes={both}&range=900")
    assert sorted(page.eval_on_selector_all("#node-filter option:checked", "os => os.map(o => o.value)")) == \
        sorted(nodes.values())
    assert int(page.locator(".chart[data-panel='nodeCPU']").get_attribute("data-series")) == 2
    _go(page, "#/monitoring")
    assert page.locator(".chart").count() == 10  # with the node and workload counts
    page.screenshot(path=str(artefacts / "monitoring-cluster.png"), full_page=True)
    assert errors == []


def test_read_only_users_see_disabled_mode_selectors(browser, console, users, nodes):
    page, errors = _signed_in(browser, console, users["viewer"])
    _go(page, "#/policy")
    assert page.locator(f"select.mode[data-node='{nodes['plain']}']").is_disabled()
    assert page.locator("#policy-save").is_disabled()
    assert errors == []
