"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Every `retry_period` each replica tries to acquire or renew the Lease with compare-and-swap on
its resourceVersion. A replica takes the Lease over only when the holder has not changed the
record for `lease_duration` seconds *as observed locally* (monotonic clock: no trust in the
holder's wall clock), or when it is free (released or empty). The leader considers itself the
leader only until `renew_deadline` seconds after the start of its last successful renewal;
with `renew_deadline` < `lease_duration` minus the write timeout, a deposed or partitioned
leader stops writing before anybody else may start. On a graceful stop the Lease is released
(holder cleared) so that a successor takes over at once.

**A thread of its own** (`run_on_thread`, what the controller runs; issue 46). The controller's
event loop runs up to a queue's whole concurrency of recomputes a turn: at Karmada's size a turn
took seconds, the renewal's answer waited past its 2 s deadline behind them, and the leader
lapsed while the API server answered in 0.1 s. client-go renews from a goroutine of its own;
here the rounds run on a thread with an event loop of its own (its client's connections made
and used there only), which the interpreter schedules between the loop's bytecodes however
long a recompute runs. It stays fail-safe without any help from the busy loop: leadership is
one number, `_leader_until` (the start of the last successful renewal + `renew_deadline`),
written by the thread and read against the clock by every `may_lead` before a write. A thread
that cannot renew (API server unreachable, or itself starved) lets it pass like any failed
renewal, and the next write asks and finds no leadership, whether or not the loop has heard
of the change yet (`on_change` is handed to the loop with `call_soon_threadsafe`). Only that
number and the notification cross threads: nothing else is shared, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from karmadaquota.kube.client import JSON, Api, Conflict, KubeError, NotFound
from karmadaquota.times import format_time

log = logging.getLogger("karmadaquota.controller.leader")

DEFAULT_LEASE_NAME = "karmadaquota-controller"


def identity() -> str:
    """hostname_pid: unique per process, readable in `kubectl get lease -o yaml`."""
    return f"{socket.gethostname()}_{os.getpid()}"


def lease_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


class Leadership(Protocol):
    """What the controller's leader gate reads: a `LeaderElector`, or `AlwaysLeader`."""

    def is_leader(self) -> bool: ...

    def remaining(self) -> float: ...


class AlwaysLeader:
    """For a single replica without election (tests, --leader-elect off)."""

    def is_leader(self) -> bool:
        return True

    def remaining(self) -> float:
        return float("inf")


def may_lead(leadership: Leadership, write_timeout: float) -> bool:
    """Leading, and for longer than a write may take (a deposed leader's last write must end
    before a successor may start)."""
    return leadership.is_leader() and leadership.remaining() > write_timeout


class LeaderElector:
    def __init__(
        self,
        api: Api,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        holder: str | None = None,
        lease_duration: float = 10.0,
        renew_deadline: float = 7.0,
        retry_period: float = 2.0,
        request_timeout: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if renew_deadline + request_timeout >= lease_duration:
            raise ValueError("renew_deadline + request_timeout must be < lease_duration")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.holder = holder or identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.request_timeout = request_timeout
        # settable: the controller that hears of leadership is built after the elector
        self.on_change = on_change or (lambda leader: None)
        self._clock = clock
        self._wall = wall
        self._leader_until = float("-inf")
        self._observed_rv = ""
        self._observed_at = float("-inf")
        self._was_leader = False

    # ---- state -----------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while our last renewal is recent enough to exclude any other leader."""
        return self._clock() < self._leader_until

    def remaining(self) -> float:
        """Seconds of leadership left (<= 0 when not the leader)."""
        return self._leader_until - self._clock()

    def _notify(self) -> None:
        now = self.is_leader()
        if now != self._was_leader:
            self._was_leader = now
            log.info(
                "leadership changed",
                extra={
                    "leader": now,
                    "holder": self.holder,
                    "namespace": self.namespace,
                    "lease": self.name,
                },
            )
            self.on_change(now)

    # ---- one round -------------------------------------------------------------------------

    async def _call(self, method: str, path: str, body: JSON | None = None) -> JSON:
        return await self.api.request(method, path, body, timeout=self.request_timeout)

    def _record(self, holder: str, transitions: int, acquire: str, now: datetime) -> JSON:
        return {
            "holderIdentity": holder,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire,
            "renewTime": format_time(now, micro=True),
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One client-go round: create, take over or renew the Lease. True when leader."""
        started = self._clock()
        now = self._wall()
        try:
            lease = await self._call("GET", lease_path(self.namespace, self.name))
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._record(self.holder, 0, format_time(now, micro=True), now),
            }
            try:
                created = await self._call("POST", lease_path(self.namespace), body)
            except Conflict:
                return False  # another replica created it first
            except NotFound as e:
                log.error(
                    "cannot create the leader Lease: namespace not found",
                    extra={"namespace": self.namespace, "lease": self.name, "error": str(e)},
                )
                return False
            self._observe(created, started)
            self._leader_until = started + self.renew_deadline
            return True
        self._observe(lease, started)
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.holder and started < self._observed_at + duration:
            self._leader_until = float("-inf")
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.holder:
            acquire = str(spec.get("acquireTime") or format_time(now, micro=True))
        else:
            acquire = format_time(now, micro=True)
            transitions += 1
        updated = dict(lease)
        updated["spec"] = {**spec, **self._record(self.holder, transitions, acquire, now)}
        try:
            result = await self._call("PUT", lease_path(self.namespace, self.name), updated)
        except (Conflict, NotFound):
            return False
        self._observe(result, started)
        self._leader_until = started + self.renew_deadline
        return True

    def _observe(self, lease: JSON, at: float) -> None:
        rv = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        if rv != self._observed_rv:
            self._observed_rv = rv
            self._observed_at = at

    async def release(self) -> None:
        """Give the Lease up (graceful stop) so that a successor need not wait it out."""
        if not self.is_leader():
            return
        self._leader_until = float("-inf")
        self._notify()
        try:
            lease = await self._call("GET", lease_path(self.namespace, self.name))
            spec: dict[str, Any] = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.holder:
                return
            now = format_time(self._wall(), micro=True)
            spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now})
            await self._call("PUT", lease_path(self.namespace, self.name), {**lease, "spec": spec})
            log.info(
                "leader Lease released", extra={"namespace": self.namespace, "lease": self.name}
            )
        except (KubeError, OSError, TimeoutError) as e:
            log.warning("leader Lease not released", extra={"error": str(e)})

    async def run(self) -> None:
        """Acquire/renew every retry_period forever (cancel to stop; then call `release`)."""
        while True:
            try:
                await self.try_acquire_or_renew()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # network, 5xx: keep leadership until it runs out
                log.warning(
                    "leader election round failed",
                    # repr: a TimeoutError's str is empty, and which request timed out is
                    # what a lapse is explained with (issue 46)
                    extra={"namespace": self.namespace, "lease": self.name, "error": repr(e)},
                )
            self._notify()
            delay = self.retry_period
            if self._was_leader:
                # wake up in time to notice a lapse even if renewals keep failing
                delay = max(0.0, min(delay, self.remaining()))
            await asyncio.sleep(delay)  # the election period, not synchronisation

    async def run_on_thread(self) -> None:
        """`run` on a thread with an event loop of its own, so that a busy loop here cannot
        lapse leadership (module docstring); `on_change` is called on this loop. Cancel to
        stop: the thread releases the Lease (`release`), closes its client and ends.
        `self.api` must be used by that thread only (a client of its own, or a lane)."""
        loop = asyncio.get_running_loop()
        told = self.on_change

        def tell(leader: bool) -> None:
            with contextlib.suppress(RuntimeError):  # this loop closed: nobody to tell
                loop.call_soon_threadsafe(told, leader)

        self.on_change = tell
        started: asyncio.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = (
            loop.create_future()
        )
        ended: asyncio.Future[None] = loop.create_future()

        async def rounds() -> None:
            task = asyncio.current_task()
            assert task is not None
            loop.call_soon_threadsafe(started.set_result, (asyncio.get_running_loop(), task))
            try:
                await self.run()
            finally:  # cancelled: give the Lease up, from here (its client's loop)
                await self.release()
                close = getattr(self.api, "close", None)
                if close is not None:
                    await close()

        def main() -> None:
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    asyncio.run(rounds())
            finally:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(ended.set_result, None)

        threading.Thread(target=main, name="leader-election", daemon=True).start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            thread_loop, task = await started
            thread_loop.call_soon_threadsafe(task.cancel)
            await ended  # the release: within its requests' deadlines
            raise
        finally:
            self.on_change = told
