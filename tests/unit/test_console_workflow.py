"""The overview's workflow shows what the roles write and a BE Job that works (issue 20).

The kubelet and containerd snippets are compared with what the roles' tasks pass to their
modules: each argument of the task is evaluated with the role's defaults (as Ansible would,
``omit`` leaving the option out) and given to the collection's own pure functions
(``plugins/module_utils``). The example BE Job is reviewed by the admission webhook, and its pod,
once mutated, waits for a node in the right mode (`tidal.console.overview.why_pending`).
"""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import jinja2
import jsonpatch
import pytest
import yaml

from tidal.api import qos
from tidal.console.overview import NodeFacts, why_pending
from tidal.console.workflow import BE_JOB_EXAMPLE, CONTAINERD_NRI_SNIPPET, KUBELET_SNIPPET, workflow
from tidal.manager.admission.review import decide

REPO = Path(__file__).resolve().parents[2]
OMIT = object()


def _module_utils(name: str):
    spec = importlib.util.spec_from_file_location(f"tidal_module_utils_{name}",
                                                  REPO / "plugins" / "module_utils" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _task_arguments(role: str, module: str, task_name: str, skip: set[str]) -> dict:
    """The arguments the role's task passes to `module`, evaluated with the role's defaults."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "present.yml").read_text())
    task = next(t for t in tasks if t.get("name") == task_name)
    environment = jinja2.Environment()
    arguments = {}
    for key, template in task[module].items():
        if key in skip:
            continue
        expression = str(template).strip().removeprefix("{{").removesuffix("}}")
        value = environment.compile_expression(expression)(**defaults, omit=OMIT)
        if value is not OMIT:
            arguments[key] = value
    return arguments


def _body(snippet: str) -> str:
    return "\n".join(line for line in snippet.splitlines() if not line.startswith("#"))


def test_the_kubelet_snippet_is_what_the_role_writes_with_its_defaults():
    kubelet = _module_utils("kubelet")
    arguments = _task_arguments("kubelet_cpu_manager", "tidal.colocation.kubelet_config",
                                "Plan the kubelet configuration", skip={"path", "backup"})
    assert yaml.safe_load(_body(KUBELET_SNIPPET)) == kubelet.desired_keys(**arguments)
    # ... and the file the module writes from a minimal configuration carries exactly those keys.
    _, _, after = kubelet.edit("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
                                     kubelet.desired_keys(**arguments))
    assert after == yaml.safe_load(_body(KUBELET_SNIPPET))


def test_the_containerd_snippet_is_what_the_role_writes_with_its_defaults():
    containerd = _module_utils("containerd")
    arguments = _task_arguments("containerd_nri", "tidal.colocation.containerd_nri", "Plan containerd's configuration",
                                skip={"path", "backup", "mode", "containerd_version"})
    settings = containerd.nri_settings(**arguments)
    assert tomllib.loads(CONTAINERD_NRI_SNIPPET)["plugins"][containerd.NRI_PLUGIN] == settings
    written, _, _ = containerd.set_nri("version = 2\n", settings)
    assert tomllib.loads(written)["plugins"] == tomllib.loads(CONTAINERD_NRI_SNIPPET)["plugins"]


def test_the_steps_show_the_snippets_and_link_to_pages_of_the_console_or_the_docs():
    steps = workflow()["steps"]
    assert [s["title"] for s in steps] == ["Environment preparation", "Policy configuration", "Workload deployment",
                                           "Monitoring"]
    assert [s["text"] for s in steps[0]["snippets"]] \
        == [KUBELET_SNIPPET, CONTAINERD_NRI_SNIPPET]
    assert steps[2]["snippets"][0]["text"] == BE_JOB_EXAMPLE
    for step in steps:
        assert step["link"] is None or step["link"].startswith("#/")
        assert step["docs"] is None or (REPO / step["docs"]).is_file(), step["docs"]


def _request(obj: dict, group: str, kind: str, resource: str) -> dict:
    return {"uid": "u1", "operation": "CREATE", "namespace": "default", "object": obj,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource}}


def test_the_example_be_job_is_admitted_and_its_pods_wait_for_an_oversubscription_node():
    job = yaml.safe_load(BE_JOB_EXAMPLE)
    assert decide(_request(job, "batch", "Job", "jobs")).allowed
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "transcode-x", "namespace": "default",
                                                         **job["spec"]["template"]["metadata"]},
           "spec": job["spec"]["template"]["spec"], "status": {"phase": "Pending"}}
    decision = decide(_request(pod, "", "Pod", "pods"))
    assert decision.allowed, decision.message
    mutated = jsonpatch.apply_patch(pod, list(decision.patch))
    requests = mutated["spec"]["containers"][0]["resources"]["requests"]
    # the limit, when there is one (tidal.manager.admission.batch)
    assert requests == {qos.BATCH_CPU_RESOURCE: "1000", qos.BATCH_MEMORY_RESOURCE: str(512 << 20)}

    def node(labels):
        return NodeFacts("n1", labels, True, False, (), 4000, 8 << 30)
    assert why_pending(mutated, [node({qos.COLOCATION_NODE_LABEL: "true"})]).reason == "NoNodeInMode"
    assert why_pending(mutated, [node({qos.OVERSUBSCRIPTION_NODE_LABEL: "true"})]).reason == "Scheduling"


@pytest.mark.parametrize("snippet", [KUBELET_SNIPPET, CONTAINERD_NRI_SNIPPET, BE_JOB_EXAMPLE])
def test_snippets_end_with_a_newline_and_have_no_tabs(snippet):
    assert snippet.endswith("\n") and "\t" not in snippet
