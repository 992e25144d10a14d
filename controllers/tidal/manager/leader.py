# SPDX-License-Identifier: Apache-2.0
"""Leader election through a coordination.k8s.io/v1 Lease, with optimistic concurrency.

`LeaderElector.run(work)` acquires the lease (or waits for it to expire), runs `work()` as a
task while renewing, and cancels the task as soon as a renewal has not succeeded within
`renew_deadline` — before the lease can expire for others — so two replicas never both do
the leader's writes. Then it goes back to acquiring.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Awaitable, Callable

from tidal.kube import api_status

log = logging.getLogger(__name__)


def api_error_summary(err: BaseException) -> str:
    """One line for an API error: the status and the server's message (a missing namespace
    reads 'namespaces "tidal-system" not found'), not the whole response with its headers."""
    status = getattr(err, "status", None)
    body = getattr(err, "body", None)
    if status is None or not body:
        return str(err) or type(err).__name__
    message = api_status(err).get("message") or body
    return f"{status} {getattr(err, 'reason', '') or ''}: {message}".replace("\n", " ")[:500]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def lease_expired(renew_time: datetime.datetime | None, duration_seconds: int | None,
                  now: datetime.datetime) -> bool:
    """A lease with no renew time or duration is free; otherwise it expires after its duration."""
    if renew_time is None or not duration_seconds:
        return True
    if renew_time.tzinfo is None:
        renew_time = renew_time.replace(tzinfo=datetime.timezone.utc)
    return now > renew_time + datetime.timedelta(seconds=duration_seconds)


class LeaderElector:
    def __init__(self, api, name: str, namespace: str, identity: str, *, lease_seconds: int = 15,
                 renew_deadline: float = 10.0, retry_seconds: float = 2.0) -> None:
        from kubernetes_asyncio import client
        self.leases = client.CoordinationV1Api(api)
        self.client = client
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_seconds, self.renew_deadline, self.retry_seconds = lease_seconds, renew_deadline, retry_seconds
        self.is_leader = False
        self.transitions = 0

    async def try_acquire_or_renew(self) -> bool:
        from kubernetes_asyncio.client.exceptions import ApiException
        now = _now()
        try:
            lease = await self.leases.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            body = self.client.V1Lease(
                metadata=self.client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self.client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.lease_seconds,
                                             acquire_time=now, renew_time=now, lease_transitions=0))
            try:
                await self.leases.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as create_err:
                if create_err.status == 409:
                    return False
                raise
        spec = lease.spec
        mine = spec.holder_identity == self.identity
        if not mine and not lease_expired(spec.renew_time, spec.lease_duration_seconds, now):
            return False
        if not mine:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
            spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = self.lease_seconds
        try:  # resourceVersion in metadata makes this fail with 409 if someone else wrote first
            await self.leases.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    async def _attempt(self) -> bool:
        try:
            return await asyncio.wait_for(self.try_acquire_or_renew(), timeout=self.retry_seconds * 2)
        except Exception as err:  # the API server is unreachable, or refuses: not renewed
            log.warning("lease %s/%s not acquired or renewed: %s", self.namespace, self.name, api_error_summary(err))
            return False

    async def run(self, work: Callable[[], Awaitable[None]], stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            if not await self._attempt():
                await _sleep_or_stop(stop, self.retry_seconds)
                continue
            self.is_leader = True
            self.transitions += 1
            log.info("%s became leader of %s/%s", self.identity, self.namespace, self.name)
            task = asyncio.create_task(work())
            last_renewal = loop.time()
            try:
                while not stop.is_set() and not task.done():
                    await _sleep_or_stop(stop, self.retry_seconds)
                    if await self._attempt():
                        last_renewal = loop.time()
                    elif loop.time() - last_renewal > self.renew_deadline:
                        log.warning("%s lost the lease %s/%s: stopping the leader's work",
                                    self.identity, self.namespace, self.name)
                        break
            finally:
                self.is_leader = False
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - work ends either way
                    pass


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        pass
