"""`make site` = ansible-playbook playbooks/site.yml against the default inventory (the lab):
the lab with its real node, the nodes' kubelet and containerd configs (converged for real on the
real node: its kubelet and containerd restart), Volcano, the project's image, Tidal as pods on the
real node, colocation on, the policy, a demo workload, a summary. Then the whole chain runs on the
real node with the in-cluster controllers; a second run changes nothing; playbooks/uninstall.yml
removes everything again (the lab is shared by the suite)."""
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from tidal_dev.testing.policy import put_spec
from tidal_dev.testing.site import (CGROUP, NAMESPACE, REAL_NODE, agent_journal, be_isolation_patched,
                                    journal_originals, play, recap)
from tidal_dev.testing.site import container_cgroup as _container_cgroup
from tidal_dev.testing.site import gone as _gone
from tidal_dev.testing.site import kubelet_pod_cgroup
from tidal_dev.testing.site import pod_manifest as _pod
from tidal_dev.testing.site import read as _read
from tidal_dev.testing.site import running as _running
from tidal_dev.testing.site import switch_colocation as _switch_colocation

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "console"))
from browser_helpers import browser  # noqa: E402,F401 (a fixture)
from browser_helpers import go, signed_in  # noqa: E402

@pytest.fixture(scope="module")
def site(lab):
    """site.yml run once for the module (`started`: when it began, UTC, for the bars timed from
    `make site`); uninstall.yml afterwards, which must leave no residue."""
    from datetime import datetime, timezone
    started = datetime.now(timezone.utc)
    first = play("playbooks/site.yml", lab, timeout=900)
    first.started = started
    try:
        yield first
    finally:
        down = play("playbooks/uninstall.yml", lab)
        assert down.returncode == 0, down.stdout[-5000:] + down.stderr
        from kubernetes import client
        with lab.api_client() as api:
            node = client.CoreV1Api(api).read_node(REAL_NODE)
        assert not {k for k in node.metadata.labels if k.startswith("colocation.tidal.io/")}
        assert not [t for t in (node.spec.taints or []) if t.key.startswith("colocation.tidal.io/")]
        assert not {k for k in node.status.allocatable if k.startswith("kubernetes.io/batch-")}
        assert not list((lab.dir / "node-roots").glob("*/etc/udev/rules.d/60-tidal-disk-queue.rules"))


@pytest.fixture(scope="module")
def core(lab):
    from kubernetes import client
    with lab.api_client() as api:
        yield client.CoreV1Api(api)


def test_site_playbook_deploys_tidal_as_pods_on_the_real_node_and_summarises(lab, site, core):
    output = site.stdout + site.stderr
    assert site.returncode == 0, output[-15000:]
    assert f"The lab in {lab.dir} is healthy." in output
    assert "lab-node-0: colocation=True oversubscription=True" in output
    assert "lab-node-1: colocation=True oversubscription=True" in output
    assert "lab-node-2: colocation=False oversubscription=False" in output
    assert f"{REAL_NODE}: colocation=True oversubscription=True" in output
    # the summary waited for amounts that rest on a prediction (an agent's first report has none)
    assert "unknown or invalid" not in output and "no prediction yet" not in output, output[-3000:]
    for host in ("lab-node-0", "lab-node-1", "lab-node-2"):
        assert recap(output)[host]["failed"] == 0
        root = lab.dir / "node-roots" / host
        kubelet = yaml.safe_load((root / "var/lib/kubelet/config.yaml").read_text())
        assert kubelet["cpuManagerPolicy"] == "static" and kubelet["cgroupDriver"] == "systemd"
        assert 'disable = false' in (root / "etc/containerd/config.toml").read_text()
        # the disk_queue role's udev rule on the colocation nodes only
        rule = root / "etc/udev/rules.d/60-tidal-disk-queue.rules"
        assert rule.exists() == (host != "lab-node-2"), host
        if rule.exists():
            assert 'ATTR{queue/max_sectors_kb}="64"' in rule.read_text()
    # The real node was converged for real: its running kubelet has the static CPU manager (the
    # checkpoint it wrote says so) and its containerd serves NRI.
    root = lab.dir / "node-roots" / REAL_NODE
    kubelet = yaml.safe_load((root / "var/lib/kubelet/config.yaml").read_text())
    assert kubelet["cpuManagerPolicy"] == "static" and kubelet["cgroupDriver"] == "cgroupfs"
    assert json.loads((root / "var/lib/kubelet/cpu_manager_state").read_text())["policyName"] == "static"
    assert 'disable = false' in (root / "etc/containerd/config.toml").read_text()
    assert (root / "var/run/nri/nri.sock").is_socket()
    assert (root / "etc/udev/rules.d/60-tidal-disk-queue.rules").exists()  # the machine's disk left alone
    scheduler = yaml.safe_load((lab.dir / "volcano-scheduler.conf").read_text())
    assert scheduler["actions"] == "allocate, backfill, preempt"
    assert scheduler["tiers"][0]["plugins"][0]["name"] == "priority"
    # Tidal runs as pods on the real node, each under its own ServiceAccount, from the image.
    pods = core.list_namespaced_pod(NAMESPACE).items
    by_app = {}
    for pod in pods:
        by_app.setdefault(pod.metadata.labels["app.kubernetes.io/name"], []).append(pod)
    assert {app: len(found) for app, found in by_app.items()} == {
        "tidal-manager": 2, "tidal-agent": 1, "tidal-console": 1}
    for app, found in by_app.items():
        for pod in found:
            assert pod.spec.node_name == REAL_NODE and pod.status.phase == "Running", (app, pod.status)
            assert pod.spec.service_account_name == app
            assert all(s.ready for s in pod.status.container_statuses), (app, pod.status.container_statuses)
            assert all(c.image.startswith("localhost/tidal:") for c in pod.spec.containers)
    assert {c.name for c in by_app["tidal-agent"][0].spec.containers} == {"agent", "nri"}
    # The deployed agent's threads yield to online work (`--own-scheduling batch`, the default):
    # every thread of the agent container, read on the real node (a thread may end meanwhile).
    agent = by_app["tidal-agent"][0]
    agent_id = next(s.container_id for s in agent.status.container_statuses if s.name == "agent").split("://", 1)[1]
    policies = {}
    for tid in _read(_container_cgroup(agent, "cpu").parent / agent_id / "tasks").split():
        try:
            policies[int(tid)] = os.sched_getscheduler(int(tid))
        except ProcessLookupError:
            continue
    assert policies and set(policies.values()) == {os.SCHED_BATCH}, policies


