"""The fault suite's fixtures: Tidal deployed as pods on the lab's real node once for the
suite (playbooks/site.yml without the demo, with the manager reconciling a copy of Volcano's
scheduler configuration in a ConfigMap; playbooks/uninstall.yml afterwards), a policy that
lets the real node oversell and never evicts for the machine's own load, a BE pod on batch
resources held by the agent and the NRI plugin, and the recovery times measured."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.policy import put_spec
from tidal_dev.testing.site import (BATCH_PREFIX, REAL_NODE, TIDAL_PREFIX, agent_state_dir, container_cgroup, gone,
                                    play, read, running, tidal_pods)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_helpers import (BE_QUOTA_US, POLICY, SUITE_POLICY, VOLCANO_CONFIGMAP, VOLCANO_KEY,  # noqa: E402
                           VOLCANO_NAMESPACE, VOLCANO_TARGET, _namespace_gone, batch_cpu, be_pod,
                           now_utc, settled)

# The recovery times measured by the suite, by fault (the README's table is made from them).
RECOVERY_FILE = Path(__file__).resolve().parents[1] / "output" / "faults-recovery.json"


@pytest.fixture(scope="package")
def core(lab):
    with lab.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture(scope="package")
def custom(core):
    return client.CustomObjectsApi(core.api_client)


def _volcano_configmap(lab, core) -> None:
    """The ConfigMap the suite's manager reconciles as Volcano's scheduler configuration (the
    lab's Volcano reads a file, `volcano-scheduler.conf`: the ConfigMap starts as its copy)."""
    try:
        core.create_namespace({"metadata": {"name": VOLCANO_NAMESPACE}})
    except ApiException as err:
        if err.status != 409:
            raise
    body = {"metadata": {"name": VOLCANO_CONFIGMAP},
            "data": {VOLCANO_KEY: (lab.dir / "volcano-scheduler.conf").read_text()}}
    try:
        core.create_namespaced_config_map(VOLCANO_NAMESPACE, body)
    except ApiException as err:
        if err.status != 409:
            raise
        core.replace_namespaced_config_map(VOLCANO_CONFIGMAP, VOLCANO_NAMESPACE, body)


STATE_FS = "tidal-fault-state"  # the source name of the suite's tmpfs in /proc/mounts
STATE_FS_SIZE = "64m"  # the history file is capped at 16 MiB, written beside itself


def _state_fs_mounted(path: Path) -> bool:
    return any(line.split()[:2] == [STATE_FS, str(path)] for line in Path("/proc/mounts").read_text().splitlines())


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=True)  # a container's mount still closing


@pytest.fixture(scope="package")
def agent_state_fs(lab, core):
    """The agent's state directory on the real node (its hostPath) on a tmpfs of its own for the
    suite, mounted before Tidal is deployed, so the journal-disk-full test fills a real
    filesystem the agent's container shares, not the machine's disk; unmounted after Tidal is
    removed. None (that test skips) when Tidal already runs on a plain directory (reused with
    TIDAL_FAULTS_KEEP: a container only sees the mounts it started with) or mounting fails."""
    state = agent_state_dir(lab)
    keep = os.environ.get("TIDAL_FAULTS_KEEP") == "1"
    deployed_before = bool(tidal_pods(core, "tidal-agent"))
    if _state_fs_mounted(state) and not deployed_before:
        _umount(state)  # left by a session that did not end: its contents are no agent's any more
    if not _state_fs_mounted(state):
        state.mkdir(parents=True, exist_ok=True)
        if deployed_before or any(state.iterdir()):
            yield None
            return
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STATE_FS_SIZE},mode=0755", STATE_FS,
                                  str(state)], capture_output=True, text=True)
        if mounted.returncode != 0:
            print(f"the agent's state directory stays on the disk: mount: {mounted.stderr.strip()}")
            yield None
            return
    yield state
    if not keep:
        _umount(state)


@pytest.fixture(scope="package")
def deployed(lab, core, agent_state_fs):
    """Tidal as pods on the real node (site.yml without the demo); removed again afterwards,
    which must leave no Tidal label, taint or batch resource on the real node.
    TIDAL_FAULTS_KEEP=1 (while working on a fault): leave it deployed, and reuse it next time."""
    keep = os.environ.get("TIDAL_FAULTS_KEEP") == "1"
    volcano = ("-e", f"site_volcano_scheduler_config={VOLCANO_TARGET}")
    if not (keep and len(tidal_pods(core, "tidal-manager")) == 2):
        _volcano_configmap(lab, core)
        started = time.monotonic()
        run = play("playbooks/site.yml", lab, 900, "-e", "tidal_demo=false", *volcano)
        assert run.returncode == 0, (run.stdout + run.stderr)[-15000:]
        print(f"site.yml (no demo): {time.monotonic() - started:.0f}s")
    yield
    if keep:
        return
    started = time.monotonic()
    down = play("playbooks/uninstall.yml", lab, 240, *volcano)
    assert down.returncode == 0, down.stdout[-5000:] + down.stderr
    core.delete_namespace(VOLCANO_NAMESPACE)
    print(f"uninstall.yml: {time.monotonic() - started:.0f}s")
    node = core.read_node(REAL_NODE)
    assert not {k for k in node.metadata.labels if k.startswith(TIDAL_PREFIX)}
    assert not [t for t in (node.spec.taints or []) if t.key.startswith(TIDAL_PREFIX)]
    assert not {k for k in node.status.allocatable if k.startswith(BATCH_PREFIX)}


