# SPDX-License-Identifier: Apache-2.0
"""Leader election through a coordination.k8s.io/v1 Lease, with optimistic concurrency.

`LeaderElector.run(work)` acquires the lease (or waits for it to expire), runs `work()` as a
task while renewing, and cancels the task as soon as a renewal has not succeeded within
`renew_deadline` — before the lease can expire for others — so two replicas never both do
the leader's writes. Then it goes back to acquiring. The deadline counts from when the last
successful renewal *began* (its renewTime), and no renewal is begun past it: an attempt takes
up to twice `retry_seconds`, so the work stops by `renew_deadline` + that, within the lease
(10 + 4 s of 15 by default).

Whether another replica's lease has expired is judged on this replica's own monotonic clock, as
client-go's leader election does: from when it first saw the lease's current record (holder and
renewTime), not from the renewTime the holder wrote with its clock. A replica whose wall clock ran
ahead of the holder's would otherwise take a lease that is being renewed, and both would work.
The price: a replica counts the lease's duration from when it saw the last renewal, up to one
`retry_seconds` after it was written, and one new to the lease waits a whole duration even for a
lease long dead. A replica that stops (SIGTERM: `stop` set) releases the lease once its work has
ended, so a rollout's new leader takes it at its next attempt, not a lease's duration later.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any, Awaitable, Callable

from tidal.kube import Conflict, KubeAPI, NotFound, error_summary
from tidal.tasks import cancel_and_wait, sleep_or_stop, within

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def lease_free(spec: dict[str, Any]) -> bool:
    """A lease with no holder (released), no renew time or no duration is free to take."""
    return not spec.get("holderIdentity") or not spec.get("renewTime") or not spec.get("leaseDurationSeconds")


def observed_expired(observed_at: float, duration_seconds: float, now: float) -> bool:
    """A lease whose record this replica first saw at `observed_at` (its monotonic clock) and has
    seen unchanged since has expired once its duration has passed on that clock."""
    return now - observed_at > duration_seconds


def _micro_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: KubeAPI, name: str, namespace: str, identity: str, *, lease_seconds: int = 15,
                 renew_deadline: float = 10.0, retry_seconds: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_seconds, self.renew_deadline, self.retry_seconds = lease_seconds, renew_deadline, retry_seconds
        self.clock = clock
        self.is_leader = False
        self.transitions = 0
        #: the lease's record (holder, renewTime) as last seen, and when it was first seen so
        self._observed: tuple | None = None
        self._observed_at = 0.0

    @property
    def _leases(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    async def try_acquire_or_renew(self) -> bool:
        now = _now()
        try:
            lease = await self.api.get(f"{self._leases}/{self.name}")
        except NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                             "acquireTime": _micro_time(now), "renewTime": _micro_time(now), "leaseTransitions": 0}}
            try:
                await self.api.create(self._leases, body)
                return True
            except Conflict:
                return False
        spec = lease.setdefault("spec", {})
        mine = spec.get("holderIdentity") == self.identity
        record = (spec.get("holderIdentity"), spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        if not mine and not lease_free(spec) and not observed_expired(
                self._observed_at, float(spec["leaseDurationSeconds"]), self.clock()):
            return False
        if not mine:
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = _micro_time(now)
            spec["holderIdentity"] = self.identity
        spec["renewTime"] = _micro_time(now)
        spec["leaseDurationSeconds"] = self.lease_seconds
        try:  # resourceVersion in metadata makes this fail with 409 if someone else wrote first
            await self.api.replace(f"{self._leases}/{self.name}", lease)
        except Conflict:
            return False
        return True

    async def _attempt(self) -> bool:
        try:
            return await within(self.retry_seconds * 2, self.try_acquire_or_renew())
        except Exception as err:  # the API server is unreachable, or refuses: not renewed
            log.warning("lease %s/%s not acquired or renewed: %s", self.namespace, self.name, error_summary(err))
            return False

    async def run(self, work: Callable[[], Awaitable[None]], stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            began = loop.time()
            if not await self._attempt():
                await sleep_or_stop(stop, self.retry_seconds)
                continue
            self.is_leader = True
            self.transitions += 1
            log.info("%s became leader of %s/%s", self.identity, self.namespace, self.name)
            task = asyncio.create_task(work())
            # when the renewal that holds the lease began: the renewTime it wrote is taken then,
            # and others count the lease's duration from it (not from when the write returned)
            last_renewal = began
            try:
                while not stop.is_set() and not task.done():
                    await sleep_or_stop(stop, self.retry_seconds)
                    if loop.time() - last_renewal > self.renew_deadline:
                        break  # no attempt begun past the deadline: one could end after the lease
                    began = loop.time()
                    if await self._attempt():
                        last_renewal = began
                    elif loop.time() - last_renewal > self.renew_deadline:
                        break
                if not stop.is_set() and not task.done():
                    log.warning("%s lost the lease %s/%s: stopping the leader's work",
                                self.identity, self.namespace, self.name)
            finally:
                self.is_leader = False
                await cancel_and_wait(task)  # the work has ended before another try for the lease
                if stop.is_set():
                    await self._release()

    async def _release(self) -> None:
        """Give the lease up on the way out (its work has ended): no holder, so the next replica
        takes it at its next attempt. Failures are logged: the lease then expires as usual."""
        path = f"{self._leases}/{self.name}"
        try:
            async with asyncio.timeout(self.retry_seconds * 2):
                lease = await self.api.get(path)
                spec = lease.setdefault("spec", {})
                if spec.get("holderIdentity") != self.identity:
                    return
                now = _micro_time(_now())
                spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now)
                await self.api.replace(path, lease)
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except Exception as err:  # another replica wrote first (409), or the API is away
            log.warning("lease %s/%s not released (it expires as usual): %s", self.namespace, self.name,
                        error_summary(err))