def test_site_oversells_the_demo_nodes_from_the_start_and_runs_the_be_job_on_them(lab, site, core):
    """Issue 18's bar for `make site`: batch resources on the replayed colocation nodes within
    5 minutes with the default predictor (warming up on the peers' rules, not after a day), and
    the demo BE Job bound to them through batch resources."""
    from kubernetes import client
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0
    custom = client.CustomObjectsApi(core.api_client)
    for name in ("lab-node-0", "lab-node-1"):
        cpu = wait_for(lambda: int(core.read_node(name).status.allocatable.get("kubernetes.io/batch-cpu", "0")),
                       300, f"batch-cpu > 0 on {name}")
        profile = custom.get_cluster_custom_object("colocation.tidal.io", "v1alpha1", "nodeprofiles", name)
        predictions = profile["status"]["predictions"]
        assert predictions["predictor"] == "tidal", predictions
        assert predictions["basis"]["regime"] in ("warming-up", "calibrated"), predictions["basis"]
        assert profile["status"]["oversell"]["cpuMillicores"]["result"] > 0, (cpu, profile["status"]["oversell"])
    batch = client.BatchV1Api(core.api_client)
    job = wait_for(lambda: (j := batch.read_namespaced_job("transcode", "tidal-demo")).status.succeeded == 4 and j,
                   300, "the demo BE Job's 4 pods succeeded")
    pods = core.list_namespaced_pod("tidal-demo", label_selector="job-name=transcode").items
    assert pods and job.spec.completions == 4
    for pod in pods:
        assert pod.spec.node_name in ("lab-node-0", "lab-node-1"), pod.spec.node_name
        assert "kubernetes.io/batch-cpu" in pod.spec.containers[0].resources.requests


def test_a_static_pods_usage_is_read_from_its_own_cgroup_on_the_real_node(lab, site, core):
    """A static pod (a manifest in the kubelet's staticPodPath, as kubeadm runs kube-proxy or
    etcd): the API server holds only its mirror pod, whose uid is not the one the kubelet names
    the pod's cgroup after. The agent read its usage by the mirror's uid, never found the cgroup,
    counted the pod at its request and its usage as usage outside the pods."""
    import datetime

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from tidal.api.pod_identity import MIRROR_ANNOTATION
    from tidal_dev.lab import realnode
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0
    image = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-manager") \
        .items[0].spec.containers[0].image
    manifest = realnode.node_for(lab.dir, 0).static_pod_dir / "tidal-test-static-ls.yaml"
    mirror = f"static-ls-{REAL_NODE}"
    custom = client.CustomObjectsApi(core.api_client)
    pod = _pod("static-ls", image, "LS", {"requests": {"cpu": "50m", "memory": "32Mi"}},
               ["python3", "-c", "import signal; signal.pause()"])
    pod["metadata"]["namespace"] = "default"
    del pod["spec"]["nodeSelector"]  # a static pod runs where its manifest is
    manifest.write_text(yaml.safe_dump(pod))
    try:
        def mirror_running():  # the kubelet creates the mirror pod once it has started the pod
            try:
                return _running(core, "default", mirror)()
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
        started = wait_for(mirror_running, 120, f"the mirror pod {mirror} running")
        kubelet_uid = started.metadata.annotations[MIRROR_ANNOTATION]
        assert kubelet_uid != started.metadata.uid
        assert (CGROUP / "cpu/tidal-lab/kubepods/burstable" / f"pod{kubelet_uid}").is_dir()
        since = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=10)

        def measured():  # reports from 10 s on (a CPU rate needs two samples), and it is not at its request
            status = custom.get_cluster_custom_object("colocation.tidal.io", "v1alpha1", "nodeprofiles",
                                                      REAL_NODE)["status"]
            observed = datetime.datetime.fromisoformat(status["observedAt"].replace("Z", "+00:00"))
            at_request = {p["name"]: p["reason"] for p in status["perQoS"]["LS"]["podsAtRequest"]}
            return status if observed >= since and mirror not in at_request else None
        status = wait_for(measured, 90, f"the agent reporting {mirror}'s own usage, not its request")
        assert status["perQoS"]["LS"]["pods"] >= 1
    finally:
        manifest.unlink(missing_ok=True)
        wait_for(_gone(core, "default", mirror), 120, f"the mirror pod {mirror} gone with its manifest")


def _query(lab, promql: str) -> list[dict]:
    """The series of an instant query to the lab's Prometheus."""
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{lab.prometheus_url}/api/v1/query?{query}", timeout=5) as r:
        return json.load(r)["data"]["result"]


def test_the_replayed_nodes_have_live_metrics_in_the_labs_prometheus(lab, site):
    """Issue 16: the replaying agent is scraped like a real agent, so the console's charts show
    the demo's kwok nodes (their usage by QoS level) within a minute or two of `make site`."""
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0

    def nodes_with(metric):
        return {series["metric"].get("node") for series in _query(lab, f'{metric}{{component="tidal-agent-replay"}}')}

    for metric in ("tidal_node_cpu_usage_millicores", "tidal_qos_cpu_usage_millicores"):
        wait_for(lambda: {"lab-node-0", "lab-node-1"} <= nodes_with(metric), 180,
                 f"{metric} of lab-node-0 and lab-node-1 from the replaying agent in Prometheus")


