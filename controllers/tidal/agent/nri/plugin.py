# SPDX-License-Identifier: Apache-2.0
"""The NRI plugin: registers with the runtime and answers its container events with Tidal's QoS.

One session: connect to the runtime's NRI socket, multiplex it (:mod:`.mux`), serve NRI's
``Plugin`` service on one connection and call its ``Runtime`` service on the other (both
:mod:`.ttrpc`); register (name, index), answer Configure with the events subscribed to, answer
Synchronize with updates for existing containers, then the pod and container events. When the
runtime goes away (restart, timeout that made it drop the plugin) the plugin reconnects with
exponential backoff.

Manners: a handler never fails a runtime request — a pod it cannot read (bad annotation) is
logged and left unadjusted — and never waits on I/O: the decision is pure and in memory. A BE
container whose batch resources are not in its pod's annotations gets the minimum CPU weight at
once and its limits later, from the pod object, through an unsolicited ``UpdateContainers``
request (never from inside an event handler: the runtime holds its lock while it waits for us).

NUMA affinity (``numa``, a :class:`.numa.NUMAPlacer`): an LS container is confined to a NUMA node
at CreateContainer (cpus and mems), kept there at UpdateContainer, and the containers the runtime
reports pinned at Synchronize are learnt; each pin at creation is logged with
:data:`~tidal.agent.qos.numa_affinity.SUCCESS_LOG`, the node engine's line.
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path

from .api import api_pb2 as api
from .api.source import NRI_VERSION
from tidal.agent.qos.numa_affinity import SUCCESS_LOG
from tidal.api import qos
from tidal.tasks import sleep_or_stop, within

from .decisions import (
    BatchRequest,
    ContainerRef,
    Decision,
    LSCpusetHook,
    Resources,
    decide,
    shares_to_millicores,
    sync_updates,
)
from .mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from .placement import PodPlacements, be_idle_group_cgroups_path
from .ttrpc import Client, Handler, Server

__all__ = ["DEFAULT_SOCKET", "PLUGIN_SERVICE", "RUNTIME_SERVICE", "SUBSCRIBED_EVENTS", "PodLookup",
           "TidalNRIPlugin", "container_ref", "current_resources", "event_mask", "linux_resources"]

log = logging.getLogger(__name__)

from .probe import DEFAULT_SOCKET  # noqa: E402  (one definition, importable without protobuf)
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"

SUBSCRIBED_EVENTS = (api.RUN_POD_SANDBOX, api.STOP_POD_SANDBOX, api.REMOVE_POD_SANDBOX,
                     api.CREATE_CONTAINER, api.UPDATE_CONTAINER, api.STOP_CONTAINER)

#: A session at least this long resets the reconnection backoff.
STABLE_SESSION_SECONDS = 10.0

#: Reads a pod's batch requests (per container name) from the pod object: (namespace, name, uid).
PodLookup = Callable[[str, str, str], Awaitable["Mapping[str, BatchRequest] | None"]]


def event_mask(events: Iterable[int]) -> int:
    """NRI's EventMask: bit ``event - 1`` per subscribed event."""
    mask = 0
    for event in events:
        mask |= 1 << (event - 1)
    return mask


def linux_resources(res: Resources) -> api.LinuxResources:
    out = api.LinuxResources()
    if res.cpu_shares is not None:
        out.cpu.shares.value = res.cpu_shares
    if res.cpu_quota is not None:
        out.cpu.quota.value = res.cpu_quota
    if res.cpu_period is not None:
        out.cpu.period.value = res.cpu_period
    if res.cpuset_cpus is not None:
        out.cpu.cpus = res.cpuset_cpus
    if res.cpuset_mems is not None:
        out.cpu.mems = res.cpuset_mems
    if res.memory_limit is not None:
        out.memory.limit.value = res.memory_limit
    return out