@pytest.fixture(autouse=True)
def settled_first(deployed, core, request):
    """Every fault test starts from the settled deployment (fault_helpers.settled: every Tidal pod
    present and ready, the agent acting on the node) and, for the tests that use it, the suite's
    BE pod running (started again, said so, when a test before lost it: deleted, or ended — the
    kubelet's eviction under the memory-pressure test's pressure may reach it after that test's
    end), whatever the test before it left behind: one test's failure must not fail the tests
    after it."""
    wait_for(lambda: not settled(core), 180, "the deployment settled before the test",
             describe=lambda: "; ".join(settled(core)))
    if "workload" in request.fixturenames:
        namespace, image = request.getfixturevalue("workload"), request.getfixturevalue("image")
        try:
            pod = core.read_namespaced_pod("transcode", namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            pod = None
        if pod is None or pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
            how = "deleted" if pod is None or pod.metadata.deletion_timestamp else \
                f"{pod.status.phase}, {pod.status.reason}: {pod.status.message}"
            print(f"the suite's BE pod {namespace}/transcode was lost by a test before ({how}): started again")
            if pod is not None and pod.metadata.deletion_timestamp is None:
                core.delete_namespaced_pod("transcode", namespace, grace_period_seconds=0)
            _start_suite_be_pod(core, namespace, image)


@pytest.fixture(scope="package")
def suite_policy(deployed, custom):
    """The suite's policy fields merged into the ColocationPolicy; the spec put back afterwards
    (tests that delete the policy create it again with the suite's spec)."""
    original = custom.get_cluster_custom_object(*POLICY)["spec"]
    custom.patch_cluster_custom_object(*POLICY, {"spec": SUITE_POLICY})
    spec = custom.get_cluster_custom_object(*POLICY)["spec"]
    yield spec
    try:
        put_spec(custom, POLICY, original)
    except ApiException as err:
        if err.status != 404:
            raise
        custom.create_cluster_custom_object(*POLICY[:3], {
            "apiVersion": "colocation.tidal.io/v1alpha1", "kind": "ColocationPolicy",
            "metadata": {"name": "default"}, "spec": original})


@pytest.fixture(scope="package")
def image(core, deployed):
    return tidal_pods(core, "tidal-manager")[0].spec.containers[0].image


@pytest.fixture(scope="package")
def workload(core, suite_policy, image):
    """A namespace with a BE pod on the real node's batch resources (300 m, 64 MiB), Running
    and held to its quota (its container's and its pod cgroup's); deleted after the suite."""
    namespace = f"faults-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: core.list_namespaced_service_account(namespace).items, 30, "default ServiceAccount")
    wait_for(lambda: batch_cpu(core) >= 300 and batch_cpu(core), 120, f"batch-cpu >= 300m on {REAL_NODE}")
    _start_suite_be_pod(core, namespace, image)
    yield namespace
    core.delete_namespace(namespace)
    wait_for(lambda: _namespace_gone(core, namespace), 120, f"namespace {namespace} deleted")


def _start_suite_be_pod(core, namespace: str, image: str) -> None:
    """The suite's BE pod `transcode` created (once the one before it is gone) and Running, held
    to its quota by the NRI plugin and the agent."""
    wait_for(gone(core, namespace, "transcode"), 150, "the suite's BE pod before it gone")
    core.create_namespaced_pod(namespace, be_pod("transcode", image))
    pod = wait_for(running(core, namespace, "transcode"), 120, "the BE pod Running")
    wait_for(lambda: read(container_cgroup(pod, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US, 30,
             "the BE pod's CPU quota from its batch-cpu")  # the NRI plugin's, at creation
    wait_for(lambda: read(container_cgroup(pod, "cpu").parent / "cpu.cfs_quota_us") == BE_QUOTA_US, 30,
             "the BE pod cgroup's CPU quota")  # the agent's, a round later


@pytest.fixture(scope="session")
def recovery():
    """record(fault, seconds, detail): one measured recovery, printed and kept in
    tests/output/faults-recovery.json (the README's table quotes them)."""
    RECOVERY_FILE.parent.mkdir(parents=True, exist_ok=True)
    try:
        figures = json.loads(RECOVERY_FILE.read_text())
    except (OSError, ValueError):
        figures = {}

    def record(fault: str, seconds: float, detail: str = "") -> None:
        print(f"recovery: {fault}: {seconds:.1f}s {detail}")
        figures[fault] = {"seconds": round(seconds, 1), "detail": detail,
                          "measured": now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")}
        RECOVERY_FILE.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return record