def test_the_demo_peak_evicts_a_be_pod_taints_the_node_and_recovers(lab, site, core):
    """Issue 16's bar: within 15 minutes of `make site`, a `TidalEvicted` Event from the demo's
    scripted peak on a kwok node (the replaying agent evicting as an agent would), the node
    tainted while it evicts, the eviction in the lab's Prometheus (the console's evictions
    chart), then the recovery: the taint removed and the evicted BE pods replaced and running."""
    import time

    from kubernetes import client
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0
    started = time.monotonic()
    inventory = yaml.safe_load((ROOT / "inventories/lab/hosts.yml").read_text())
    peaks = inventory["lab"]["vars"]["tidal_demo_peaks"]
    demo_nodes = {peak.split("=", 1)[0] for peak in peaks}

    def evicted():
        events = core.list_namespaced_event("tidal-demo", field_selector="reason=TidalEvicted").items
        return [e for e in events if e.source and e.source.host in demo_nodes and e.source.component == "tidal-agent"]
    events = wait_for(evicted, 900, f"a TidalEvicted Event in tidal-demo from a demo peak on {sorted(demo_nodes)}",
                      interval=2)
    node = events[0].source.host
    print(f"first TidalEvicted on {node} {time.monotonic() - started:.0f}s into this test: {events[0].message}")
    assert "above high watermark" in events[0].message or "after crossing high" in events[0].message, events[0].message
    taint = "colocation.tidal.io/offline-evicting"

    def node_events(reason):
        return [e for e in core.list_namespaced_event("default", field_selector=f"reason={reason}").items
                if e.involved_object.name == node]
    wait_for(lambda: node_events("TidalOfflineEvicting"), 30, f"the TidalOfflineEvicting Event of {node}")

    def series():
        return [s for s in _query(lab, f'tidal_evictions_total{{node="{node}"}}') if float(s["value"][1]) > 0]
    wait_for(series, 120, f"tidal_evictions_total of {node} above 0 in the lab's Prometheus", interval=2)
    # recovery: the peak ends (120 s), usage falls to the low watermark, the taint goes
    wait_for(lambda: not any(t.key == taint for t in core.read_node(node).spec.taints or []), 300,
             f"the offline-evicting taint removed from {node}", interval=2)
    wait_for(lambda: node_events("TidalOfflineEvictingCleared"), 30, f"the TidalOfflineEvictingCleared Event of {node}")
    apps = client.AppsV1Api(core.api_client)
    wait_for(lambda: (apps.read_namespaced_deployment("analytics", "tidal-demo").status.ready_replicas or 0) == 4,
             300, "the demo's BE Deployment analytics back at 4 running pods", interval=2)
    print(f"recovered {time.monotonic() - started:.0f}s into this test")


def test_a_second_run_changes_nothing(lab, site):
    assert site.returncode == 0
    again = play("playbooks/site.yml", lab, timeout=900)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-15000:]
    changed = {host: counts["changed"] for host, counts in recap(output).items()}
    assert changed == {"localhost": 0, "lab-node-0": 0, "lab-node-1": 0, "lab-node-2": 0, REAL_NODE: 0}, \
        output[-15000:]


def _console_call(method: str, url: str, token: str, body=None, timeout: float = 20.0):
    """(status, parsed JSON or text) of one console API call; status None while nothing answers."""
    import urllib.error
    import urllib.request
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except OSError as err:  # refused, unreachable, timed out: not answering (yet)
        return None, str(err)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@pytest.mark.timeout(1800)