def current_resources(res: api.LinuxResources) -> Resources:
    """What a container has now, in the decisions' terms (unset fields are None)."""
    cpu, memory = res.cpu, res.memory
    return Resources(
        cpu_shares=cpu.shares.value if cpu.HasField("shares") else None,
        cpu_quota=cpu.quota.value if cpu.HasField("quota") else None,
        cpu_period=cpu.period.value if cpu.HasField("period") else None,
        memory_limit=memory.limit.value if memory.HasField("limit") else None,
        cpuset_cpus=cpu.cpus or None,
        cpuset_mems=cpu.mems or None,
    )


def container_ref(pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources | None = None,
                  *, creating: bool = False) -> ContainerRef:
    """The decisions' view of a container; ``resources``: the kubelet's (an UpdateContainer's
    request), else the container's own."""
    cpu = (resources if resources is not None else container.linux.resources).cpu
    return ContainerRef(namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid,
                        container_name=container.name, pod_annotations=dict(pod.annotations),
                        container_id=container.id,
                        cpu_request_millicores=shares_to_millicores(cpu.shares.value if cpu.HasField("shares") else 0),
                        cpuset_cpus=cpu.cpus, creating=creating)


def _update(container_id: str, res: Resources) -> api.ContainerUpdate:
    return api.ContainerUpdate(container_id=container_id,
                               linux=api.LinuxContainerUpdate(resources=linux_resources(res)))


