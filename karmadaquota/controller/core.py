"""The controller's state and its I/O shell around the pure recompute.

Events (from kopf), relists and member pod watches fold into the binding index, the quota
store and the member pod tables, and mark namespaces dirty; the `DirtyQueue` then flushes each
dirty namespace: every quota of it is recomputed from scratch (`recompute.recompute`) and, on
the leader only, written with compare-and-swap when its status differs. A lost CAS re-reads the
quota and re-applies the recompute to the fresh object, so reservations the webhook added in the
meantime are kept. Nothing is written before bindings and quotas have been listed in full.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from karmadaquota.controller import recompute as rc
from karmadaquota.controller import status as st
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.index import BindingIndex, Observed, parse_rv, safe_observe
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.store import QuotaStore, StoredQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, Api, Conflict, Gone, KubeError, NotFound

log = logging.getLogger("karmadaquota.controller")


class Leadership(Protocol):
    def is_leader(self) -> bool: ...

    def remaining(self) -> float: ...


class AlwaysLeader:
    """For a single replica without election (tests, --leader-elect off)."""

    def is_leader(self) -> bool:
        return True

    def remaining(self) -> float:
        return float("inf")


@dataclass
class Settings:
    quiet: float = 0.03
    max_delay: float = 0.25
    write_timeout: float = 2.0
    max_attempts: int = 6
    # after a lost compare-and-swap: wait up to this long (jittered, doubling) before re-reading,
    # so that a burst of webhook reservation writes is not raced head-on
    conflict_backoff: float = 0.01
    page_size: int = 500
    member_watch: bool = True
    # a reservation whose binding has not been seen this long is checked against the API
    # server: a create refused after admission (AlreadyExists, another webhook) holds quota
    # only until then instead of until its expiration
    orphan_grace: float = 2.0


class Controller:
    def __init__(
        self,
        api: Api,
        metrics: ControllerMetrics,
        leadership: Leadership,
        settings: Settings | None = None,
        members: Members | None = None,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.leadership = leadership
        self.settings = settings or Settings()
        self.index = BindingIndex()
        self.quotas = QuotaStore()
        self.members = members
        self.synced = asyncio.Event()
        self.dirty = DirtyQueue(
            self.flush, quiet=self.settings.quiet, max_delay=self.settings.max_delay
        )
        self.writes = 0
        self._unseen: dict[str, float] = {}  # reservation uid -> loop time first seen unobserved

    # ---- inputs ----------------------------------------------------------------------------

    def _mark(self, namespace: str) -> None:
        if self.quotas.has(namespace):
            self.dirty.mark(namespace)

    def mark_all(self) -> None:
        self.dirty.mark_many(self.quotas.namespaces())

    def member_changed(self, namespaces: Collection[str] | None) -> None:
        if namespaces is None:
            self.mark_all()
        else:
            for ns in namespaces:
                self._mark(ns)

    def binding_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid", ""))
        rv = parse_rv(meta.get("resourceVersion"))
        if event_type == "DELETED":
            changed = self.index.remove(ns, uid, rv)
        else:
            have = self.index.get(ns, uid)
            if have is not None and rv and have.rv == rv:
                return  # already indexed at this version (our relist, or kopf's own listing)
            seen = safe_observe(obj, self.index.intern)
            if seen is None:
                return
            changed = self.index.apply(seen)
        self.metrics.bindings_indexed.set(len(self.index))
        if changed:
            self._mark(ns)

    def quota_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if event_type == "DELETED":
            if self.quotas.remove(ns, name, parse_rv(meta.get("resourceVersion"))):
                self.metrics.forget_quota(ns, name)
            return
        have = self.quotas.get(ns, name)
        if have is not None and have.rv and have.rv == parse_rv(meta.get("resourceVersion")):
            return  # the echo of our own write (already folded in) or a relisted copy
        if self.quotas.update(obj) is not None:
            self.dirty.mark(ns)

    # ---- full resync -----------------------------------------------------------------------

    async def _list_all(self, path: str) -> tuple[list[JSON], int]:
        items: list[JSON] = []
        params = {"limit": str(self.settings.page_size)}
        rv = 0
        for _page in range(1_000_000):
            doc = await self.api.get(path, params)
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            rv = parse_rv(meta.get("resourceVersion"))
            token = meta.get("continue")
            if not token:
                break
            params = {**params, "continue": str(token)}
            await asyncio.sleep(0)  # yield between pages: never hog the loop
        return items, rv

    async def resync(self) -> None:
        """List bindings and quotas in full, fold them in, recompute every quota."""
        for _attempt in range(5):
            try:
                bindings, b_rv = await self._list_all(paths.bindings())
                quotas, q_rv = await self._list_all(paths.quotas())
                break
            except Gone:  # a continue token expired mid-list
                log.info("list expired while paging; listing again")
        else:
            raise RuntimeError("could not list bindings and quotas (continue tokens expired)")
        observed: list[Observed] = []
        for i, obj in enumerate(bindings):
            meta = obj.get("metadata") or {}
            have = self.index.get(str(meta.get("namespace", "")), str(meta.get("uid", "")))
            rv = parse_rv(meta.get("resourceVersion"))
            if have is not None and rv and have.rv == rv and not meta.get("deletionTimestamp"):
                observed.append(Observed(str(meta["namespace"]), str(meta["uid"]), rv, have))
            else:
                seen = safe_observe(obj, self.index.intern)
                if seen is not None:
                    observed.append(seen)
            if i % 500 == 499:
                await asyncio.sleep(0)
        self.index.replace(observed, b_rv)
        self.quotas.replace(quotas, q_rv)
        self.metrics.bindings_indexed.set(len(self.index))
        self.metrics.resyncs.inc()
        first = not self.synced.is_set()
        self.synced.set()
        self.metrics.synced.set(1)
        log.info(
            "full resync",
            extra={"bindings": len(self.index), "quotas": len(self.quotas), "first": first},
        )
        self.mark_all()

    async def resync_forever(self, period: float) -> None:
        """Resync now, then every `period` seconds (errors are logged and retried)."""
        delay = 0.0
        while True:
            await asyncio.sleep(delay)  # the resync period, not synchronisation
            try:
                await self.resync()
                delay = period
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("full resync failed; retrying", extra={"error": str(e)})
                delay = min(period, 2.0)

    # ---- flush -----------------------------------------------------------------------------

    def _inputs(self, namespace: str) -> rc.Inputs:
        return rc.Inputs(
            bindings=self.index.bindings(namespace),
            deleted=self.index.deleted,
            members=self.members.views() if self.members is not None else (),
            member_watch=self.settings.member_watch,
        )

    async def flush(self, namespace: str) -> None:
        """Recompute every quota of `namespace`; the leader writes those that differ."""
        contended = False
        for stored in self.quotas.quotas(namespace):
            contended = not await self._sync_quota(stored) or contended
        if contended:  # the webhook is busy writing reservations: come back very soon
            loop = asyncio.get_running_loop()
            self.dirty.mark_at(namespace, loop.time() + 0.05 + random.random() * 0.1)
        if self._can_write() and await self._audit_orphans(namespace):
            self._mark(namespace)

    async def _audit_orphans(self, namespace: str) -> bool:
        """Find reservations of bindings that do not exist; True when some were found.

        The webhook admits before the API server stores: a create that then fails (the name
        already taken — Karmada's detector races itself — or another webhook refusing it)
        leaves a reservation no binding will ever carry. After `orphan_grace` unobserved, one
        quorum GET of the binding's name settles it: a different uid or none means the reserved
        object does not exist (a name can be held by one object at a time).
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        bindings = self.index.bindings(namespace)
        pending: dict[str, str] = {}  # uid -> binding name
        for stored in self.quotas.quotas(namespace):
            for r in stored.quota.status.reservations:
                uid = r.reservedBy.uid
                if uid not in bindings and not self.index.deleted(uid):
                    pending[uid] = r.reservedBy.name
        self._unseen = {uid: t for uid, t in self._unseen.items() if uid in pending or t > now - 60}
        found = False
        for uid, name in pending.items():
            first = self._unseen.setdefault(uid, now)
            if now - first < self.settings.orphan_grace:
                self.dirty.mark_at(namespace, first + self.settings.orphan_grace + 0.05)
                continue
            try:
                current = await self.api.get(f"{paths.bindings(namespace)}/{name}")
                holder = str(current.get("metadata", {}).get("uid", ""))
            except NotFound:
                holder = ""
            if holder != uid:
                log.info(
                    "reservation of a binding that does not exist released",
                    extra={"namespace": namespace, "binding": name, "uid": uid},
                )
                self.index.mark_absent(namespace, uid)
                self._unseen.pop(uid, None)
                found = True
        return found

    def _can_write(self) -> bool:
        return (
            self.synced.is_set()
            and self.leadership.is_leader()
            and self.leadership.remaining() > self.settings.write_timeout
        )

    async def _sync_quota(self, stored: StoredQuota) -> bool:
        """Recompute one quota and write it if needed; False when every CAS attempt lost."""
        ns, name = stored.namespace, stored.name
        extra = {"namespace": ns, "quota": name, "uid": stored.quota.metadata.uid}
        for attempt in range(self.settings.max_attempts):
            now = datetime.now(UTC)
            started = time.perf_counter()
            outcome = rc.recompute(stored.quota, self._inputs(ns), now)
            desired = st.dump(outcome.status)
            self.metrics.recompute_duration.observe(time.perf_counter() - started)
            self.metrics.set_quota(ns, name, outcome.used, outcome.hard, outcome.status)
            self._schedule_expiry(ns, outcome.next_expiry, now)
            if not st.needs_write(stored.raw.get("status"), desired):
                return True
            if not self._can_write():
                return True  # followers keep their figures warm; the leader writes
            body = {**stored.raw, "status": desired}
            try:
                result = await self.api.request(
                    "PUT", paths.quota_status(ns, name), body, timeout=self.settings.write_timeout
                )
            except Conflict:
                self.metrics.status_writes.labels("conflict").inc()
                delay = self.settings.conflict_backoff * 2**attempt
                await asyncio.sleep(delay * (0.5 + random.random()))  # CAS backoff, jittered
                try:
                    fresh = await self.api.get(paths.quota(ns, name))
                except NotFound:
                    return True
                got = self.quotas.update(fresh)
                stored = got or self.quotas.get(ns, name) or stored
                continue
            except NotFound:
                self.metrics.status_writes.labels("notfound").inc()
                return True
            except KubeError:
                self.metrics.status_writes.labels("error").inc()
                raise
            self.metrics.status_writes.labels("ok").inc()
            self.writes += 1
            for reason, n in outcome.released.items():
                self.metrics.released.labels(reason).inc(n)
            self.quotas.update(result)
            log.info(
                "quota status written",
                extra={
                    **extra,
                    "summary": outcome.status.summary,
                    "reservations": len(outcome.status.reservations),
                    "released": dict(outcome.released),
                },
            )
            return True
        log.info("status write contended; retrying shortly", extra=extra)
        return False

    def _schedule_expiry(self, namespace: str, expiry: datetime | None, now: datetime) -> None:
        if expiry is None:
            return
        loop = asyncio.get_running_loop()
        self.dirty.mark_at(namespace, loop.time() + (expiry - now).total_seconds() + 0.05)

    # ---- leadership ------------------------------------------------------------------------

    def leadership_changed(self, leader: bool) -> None:
        self.metrics.leader.set(1 if leader else 0)
        if leader:
            self.mark_all()  # a new leader writes whatever its predecessor left undone