def test_the_console_shows_the_demo_working_and_switches_a_node_off(lab, site, core, browser):
    """Issue 16's browser test and bars, as a new user meets them after `make site`: the console
    at the URL the summary prints, signed in with the token of the account it names; within 5
    minutes of `make site` live series for every demo node and a BE pod Running on oversold
    capacity; within 15 minutes a TidalEvicted Event of a demo peak, in the evictions chart; a
    demo node switched off in the browser loses its mode labels and batch resources (switched
    back on through the API afterwards). Screenshots: tests/output/site-*.png."""
    import time
    import urllib.parse
    from datetime import datetime, timedelta, timezone

    from tidal.api import qos
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0
    started = site.started
    output = site.stdout + site.stderr

    def left(bar_seconds: float, floor: float) -> float:
        """Seconds left until `bar_seconds` after `make site` began (at least `floor`)."""
        return max(bar_seconds - (datetime.now(timezone.utc) - started).total_seconds(), floor)

    inventory = yaml.safe_load((ROOT / "inventories/lab/hosts.yml").read_text())
    demo_nodes = sorted(name for name, host in inventory["nodes"]["hosts"].items()
                        if host.get("tidal_colocation") and not host.get("lab_real_node"))
    peak_nodes = {peak.split("=", 1)[0] for peak in inventory["lab"]["vars"]["tidal_demo_peaks"]}
    assert demo_nodes == ["lab-node-0", "lab-node-1"] and peak_nodes <= set(demo_nodes), (demo_nodes, peak_nodes)
    out = ROOT / "tests" / "output"
    out.mkdir(parents=True, exist_ok=True)

    # 1. The URL and the token, as the summary says (its kubectl command, through the API).
    url = re.search(r"console: (http://[0-9a-z.:\[\]-]+)/ \(the tidal-console Service", output)
    assert url, f"the summary prints no console URL:\n{output[-5000:]}"
    console = url.group(1)
    command = re.search(r"sign in with the token of: kubectl --kubeconfig \S+ -n ([a-z0-9-]+) create token "
                        r"([a-z0-9-]+)", output)
    assert command, f"the summary prints no token command:\n{output[-5000:]}"
    namespace, account = command.groups()
    token = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token

    def call(method, path, body=None):
        return _console_call(method, f"{console}/api/v1{path}", token, body)

    # 2. Within 5 minutes: the console answers, every demo node has live series, BE pods run on
    # oversold capacity.
    wait_for(lambda: call("GET", "/whoami")[0] == 200, left(300, 30),
             f"the console at {console} answering {namespace}/{account}'s token")
    since = started.timestamp() - 60

    def live():
        status, body = call("GET", "/monitoring/cluster?" + urllib.parse.urlencode(
            {"start": f"{since:.0f}", "end": f"{time.time():.0f}", "nodes": ",".join(demo_nodes)}))
        if status != 200:
            return None
        recent = time.time() - 120
        panels = {p["name"]: p for p in body["panels"]}
        for name in ("nodeCPU", "nodeMemory"):
            shown = {s["labels"].get("node") for s in panels[name]["series"]
                     if any(v is not None and t >= recent for t, v in s["points"])}
            if not set(demo_nodes) <= shown:
                return None
        # The leading manager's batch series of the demo nodes (it runs on lab-real-0: the lab's
        # Prometheus must keep the series' own `node`, not the scraped pod's).
        allocatable = [s for s in panels["batchCPU"]["series"] if s["labels"].get("kind") == "allocatable"]
        if not any(v for s in allocatable for t, v in s["points"] if v is not None and t >= recent):
            return None
        return panels, body["step"]
    panels, step = wait_for(live, left(300, 60), f"live nodeCPU and nodeMemory series of {demo_nodes} and "
                                                 "their batch CPU allocatable in GET /api/v1/monitoring/cluster",
                            interval=2)
    for series in panels["nodeCPU"]["series"]:
        if series["labels"].get("node") in demo_nodes:
            first = min(t for t, v in series["points"] if v is not None and t >= started.timestamp())
            assert first - started.timestamp() <= 300 + step, \
                f"{series['labels']['node']}'s first point {first - started.timestamp():.0f}s after make site began"
    oversold = ("oversubscription", "colocation+oversubscription")

    def be_on_oversold():
        status, body = call("GET", "/overview")
        if status != 200:
            return None
        return [row for row in body["nodes"] if row["mode"] in oversold and row["bePods"]["running"] > 0
                and row["batch"]["allocatable"]["cpuMillicores"] > 0]
    rows = wait_for(be_on_oversold, left(300, 60), "a node in an oversold mode with a BE pod Running in "
                                                    "GET /api/v1/overview", interval=2)
    print("BE pods running on oversold capacity:", {r["name"]: r["bePods"]["running"] for r in rows})

    page, errors = signed_in(browser, console, token)
    for name in demo_nodes:
        page.wait_for_selector(f"#overview-nodes tr[data-node='{name}']", timeout=20000)
    page.screenshot(path=str(out / "site-signed-in.png"), full_page=True)

    # 3. Within 15 minutes: a TidalEvicted Event of a demo peak (this run's: not before make site),
    # and the evictions chart showing it.
    def when(event):
        return event.first_timestamp or event.event_time or event.metadata.creation_timestamp

    def evicted():
        events = core.list_namespaced_event("tidal-demo", field_selector="reason=TidalEvicted").items
        return [e for e in events if e.source and e.source.host in peak_nodes and e.source.component == "tidal-agent"
                and when(e) >= started - timedelta(seconds=5)]
    events = wait_for(evicted, left(900, 60), f"a TidalEvicted Event of a demo peak on {sorted(peak_nodes)}",
                      interval=2)
    first = min(events, key=when)
    assert (when(first) - started).total_seconds() <= 900, \
        f"the first TidalEvicted came {(when(first) - started).total_seconds():.0f}s after make site began"
    filtered = ",".join(demo_nodes)

    def chart_evictions():
        status, body = call("GET", f"/monitoring/cluster?nodes={filtered}")
        if status != 200:
            return None
        panel = next(p for p in body["panels"] if p["name"] == "evictions")
        return {s["name"] for s in panel["series"] if any(v for _, v in s["points"])}
    wait_for(chart_evictions, 180, f"a non-zero point of the evictions chart of {filtered} "
                                   "(GET /api/v1/monitoring/cluster)", interval=2)
    with page.expect_response(lambda r: "/api/v1/monitoring/cluster" in r.url, timeout=30000) as answer:
        go(page, f"#/monitoring?nodes={filtered}&range=3600")
    assert answer.value.status == 200
    panel = next(p for p in answer.value.json()["panels"] if p["name"] == "evictions")
    assert any(v for s in panel["series"] for _, v in s["points"]), \
        f"the evictions chart the browser drew is all zero: {panel}"
    chart = page.locator(".chart[data-panel='evictions']")
    chart.wait_for(state="visible", timeout=20000)
    assert int(chart.get_attribute("data-series")) >= 1
    chart.scroll_into_view_if_needed()
    page.screenshot(path=str(out / "site-eviction.png"), full_page=True)

    # 4. A demo node switched off in the browser: its mode labels go, the oversell master takes
    # its batch resources to 0. Then on again (through the API), as make site left it.
    node = "lab-node-1"
    mode_labels = (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL)
    batch_names = (qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE)
    go(page, "#/policy")
    selector = page.locator(f"select.mode[data-node='{node}']")
    assert selector.input_value() == "colocation+oversubscription"
    try:
        selector.select_option("off")
        page.wait_for_selector(f".toast:has-text('node {node} set to mode off')", timeout=10000)

        def switched_off():
            current = core.read_node(node)
            labels = {k: v for k, v in (current.metadata.labels or {}).items() if k in mode_labels}
            batch = {k: v for k, v in (current.status.allocatable or {}).items() if k in batch_names and v != "0"}
            return (labels, batch) if labels or batch else "off"
        wait_for(lambda: switched_off() == "off", 60, f"no mode label and no batch resource (or 0) on {node}",
                 interval=1)
        status, view = call("GET", f"/nodes/{node}")
        assert status == 200 and view["mode"]["name"] == "off", view
        go(page, "#/overview")
        go(page, "#/policy")
        assert page.locator(f"select.mode[data-node='{node}']").input_value() == "off"
        page.screenshot(path=str(out / "site-node-off.png"), full_page=True)
        assert errors == []
    finally:
        status, body = call("PUT", f"/nodes/{node}/colocation", {"mode": "colocation+oversubscription"})
        assert status == 200 and body["mode"] == "colocation+oversubscription", body
        wait_for(lambda: int(core.read_node(node).status.allocatable.get(qos.BATCH_CPU_RESOURCE, "0")) > 0, 180,
                 f"batch-cpu back on {node}", interval=2)
        page.close()


# -- the whole chain on the real node, with Tidal deployed as pods ---------------------------


def _node(core):
    return core.read_node(REAL_NODE)