class TidalNRIPlugin:
    """Tidal's NRI plugin; ``await plugin.run(stop)`` keeps it connected until ``stop`` is set.

    Args:
        socket_path: the runtime's NRI socket.
        name, index: how the runtime knows the plugin; plugins are called in index order.
        ls_cpuset: cpuset hook for LS containers (tests); ``numa`` is the real one.
        numa: NUMA affinity at creation (:class:`.numa.NUMAPlacer`); None: none.
        pod_lookup: reads batch requests from the pod object when a BE pod lacks the annotation.
        backoff: first and longest wait between connection attempts, seconds.
        call_timeout: limit on the plugin's own calls to the runtime (RegisterPlugin, UpdateContainers).
        be_idle_group: whether BE containers are created in the BE idle group (the policy's
            ``beIsolation.cpuPriority.idleGroup``, :mod:`.placement`), read at a pod's first
            container: its later ones go where it went; None: never.
        nested_quota_rule: the node's cpu controller is cgroup v1, which refuses a CPU quota above
            an ancestor's: BE containers get no quota from the plugin (:mod:`.decisions`).
        batch_resources: whether BE containers get their batch limits here (the policy's
            ``beIsolation.batchResources.enabled``); None: always (no policy to read).
        node_active: whether the node's colocation mode is on (:func:`tidal.api.node_mode.node_mode`);
            while it is off the plugin changes no container, at creation, update or Synchronize:
            the agent is putting back what Tidal changed (restore-pending), and a kubelet's update
            (its CPU manager's, after a restart) must not bring Tidal's limits back. None: on.
    """

    def __init__(self, socket_path: str | Path = DEFAULT_SOCKET, *, name: str = "tidal", index: str = "10",
                 ls_cpuset: LSCpusetHook | None = None, numa=None, pod_lookup: PodLookup | None = None,
                 backoff: tuple[float, float] = (0.5, 30.0), call_timeout: float = 5.0,
                 be_idle_group: Callable[[], bool] | None = None, nested_quota_rule: bool = False,
                 batch_resources: Callable[[], bool] | None = None,
                 node_active: Callable[[], bool] | None = None) -> None:
        if len(index) != 2 or not index.isascii() or not index.isdigit():
            raise ValueError(f"plugin index {index!r}: must be two digits (00-99), as NRI requires")
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
            raise ValueError(f"plugin name {name!r}: must be letters, digits and . _ + - only, as NRI requires")
        self.socket_path = str(socket_path)
        self.name = name
        self.index = index
        self.numa = numa
        self.ls_cpuset = ls_cpuset if ls_cpuset is not None else numa
        self.pod_lookup = pod_lookup
        self.be_idle_group = be_idle_group
        self.placements = PodPlacements()  # which BE pods' containers go in the BE idle group
        self.nested_quota_rule = nested_quota_rule
        self.batch_resources = batch_resources
        self.node_active = node_active
        self.backoff = backoff
        self.call_timeout = call_timeout
        #: Set while registered and configured; cleared when the connection is lost.
        self.ready = asyncio.Event()
        self.runtime: tuple[str, str] | None = None
        self.sessions = 0
        self._client: Client | None = None
        self._looked_up: dict[str, Mapping[str, BatchRequest]] = {}  # pod uid -> from the pod object
        #: container id -> its lifecycle events awaited by a pod-object update ("created" set at
        #: PostCreateContainer, "started" at PostStartContainer)
        self._stages: dict[str, dict[str, asyncio.Event]] = {}
        self._sync_parts: list[api.SynchronizeRequest] = []
        self._tasks: set[asyncio.Task] = set()

    # --- connection ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, serve, reconnect with backoff; return when ``stop`` is set."""
        first, longest = self.backoff
        delay = first
        while not stop.is_set():
            registered = False
            started = time.monotonic()
            try:
                registered = await self._session(stop)
            except (OSError, asyncio.TimeoutError, ConnectionError) as err:
                log.info("NRI: no runtime at %s (%s); retrying in %.1fs", self.socket_path, err, delay)
            except Exception:  # never let a protocol surprise end the agent's NRI path
                log.exception("NRI: session failed; retrying in %.1fs", delay)
            if stop.is_set():
                break
            # back to the first delay only after a session that lasted: a runtime that accepts and
            # drops the plugin at once is not retried in a tight loop
            stable = registered and time.monotonic() - started >= STABLE_SESSION_SECONDS
            delay = first if stable else min(longest, delay * 2)
            await sleep_or_stop(stop, delay * (0.8 + 0.4 * random.random()))
        self.ready.clear()

    async def _session(self, stop: asyncio.Event) -> bool:
        reader, writer = await asyncio.open_unix_connection(self.socket_path)
        mux = Mux(reader, writer)
        # A method of a newer NRI than ours is answered with an empty (no-op) reply, never with
        # an error: an error from a plugin fails the runtime's request.
        server = Server(lambda data: mux.send(PLUGIN_SERVICE_CONN, data), mux.open(PLUGIN_SERVICE_CONN),
                        self._handlers(), lenient_services=frozenset({PLUGIN_SERVICE}))
        client = Client(lambda data: mux.send(RUNTIME_SERVICE_CONN, data), mux.open(RUNTIME_SERVICE_CONN))
        tasks = [asyncio.create_task(t) for t in (mux.run(), server.run(), client.run())]
        stopper = asyncio.create_task(stop.wait())
        self._client = client
        self._sync_parts = []
        self.sessions += 1
        registered = False
        try:
            await client.call(RUNTIME_SERVICE, "RegisterPlugin",
                              api.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index,
                                                        NRI_version=NRI_VERSION),
                              api.Empty, timeout=self.call_timeout)
            registered = True
            log.info("NRI: registered as %s-%s with the runtime at %s", self.index, self.name, self.socket_path)
            await asyncio.wait([tasks[0], stopper], return_when=asyncio.FIRST_COMPLETED)
            if mux.error:
                log.warning("NRI: connection error: %s", mux.error)
            if not stop.is_set():
                log.info("NRI: runtime connection closed; reconnecting")
        finally:
            self.ready.clear()
            self._client = None
            mux.close()
            stopper.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
            writer.close()
        return registered

    async def update_containers(self, updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        """Ask the runtime to update containers (not from inside an event handler); the failed ones."""
        client = self._client
        if client is None:
            raise ConnectionError("NRI plugin is not connected")
        reply = await client.call(RUNTIME_SERVICE, "UpdateContainers", api.UpdateContainersRequest(update=updates),
                                  api.UpdateContainersResponse, timeout=self.call_timeout)
        for failed in reply.failed:
            log.warning("NRI: runtime failed to update container %s", failed.container_id)
        return list(reply.failed)

    # --- the Plugin service ---------------------------------------------------------------------

    def _handlers(self) -> dict[tuple[str, str], Handler]:
        def h(request_type, fn):
            return Handler(request_type, fn)

        methods = {
            "Configure": h(api.ConfigureRequest, self._configure),
            "Synchronize": h(api.SynchronizeRequest, self._synchronize),
            "Shutdown": h(api.Empty, self._shutdown),
            "RunPodSandbox": h(api.RunPodSandboxRequest, self._run_pod),
            "StopPodSandbox": h(api.StopPodSandboxRequest, self._stop_pod),
            "RemovePodSandbox": h(api.RemovePodSandboxRequest, self._remove_pod),
            "CreateContainer": h(api.CreateContainerRequest, self._create_container),
            "UpdateContainer": h(api.UpdateContainerRequest, self._update_container),
            "StopContainer": h(api.StopContainerRequest, self._stop_container),
            # NRI before v0.12 (containerd 2.0-2.2) sends pod events and the post-events here
            "PostCreateContainer": h(api.PostCreateContainerRequest, self._post_create_container),
            "PostStartContainer": h(api.PostStartContainerRequest, self._post_start_container),
            "StateChange": h(api.StateChangeEvent, self._state_change),
        }
        return {(PLUGIN_SERVICE, method): handler for method, handler in methods.items()}

    async def _configure(self, req: api.ConfigureRequest) -> api.ConfigureResponse:
        self.runtime = (req.runtime_name, req.runtime_version)
        log.info("NRI: configured by %s %s (NRI %s, request timeout %d ms)", req.runtime_name,
                 req.runtime_version, req.NRI_version or "?", req.request_timeout)
        events = SUBSCRIBED_EVENTS + ((api.POST_CREATE_CONTAINER, api.POST_START_CONTAINER)
                                      if self.pod_lookup is not None else ())
        return api.ConfigureResponse(events=event_mask(events))

    async def _synchronize(self, req: api.SynchronizeRequest) -> api.SynchronizeResponse:
        # A runtime with more state than one message holds splits it (more=True on all but the
        # last part); the answer to a non-final part must be empty with more=True.
        self._sync_parts.append(req)
        if req.more:
            return api.SynchronizeResponse(more=True)
        parts, self._sync_parts = self._sync_parts, []
        pods = {pod.id: pod for part in parts for pod in part.pods}
        containers = [c for part in parts for c in part.containers]
        live = [c for c in containers if c.pod_sandbox_id in pods
                and c.state in (api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED)]
        # what ended while the plugin was away (no StopContainer, RemovePodSandbox came) is forgotten
        if self.numa is not None:
            self.numa.keep_only({c.id for c in live})
        uids = {pod.uid for pod in pods.values()}
        self._looked_up = {uid: got for uid, got in self._looked_up.items() if uid in uids}
        self.placements.keep_only(uids)
        for c in containers:  # an exited container of a pod still there tells where the pod is too
            if c.pod_sandbox_id in pods:
                self.placements.learn(pods[c.pod_sandbox_id].uid, c.linux.cgroups_path)
        rows = []
        for c in live:
            pod = pods[c.pod_sandbox_id]
            ref = container_ref(pod, c)
            if self.numa is not None:
                self.numa.learn(ref, c.linux.resources.cpu.mems)
            rows.append((c.id, ref, current_resources(c.linux.resources)))
        updates = []
        if not self._active():
            log.info("NRI: synchronized %d pods, %d containers; the node's colocation mode is off: no updates",
                     len(pods), len(containers))
            self.ready.set()
            return api.SynchronizeResponse()
        for container_id, decision in sync_updates(rows, ls_cpuset=self.ls_cpuset,
                                                   nested_quota_rule=self.nested_quota_rule,
                                                   looked_up=self._looked_up, batch_resources=self._batch_on()):
            log.info("NRI: synchronize: container %s (%s): %s", container_id, decision.level,
                     decision.resources.describe())
            updates.append(_update(container_id, decision.resources))
        log.info("NRI: synchronized %d pods, %d containers in %d message(s); %d updates", len(pods),
                 len(containers), len(parts), len(updates))
        self.ready.set()
        return api.SynchronizeResponse(update=updates)

    async def _shutdown(self, req: api.Empty) -> api.Empty:
        log.info("NRI: runtime is shutting down")
        return api.Empty()

    async def _run_pod(self, req: api.RunPodSandboxRequest) -> api.RunPodSandboxResponse:
        log.debug("NRI: pod %s/%s (%s) started", req.pod.namespace, req.pod.name, req.pod.uid)
        return api.RunPodSandboxResponse()

    async def _stop_pod(self, req: api.StopPodSandboxRequest) -> api.StopPodSandboxResponse:
        return api.StopPodSandboxResponse()

    async def _remove_pod(self, req: api.RemovePodSandboxRequest) -> api.RemovePodSandboxResponse:
        self._looked_up.pop(req.pod.uid, None)
        self.placements.forget(req.pod.uid)
        if self.numa is not None:
            self.numa.forget_pod(req.pod.uid)
        return api.RemovePodSandboxResponse()

    def _active(self) -> bool:
        return self.node_active is None or self.node_active()

    def _batch_on(self) -> bool:
        return self.batch_resources is None or self.batch_resources()

    def _decide(self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources | None = None,
                *, creating: bool = False) -> tuple[ContainerRef, Decision]:
        ref = container_ref(pod, container, resources, creating=creating)
        decision = decide(ref, ls_cpuset=self.ls_cpuset, looked_up=self._looked_up.get(pod.uid),
                          nested_quota_rule=self.nested_quota_rule, batch_resources=self._batch_on())
        if decision.problem:
            log.warning("NRI: %s/%s container %s: %s", ref.namespace, ref.pod_name, ref.container_name,
                        decision.problem)
        return ref, decision

    async def _create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        if not self._active():
            log.info("NRI: create %s/%s container %s: the node's colocation mode is off, left as it is",
                     req.pod.namespace, req.pod.name, req.container.name)
            return api.CreateContainerResponse()
        ref, decision = self._decide(req.pod, req.container, creating=True)
        reply = api.CreateContainerResponse()
        res = decision.resources
        if res:
            reply.adjust.linux.resources.CopyFrom(linux_resources(res))
            log.info("NRI: create %s/%s container %s (%s): %s", ref.namespace, ref.pod_name, ref.container_name,
                     decision.level, res.describe())
            if res.cpuset_mems is not None:
                log.info(SUCCESS_LOG, ref.namespace, ref.pod_name, ref.container_name, res.cpuset_cpus,
                         res.cpuset_mems)
        if decision.level is qos.QoSLevel.BE and self.be_idle_group is not None:
            moved = be_idle_group_cgroups_path(req.container.linux.cgroups_path)
            # where the pod's earlier containers went, else where the switch says (placement.py)
            if moved is not None and self.placements.place(req.pod.uid, self.be_idle_group()):
                reply.adjust.linux.cgroups_path = moved
                log.info("NRI: create %s/%s container %s in the BE idle group: %s", ref.namespace, ref.pod_name,
                         ref.container_name, moved)
        if decision.needs_lookup and self.pod_lookup is not None:
            self._stages[req.container.id] = {"created": asyncio.Event(), "started": asyncio.Event()}
            self._spawn(self._resolve_later(ref, req.container.id))
        return reply

    async def _update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        if not self._active():
            return api.UpdateContainerResponse()
        ref, decision = self._decide(req.pod, req.container,
                                     req.linux_resources if req.HasField("linux_resources") else None)
        reply = api.UpdateContainerResponse()
        if decision.resources:
            # The update targets the container being updated, so the runtime merges it into the
            # kubelet's request instead of undoing the limits set at creation.
            reply.update.append(_update(req.container.id, decision.resources))
            log.info("NRI: update %s/%s container %s (%s): keep %s", ref.namespace, ref.pod_name,
                     ref.container_name, decision.level, decision.resources.describe())
        return reply

    async def _state_change(self, req: api.StateChangeEvent) -> api.Empty:
        if req.event == api.RUN_POD_SANDBOX:
            await self._run_pod(api.RunPodSandboxRequest(pod=req.pod))
        elif req.event == api.REMOVE_POD_SANDBOX:
            await self._remove_pod(api.RemovePodSandboxRequest(pod=req.pod))
        elif req.event == api.POST_CREATE_CONTAINER:
            await self._post_create_container(api.PostCreateContainerRequest(pod=req.pod, container=req.container))
        elif req.event == api.POST_START_CONTAINER:
            await self._post_start_container(api.PostStartContainerRequest(pod=req.pod, container=req.container))
        return api.Empty()

    def _reached(self, container_id: str, stage: str) -> None:
        stages = self._stages.get(container_id)
        if stages is not None:
            stages[stage].set()

    async def _post_create_container(self, req: api.PostCreateContainerRequest) -> api.PostCreateContainerResponse:
        self._reached(req.container.id, "created")
        return api.PostCreateContainerResponse()

    async def _post_start_container(self, req: api.PostStartContainerRequest) -> api.PostStartContainerResponse:
        self._reached(req.container.id, "started")
        return api.PostStartContainerResponse()

    async def _stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        if self.numa is not None:
            self.numa.forget(req.container.id)
        log.debug("NRI: container %s of %s/%s stopped", req.container.name, req.pod.namespace, req.pod.name)
        return api.StopContainerResponse()

    # --- batch resources from the pod object ----------------------------------------------------

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve_later(self, ref: ContainerRef, container_id: str) -> None:
        """Read the pod object while the runtime creates the container; once it exists
        (PostCreateContainer), and again once it runs (PostStartContainer), ask the runtime to
        update it."""
        assert self.pod_lookup is not None
        stages = self._stages[container_id]
        try:
            try:
                requests = await within(self.call_timeout,
                                        self.pod_lookup(ref.namespace, ref.pod_name, ref.pod_uid))
            except Exception as err:
                log.warning("NRI: cannot read batch resources of %s/%s: %s", ref.namespace, ref.pod_name, err)
                return
            if requests is None:
                return
            self._looked_up[ref.pod_uid] = requests
            decision = decide(ref, ls_cpuset=self.ls_cpuset, looked_up=requests,
                              nested_quota_rule=self.nested_quota_rule, batch_resources=self._batch_on())
            if not decision.resources:
                return
            update = _update(container_id, decision.resources)
            # Once created, and again once started: containerd applies an update that arrives
            # while the container is being started to its spec only, and the task then starts
            # with the creation-time values (seen under load). The second update is a no-op
            # when the first one reached the cgroups.
            for stage, event in stages.items():
                try:
                    await within(60, event.wait())
                except TimeoutError:
                    log.warning("NRI: container %s of %s/%s was not %s within 60 s; not updating it",
                                ref.container_name, ref.namespace, ref.pod_name, stage)
                    return
                try:
                    failed = await self.update_containers([update])
                except Exception as err:
                    log.warning("NRI: update of container %s (%s) failed: %s", container_id, stage, err)
                    continue
                if failed:
                    log.warning("NRI: the runtime could not update container %s of %s/%s (%s)",
                                ref.container_name, ref.namespace, ref.pod_name, stage)
                    continue
                log.info("NRI: %s/%s container %s (BE, from the pod object, %s): %s", ref.namespace,
                         ref.pod_name, ref.container_name, stage, decision.resources.describe())
        finally:
            self._stages.pop(container_id, None)