def test_the_whole_chain_runs_on_the_real_node_with_tidal_deployed_as_pods(lab, site, core):
    """Webhook, agent, oversell leader, Volcano, NRI, static CPU manager, watermark eviction,
    the online wake-up slice and colocation off: every step done by the in-cluster controllers on
    the real node."""
    from kubernetes import client
    from tidal.agent.executor import sched
    from tidal.agent.executor.cgroupfs import device_lines
    from tidal.agent.qos.be_block_io import node_disks
    from tidal_dev.lab.pytest_plugin import wait_for

    assert site.returncode == 0
    image = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-manager") \
        .items[0].spec.containers[0].image
    custom = client.CustomObjectsApi(core.api_client)
    policy = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")
    original_spec = custom.get_cluster_custom_object(*policy)["spec"]
    # Oversell from what the real node's pods use now (a window statistic, to follow this
    # test's own pods within seconds), the whole allocatable as cap, not counting the usage
    # outside the pods (the lab's control plane and this test run share the real node's
    # machine: counted, they leave nothing to oversell); evict quickly.
    custom.patch_cluster_custom_object(*policy, {"spec": {
        "overselling": {"predictor": "max", "windowSeconds": 60, "ratioPercent": 100, "safetyMarginPercent": 0,
                        "includeSystemUsage": False},
        "evictionWatermarks": {"cpu": {"highPercent": 75, "lowPercent": 40}, "dwellSeconds": 3,
                               "cooldownSeconds": 2},
        "features": {"onlineSchedSlice": {"enabled": True},
                     "blockIO": {"enabled": True, "readMiBPerSecond": 50, "writeMiBPerSecond": 0}}}})
    slices, why_not = sched.probe()
    namespace = f"chain-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.list_namespaced_service_account(namespace).items, 30, "default ServiceAccount")
    sleep = ["python3", "-c", "import signal; signal.pause()"]
    try:
        # 1. the in-cluster agent reports the real node, and the leader oversells it
        batch = wait_for(lambda: int(_node(core).status.allocatable.get("kubernetes.io/batch-cpu", "0")) >= 300 and
                         int(_node(core).status.allocatable["kubernetes.io/batch-cpu"]), 120,
                         f"batch-cpu >= 300m on {REAL_NODE}")
        profile = custom.get_cluster_custom_object("colocation.tidal.io", "v1alpha1", "nodeprofiles", REAL_NODE)
        assert profile["status"]["oversell"], profile["status"]

        # 2. a user's BE pod: mutated by the in-cluster webhook, bound by Volcano, limited by NRI
        be = _pod("transcode", image, "BE", {"requests": {"cpu": "200m", "memory": "64Mi"},
                                              "limits": {"cpu": "300m", "memory": "64Mi"}}, sleep)
        core.create_namespaced_pod(namespace, be)
        stored = core.read_namespaced_pod("transcode", namespace)
        assert stored.spec.scheduler_name == "volcano"
        assert stored.spec.priority_class_name == "tidal-be"
        limits = stored.spec.containers[0].resources.limits
        assert limits == {"kubernetes.io/batch-cpu": "300", "kubernetes.io/batch-memory": str(64 * 1024**2)}, limits
        be_pod = wait_for(_running(core, namespace, "transcode"), 120, f"BE pod Running (batch-cpu {batch}m)")
        assert be_pod.spec.node_name == REAL_NODE
        be_cpu = _container_cgroup(be_pod, "cpu")
        # 300 m of a 100 ms period: the agent's round sets it (on cgroup v1 NRI sets no quota at
        # creation: the kernel refuses one above the BE parent's, which moves every round)
        wait_for(lambda: _read(be_cpu / "cpu.cfs_quota_us") == "30000", 30, f"{be_cpu} quota 30000")
        assert int(_read(_container_cgroup(be_pod, "memory") / "memory.limit_in_bytes")) == 64 * 1024**2
        # its reads capped on every disk of the node by the in-cluster agent (features.blockIO: 50 MiB/s,
        # one BE container on the node); cgroup v1 here, where the lab's node has a blkio hierarchy
        be_blkio = _container_cgroup(be_pod, "blkio")
        if (CGROUP / "blkio").is_dir():
            assert be_blkio.is_dir(), f"no {be_blkio}"
            disks = node_disks()
            wait_for(lambda: device_lines(_read(be_blkio / "blkio.throttle.read_bps_device"))
                     == {d.device: str(50 << 20) for d in disks}, 30, f"BE reads capped on {disks} ({be_blkio})")
            # the agent in its pod reads each disk's largest request through its read-only /sys
            agent_log = core.read_namespaced_pod_log(
                core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-agent").items[0]
                .metadata.name, NAMESPACE, container="agent")
            assert all(f"{d.name} ({d.device}, requests ≤ {d.max_request_kib} KiB)" in agent_log for d in disks), \
                agent_log[-3000:]
            # and exports it, scraped by the lab's Prometheus from the pod as a cluster's would
            wait_for(lambda: {s["metric"]["disk"]: int(float(s["value"][1])) for s in _query(
                lab, f'tidal_disk_max_request_kib{{component="tidal-agent",node="{REAL_NODE}"}}')}
                == {d.name: d.max_request_kib for d in disks}, 60,
                f"tidal_disk_max_request_kib of {REAL_NODE}'s disks from the deployed agent in Prometheus", interval=2)
        else:
            print("BE block I/O not checked: no cgroup v1 blkio hierarchy here")
        nri_log = core.read_namespaced_pod_log(
            core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-agent").items[0]
            .metadata.name, NAMESPACE, container="nri")
        assert "transcode" in nri_log, nri_log[-3000:]

        # 3. an HLS pod gets a CPU of its own from the static CPU manager
        hls = _pod("search", image, "HLS", {"requests": {"cpu": "1", "memory": "64Mi"},
                                             "limits": {"cpu": "1", "memory": "64Mi"}}, sleep)
        core.create_namespaced_pod(namespace, hls)
        hls_pod = wait_for(_running(core, namespace, "search"), 120, "HLS pod Running")
        cpus = _read(_container_cgroup(hls_pod, "cpuset") / "cpuset.cpus")
        assert cpus.isdigit(), f"HLS pod's cpuset.cpus is {cpus!r}, not one exclusive CPU"
        core.delete_namespaced_pod("search", namespace, grace_period_seconds=0)
        wait_for(_gone(core, namespace, "search"), 60, "HLS pod gone")

        # 4. an online pod drives the node above the CPU watermark: taint, eviction, kubelet stops
        # it. The node's whole usage counts again (includeSystemUsage on, the default), as on a
        # node where Tidal is the only judge of how hot it is.
        custom.patch_cluster_custom_object(*policy, {"spec": {"overselling": {"includeSystemUsage": True}}})
        spin = ["python3", "-c", "import multiprocessing as m\n"
                "def spin():\n    while True: pass\n"
                "[m.Process(target=spin).start() for _ in range(2)]\nimport signal; signal.pause()"]
        web = _pod("web", image, "LS", {"requests": {"cpu": "100m", "memory": "64Mi"},
                                         "limits": {"cpu": "2", "memory": "128Mi"}}, spin)
        core.create_namespaced_pod(namespace, web)
        web_pod = wait_for(_running(core, namespace, "web"), 120, "LS spinner Running")
        if slices:  # the agent (SYS_NICE, RuntimeDefault seccomp) gave the online pod's threads, of
            # the image's user 65532, the short slice
            tasks = _container_cgroup(web_pod, "cpu") / "tasks"
            wait_for(lambda: {sched.get_attr(int(t)).runtime_ns for t in _read(tasks).split()} == {100_000}, 30,
                     f"the LS pod's threads at a 100 µs slice ({tasks})")
        else:
            print(f"online wake-up slice not checked: {why_not}")
        wait_for(lambda: any(t.key == "colocation.tidal.io/offline-evicting" for t in _node(core).spec.taints or []),
                 90, "offline-evicting taint on the hot node")
        wait_for(_gone(core, namespace, "transcode"), 90, "BE pod evicted and stopped by the kubelet")
        assert not be_cpu.exists(), f"{be_cpu} still there: the kubelet did not stop the container"
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=transcode").items
        assert any(e.reason == "Evicted" or "evict" in (e.message or "").lower() for e in events), \
            [(e.reason, e.message) for e in events]
        assert _gone(core, namespace, "web")() is False  # the online pod is never evicted
        core.delete_namespaced_pod("web", namespace, grace_period_seconds=0)
        wait_for(_gone(core, namespace, "web"), 60, "spinner gone")

        # 5. colocation off: labels, taint and batch resources go, every cgroup value comes back
        be_parent = CGROUP / "cpu/tidal-lab/kubepods/besteffort/cpu.cfs_quota_us"
        off = _switch_colocation(lab, False)
        assert off.returncode == 0, off.stdout + off.stderr

        def clean():
            node = _node(core)
            return (not {k for k in node.metadata.labels if k.startswith("colocation.tidal.io/")}
                    and not [t for t in node.spec.taints or [] if t.key.startswith("colocation.tidal.io/")]
                    and not {k for k in node.status.allocatable if k.startswith("kubernetes.io/batch-")})
        wait_for(clean, 60, "no Tidal label, taint or batch resource on the node")
        wait_for(lambda: not core.list_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/name=tidal-agent").items, 60, "agent pod gone")
        assert _read(be_parent) == "-1", "BE suppression quota not restored"
    finally:
        core.delete_namespace(namespace)
        put_spec(custom, policy, original_spec)
        _switch_colocation(lab, True)


def _pod_token(lab, pod) -> str:
    """The ServiceAccount token the kubelet projected into a running pod (read on the node)."""
    volumes = lab.dir / "node-roots" / REAL_NODE / "var/lib/kubelet/pods" / pod.metadata.uid / "volumes"
    tokens = sorted(volumes.glob("kubernetes.io~projected/kube-api-access-*/token"))
    assert tokens, f"no projected token under {volumes}"
    return tokens[0].read_text().strip()


def _as(lab, token: str):
    from kubernetes import client
    from kubernetes import config as kconfig
    configuration = client.Configuration()
    kconfig.load_kube_config(config_file=str(lab.kubeconfig_path), client_configuration=configuration)
    configuration.cert_file = configuration.key_file = None
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def _status(call) -> int:
    from kubernetes.client.exceptions import ApiException
    try:
        call()
    except ApiException as err:
        return err.status
    return 200


def test_every_controller_has_only_the_rights_its_work_needs(lab, site, core):
    """With the tokens the pods really hold: the agent may write its own node and NodeProfile
    only, the console no more than its ClusterRole, and the manager was never refused."""
    from kubernetes import client
    from tidal_dev.lab.pytest_plugin import wait_for
    assert site.returncode == 0

    def pod_of(app):
        """A running pod of `app` whose token the kubelet has projected (not one being replaced)."""
        def ready():
            for pod in core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={app}").items:
                if pod.metadata.deletion_timestamp is None and pod.status.phase == "Running":
                    return pod
            return None
        return wait_for(ready, 120, f"a running {app} pod")

    label = {"metadata": {"labels": {"tidal-rbac-probe": "x"}}}
    with _as(lab, _pod_token(lab, pod_of("tidal-agent"))) as agent:
        nodes, custom = client.CoreV1Api(agent), client.CustomObjectsApi(agent)
        assert _status(lambda: nodes.patch_node("lab-node-0", label)) == 403
        profile = ("colocation.tidal.io", "v1alpha1", "nodeprofiles")
        assert _status(lambda: custom.patch_cluster_custom_object(*profile, "lab-node-0", {"status": {}})) in (403, 404)
        assert _status(lambda: custom.patch_cluster_custom_object_status(*profile, "lab-node-0",
                                                                         {"status": {}})) in (403, 404)
        assert _status(lambda: nodes.list_namespaced_secret(NAMESPACE)) == 403
        # its own node: allowed (the agent taints it), and the probe label removed again
        assert _status(lambda: nodes.patch_node(REAL_NODE, label)) == 200
        core.patch_node(REAL_NODE, {"metadata": {"labels": {"tidal-rbac-probe": None}}})
    with _as(lab, _pod_token(lab, pod_of("tidal-console"))) as console:
        api = client.CoreV1Api(console)
        assert _status(lambda: api.list_namespaced_secret(NAMESPACE)) == 403
        assert _status(lambda: api.delete_namespaced_pod(pod_of("tidal-agent").metadata.name, NAMESPACE)) == 403
        assert _status(lambda: client.AppsV1Api(console).list_namespaced_deployment(NAMESPACE)) == 403
    for pod in core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-manager").items:
        log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container="manager")
        # a refused call logs as "403 Forbidden: ..." (tidal.kube.errors), a library's as "(403)";
        # not any other "403": CI runs found one in "batch-cpu 4033 -> 14253 m" and one in a
        # timestamp's milliseconds ("22:43:31,403 INFO")
        refused = [line for line in log.splitlines() if "forbidden" in line.lower() or "(403)" in line]
        assert not refused, refused[:5]


def test_a_new_image_tag_rolls_every_controller_and_the_agent_keeps_its_journal(lab, site, core):
    """site.yml with another image: the DaemonSet and Deployments roll onto it; the agent's
    restore journal lives on the host and is the same after the roll; nothing is evicted."""
    from kubernetes import client
    from tidal_dev.lab import realnode
    from tidal_dev.lab.pytest_plugin import wait_for

    from tidal.api import qos

    assert site.returncode == 0
    node = realnode.node_for(lab.dir)
    journal = agent_journal(lab)
    # colocation is on and the BE quota in force every round (cpuSuppression.quota always; the
    # default, onInterference, writes none while BE delays no online pod): the agent suppresses the
    # BE parent's CPU, whose original quota it journals. site.yml merges its policy over this field.
    custom = client.CustomObjectsApi(core.api_client)
    policy = (qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")

    def journalled():
        # the agent saves the journal at each original it records, so a round's other files (the BE
        # idle group's cpu.idle, written first) can be there before the quota: wait for the quota
        originals = journal_originals(lab)
        return originals if any(key.endswith("/cpu.cfs_quota_us") for key in originals) else None
    with be_isolation_patched(custom, policy, {"cpuSuppression": {"quota": "always"}}):
        before = wait_for(journalled, 60, f"the BE parent's original quota in the agent's journal {journal}")
        _roll_and_keep_the_journal(lab, core, node, journal, before)


def _roll_and_keep_the_journal(lab, core, node, journal, before):
    """site.yml with a new tag of the image: every Tidal pod rolls onto it, the agent's journal
    holds every original of ``before`` at the same value (it may record more: files written for
    the first time since), nothing is evicted; site.yml with the original image afterwards."""
    from kubernetes import client
    from tidal_dev.lab import realnode, versions
    from tidal_dev.lab.pytest_plugin import wait_for

    current = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-manager") \
        .items[0].spec.containers[0].image
    upgraded = current + "-upgrade"
    realnode.ctr(versions.bin_dir(), node, "images", "tag", "--force", current, upgraded)
    evictions = len(core.list_event_for_all_namespaces(field_selector="reason=Evicted").items)
    try:
        run = play("playbooks/site.yml", lab, 600, "-e", f"tidal_controllers_image={upgraded}")
        assert run.returncode == 0, (run.stdout + run.stderr)[-15000:]
        apps = client.AppsV1Api(core.api_client)

        def rolled():
            images = {pod.metadata.name: [c.image for c in pod.spec.containers]
                      for pod in core.list_namespaced_pod(NAMESPACE).items
                      if pod.metadata.labels.get("app.kubernetes.io/part-of") == "tidal"
                      and pod.metadata.deletion_timestamp is None}
            return images if images and all(i == [upgraded] * len(i) for i in images.values()) else None
        wait_for(rolled, 180, f"every Tidal pod on {upgraded}")

        def agent_ready():
            status = apps.read_namespaced_daemon_set("tidal-agent", NAMESPACE).status
            return status.updated_number_scheduled == status.number_ready == status.desired_number_scheduled == 1
        wait_for(agent_ready, 120, "the upgraded agent ready")
        # The originals are what the node had before Tidal: the upgraded agent holds the same ones
        # (a lost journal would make it record its predecessor's values as originals).
        def kept():
            after = journal_originals(lab)
            return all(after.get(key) == value for key, value in before.items())
        wait_for(kept, 30, f"the originals {before} kept in the agent's journal across the upgrade",
                 describe=lambda: f"the journal now: {journal.read_text()}")
        assert len(core.list_event_for_all_namespaces(field_selector="reason=Evicted").items) == evictions
    finally:
        back = play("playbooks/site.yml", lab, 600)
        assert back.returncode == 0, (back.stdout + back.stderr)[-15000:]


def test_the_be_idle_group_takes_a_be_container_out_of_kubepods_on_the_real_node(lab, site, core):
    """beIsolation.cpuPriority.idleGroup on (the default; set again here), with Tidal deployed as
    pods: the agent makes the BE idle group (``tidal-be`` at the root of every hierarchy, beside the
    kubelet's cgroup root), idle and bounded as ``kubepods``; the DaemonSet's NRI plugin creates a
    new BE pod's container in ``tidal-be/pod<uid>``, with its batch limits; the kubelet runs the pod
    as any other. Once the pod is deleted the agent removes its directory from every hierarchy, and
    once the switch is off the group itself."""
    from kubernetes import client
    from tidal_dev.lab.pytest_plugin import wait_for

    from tidal.api import qos
    from tidal.api.policy import ColocationPolicy

    assert site.returncode == 0
    custom = client.CustomObjectsApi(core.api_client)
    policy = (qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")
    image = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-manager") \
        .items[0].spec.containers[0].image
    group = {name: CGROUP / name / "tidal-be" for name in ("cpu", "memory")}
    kubepods_memory = CGROUP / "memory/tidal-lab/kubepods/memory.limit_in_bytes"
    namespace = f"idle-{os.getpid()}"
    original_spec = custom.get_cluster_custom_object(*policy)["spec"]
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 30, "default ServiceAccount")
        # oversold from what the real node's pods use (as in the whole chain's test: the machine's
        # own load, counted, leaves nothing to oversell), the BE idle group switched on
        custom.patch_cluster_custom_object(*policy, {"spec": {
            "overselling": {"predictor": "max", "windowSeconds": 60, "ratioPercent": 100, "safetyMarginPercent": 0,
                            "includeSystemUsage": False},
            "beIsolation": {"cpuPriority": {"idleGroup": True}}}})

        def agent_says():  # what explains a group not made or not idle
            agent = core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=tidal-agent").items
            profile = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", REAL_NODE)
            log = core.read_namespaced_pod_log(agent[0].metadata.name, NAMESPACE, container="agent",
                                               tail_lines=40) if agent else "no agent pod"
            return (f"group dirs: {[str(g) for g in group.values() if g.is_dir()]}; policy status: "
                    f"{(profile.get('status') or {}).get('policy')}; agent log:\n{log}")
        wait_for(lambda: (group["cpu"] / "cpu.idle").exists() and _read(group["cpu"] / "cpu.idle") == "1",
                 60, f"the agent's BE idle group {group['cpu']}, idle", describe=agent_says)
        wait_for(lambda: _read(group["memory"] / "memory.limit_in_bytes") == _read(kubepods_memory), 30,
                 "the BE idle group's memory bounded as kubepods'")
        be = _pod("encode", image, "BE", {"requests": {"cpu": "200m", "memory": "64Mi"},
                                          "limits": {"cpu": "300m", "memory": "64Mi"}},
                  ["python3", "-c", "import signal; signal.pause()"])
        wait_for(lambda: int(_node(core).status.allocatable.get("kubernetes.io/batch-cpu", "0")) >= 300, 120,
                 f"batch-cpu >= 300m on {REAL_NODE}")
        core.create_namespaced_pod(namespace, be)

        def pod_says():
            events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=encode").items
            return f"{core.read_namespaced_pod('encode', namespace).status}\n" + \
                "\n".join(f"{e.reason}: {e.message}" for e in events)
        pod = wait_for(_running(core, namespace, "encode"), 120, "the BE pod Running", describe=pod_says)
        container = pod.status.container_statuses[0].container_id.split("://", 1)[1]
        moved = {name: g / f"pod{pod.metadata.uid}" / container for name, g in group.items()}
        assert _read(moved["cpu"] / "cgroup.procs"), f"no process in {moved['cpu']}"
        wait_for(lambda: _read(moved["cpu"] / "cpu.cfs_quota_us") == "30000", 30,  # its 300 m of batch-cpu
                 f"{moved['cpu']} quota 30000 (the agent's round sets it on cgroup v1)")
        assert int(_read(moved["memory"] / "memory.limit_in_bytes")) == 64 * 1024**2
        kubelet_pod = kubelet_pod_cgroup(pod, "cpu")
        assert not (kubelet_pod / container).exists(), f"{container} also in the kubelet's {kubelet_pod}"
        assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready
        core.delete_namespaced_pod("encode", namespace, grace_period_seconds=0)
        wait_for(_gone(core, namespace, "encode"), 60, "the BE pod deleted")
        pod_dirs = [d / "tidal-be" / f"pod{pod.metadata.uid}" for d in _hierarchies()]
        wait_for(lambda: not [d for d in pod_dirs if d.exists()], 60,
                 "the agent removing the pod's directories from the BE idle group in every hierarchy")
        # switched off with no pod left there: the agent removes the group itself, nothing is left
        custom.patch_cluster_custom_object(*policy, {"spec": {"beIsolation": {"cpuPriority": {"idleGroup": False}}}})
        groups = [d / "tidal-be" for d in _hierarchies()]
        wait_for(lambda: not [g for g in groups if g.exists()], 60,
                 "the agent removing the switched-off BE idle group from every hierarchy", describe=agent_says)
    finally:
        core.delete_namespace(namespace)
        put_spec(custom, policy, original_spec)
        # a failed run's residue, unless the policy put back keeps the group (on by default: the agent's)
        if not ColocationPolicy.from_spec(original_spec).be_isolation.cpu_priority.idle_group_in_force:
            for g in (d / "tidal-be" for d in _hierarchies()):
                if g.is_dir() and not any(p.is_dir() for p in g.iterdir()):
                    g.rmdir()


def test_a_be_pod_no_node_can_offer_batch_resources_to_is_warned_at_creation(lab, site, core):
    """overselling.reportingMode: volcanoAnnotations publishes no kubernetes.io/batch-*: the
    deployed webhook learns the mode from its policy cache and the user sees a warning at creation
    (kubectl prints the API server's Warning headers); a pod keeping native requests gets none."""
    from kubernetes import client
    from tidal_dev.lab.pytest_plugin import wait_for

    from tidal.api import qos

    assert site.returncode == 0
    custom = client.CustomObjectsApi(core.api_client)
    policy = (qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")
    original_spec = custom.get_cluster_custom_object(*policy)["spec"]
    body = _pod("encode", "registry.invalid/app:1", "BE", {"requests": {"cpu": "1", "memory": "1Gi"}}, ["true"])
    native = {**body, "metadata": {**body["metadata"], "annotations": {
        **body["metadata"]["annotations"], "colocation.tidal.io/oversell": "false"}}}

    def warning_text(headers) -> str:  # what kubectl prints as "Warning:"
        return " ".join(v for k, v in headers.items() if k.lower() == "warning")

    def warnings(pod):  # a dry run: nothing is stored
        return warning_text(core.create_namespaced_pod_with_http_info("default", pod, dry_run="All")[2])

    assert "volcanoAnnotations" not in warnings(body)
    try:
        custom.patch_cluster_custom_object(*policy, {"spec": {"overselling": {"reportingMode": "volcanoAnnotations"}}})
        wait_for(lambda: "stays Pending" in (w := warnings(body)) and "volcanoAnnotations" in w and w, 30,
                 "the webhook's warning about batch requests no node offers")
        assert "volcanoAnnotations" not in warnings(native)
        # the user creates a Job, not its pods: the warning comes at the Job
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "encode"},
               "spec": {"template": {"metadata": {"annotations": body["metadata"]["annotations"]},
                                     "spec": {**body["spec"], "restartPolicy": "Never"}}}}
        headers = client.BatchV1Api(core.api_client).create_namespaced_job_with_http_info(
            "default", job, dry_run="All")[2]
        assert "spec.template: BE pod asks for kubernetes.io/batch-cpu" in warning_text(headers), headers
    finally:
        put_spec(custom, policy, original_spec)
        # the master undoes what the other mode wrote on its next cycle: no Volcano label left
        # behind for uninstall.yml to miss
        wait_for(lambda: not [n.metadata.name for n in core.list_node().items
                              if "volcano.sh/oversubscription" in (n.metadata.labels or {})], 60,
                 "the oversell master removing the Volcano label it wrote")


def _hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (the v1 controllers' and the unified one), not the aliases."""
    return [d for d in CGROUP.iterdir() if d.is_dir() and not d.is_symlink()]
