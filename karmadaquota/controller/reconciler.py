"""The controller's state and its I/O shell around the pure recompute.

Two informers (`kube.informer`) feed ResourceBindings into the binding index and KarmadaQuotas
into the quota table, in version order; member pod watches feed the member pod tables. Each
change marks its namespace dirty; the `DirtyQueue` then flushes each dirty namespace: every
quota of it is recomputed from scratch (`recompute.recompute`) and, on the leader only, written
when its status differs: a JSON patch that compare-and-swaps on the controller's own revision
(`status.status_write`), so the webhook's writes of pending charges do not make it lose; a lost
write (another controller wrote, or an entry it removes moved) re-reads the quota and re-applies
the recompute to the fresh version (`kube.retry`). Nothing is written before bindings and
quotas have been listed in full.

The controller is the recompute and its dispatch, nothing else: each recompute feeds the queues
of the jobs that follow it, each job in a module and a queue of its own (the Kubernetes quota
controller's way), so that a slow GET or PATCH of theirs never delays the recompute that
releases quota: the orphan audit (`controller.orphan_audit`), waiting for room
(`controller.room`: admitting queued bindings with `controller.dequeue`, then waking waiting
workloads with `controller.wake`), the member guards and their finalizer
(`controller.guard_keeper`), the namespaces' enforcement labels (`controller.enforcement`) and
the tenants' views (`controller.views`). Every job retries on its own queue
(`dirty.DirtyQueue.retry`: one rate limiter per key); a job marks the recompute only
when it changed what the recompute reads (a reservation found orphaned, a guard written, a
template found deleted), never to be retried.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from karmadaquota.api import ON_EXCEED_QUEUE, ClusterKarmadaQuota
from karmadaquota.controller import cluster as cl
from karmadaquota.controller import guards as gd
from karmadaquota.controller import recompute as rc
from karmadaquota.controller import status as st
from karmadaquota.controller.binding_feed import BindingFeed
from karmadaquota.controller.dequeue import Dequeuer
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.enforcement import Enforcement
from karmadaquota.controller.guard_keeper import GuardKeeper
from karmadaquota.controller.index import BindingIndex
from karmadaquota.controller.jobs import Job
from karmadaquota.controller.leader import Leadership, may_lead
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.orphan_audit import OrphanAudit
from karmadaquota.controller.room import RoomJob
from karmadaquota.controller.status_writer import StatusWriter
from karmadaquota.controller.template_bindings import TemplateBindings
from karmadaquota.controller.views import Views
from karmadaquota.controller.wake import Waker
from karmadaquota.kube import namespaces, paths
from karmadaquota.kube.client import (
    Api,
    KubeError,
    NotFound,
)
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore, cluster_quota_store
from karmadaquota.kube.retry import Backoff, ConflictsExhausted
from karmadaquota.kube.templates import Key, TemplateStore
from karmadaquota.kube.versions import parse_rv

log = logging.getLogger("karmadaquota.controller")


class ControllerApi(Api, Lister, Protocol):
    """Requests, lists and watches: `KubeClient`, or a fake in unit tests."""


# a recompute's lost compare-and-swap backs off longer: nobody waits on it, and the webhook's
# writes in a storm should not be raced head-on
RECOMPUTE_CONFLICT_BACKOFF = Backoff(0.02, 0.64)
# a recompute whose every compare-and-swap lost (another writer is busy) is tried again this
# soon, doubling per loss in a row (its queue's rate limiter), at most RECOMPUTE_RETRY_CAP
RECOMPUTE_RETRY = 0.05
RECOMPUTE_RETRY_CAP = 2.0
# Karmada registers its webhooks with timeoutSeconds 3, the API's default is 10 s: 15 s covers
# either and the write after it. Raise it (--admission-window) for a slower webhook.
DEFAULT_ADMISSION_WINDOW = 15.0


@dataclass
class ReconcilerConfig:
    quiet: float = 0.03
    # under a continuous storm a namespace is recomputed this often: it bounds how long an
    # observed pending charge stays in the quota object (its size, docs/benchmarks.md)
    max_delay: float = 0.1
    write_timeout: float = 2.0
    max_attempts: int = 6
    # after a lost compare-and-swap: wait a random while (doubling) before re-reading, so that
    # a burst of webhook reservation writes is not raced head-on
    conflict_backoff: Backoff = RECOMPUTE_CONFLICT_BACKOFF
    page_size: int = 500
    member_watch: bool = True
    # a reservation whose binding has not been seen this long is checked against the API
    # server: a create refused after admission (AlreadyExists, another webhook) holds quota
    # only until then instead of until its expiration
    orphan_grace: float = 2.0
    # how long after our admission a create may still be stored (recompute.is_orphan): a
    # reservation whose binding's name is free is released only after this
    admission_window: float = DEFAULT_ADMISSION_WINDOW
    # bindings and quotas are listed again this often (a safety net under the watches)
    resync_period: float | None = 300.0
    # keep an AppliedClusterKarmadaQuota in every namespace a cluster quota selects (the
    # tenants' view, controller.views); a view is rewritten at most this often in a storm
    tenant_views: bool = True
    view_delay: float = 1.0


class Controller:
    def __init__(
        self,
        api: ControllerApi,
        metrics: ControllerMetrics,
        leadership: Leadership,
        config: ReconcilerConfig | None = None,
        members: Members | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        waker: Waker | None = None,
        namespace_api: namespaces.Patcher | None = None,
        dequeuer: Dequeuer | None = None,
        guards: GuardKeeper | None = None,
        templates: TemplateStore | None = None,
    ) -> None:
        self.api = api
        # the resource templates' pods a binding is charged with (None: the binding's fields)
        self.templates = templates
        # the bindings charged with each template (observed again when its pod changes)
        self.template_bindings = TemplateBindings()
        self._rereads: set[asyncio.Task[None]] = set()
        if templates is not None:
            templates.on_change(self._template_arrived)
        # admits queued bindings as room appears (None: queued bindings stay queued)
        self.dequeuer = dequeuer
        # None: memberEnforcement ResourceQuota counts observed usage but keeps no guards
        self.guards = guards
        self._outcomes: dict[tuple[str, str], rc.Outcome] = {}
        self.metrics = metrics
        self.leadership = leadership
        self.config = config or ReconcilerConfig()
        self.members = members
        self._clock = clock
        self.index = BindingIndex()
        self.quotas = QuotaStore(
            api,
            on_put=lambda record: self.dirty.mark(record.namespace),
            on_delete=self._quota_deleted,
            on_relisted=lambda _: self._relisted(),
            page_size=self.config.page_size,
            relist_period=self.config.resync_period,
        )
        # ClusterKarmadaQuotas (all under namespace ""), each recomputed from its own queue
        # (keyed by its name) over the namespaces its selector picks (controller.cluster)
        self.cluster_quotas = cluster_quota_store(
            api,
            on_put=lambda record: self.cluster_dirty.mark(record.name),
            on_delete=self._cluster_quota_deleted,
            # each only reads its own record: no need to wait for the others' list
            on_relisted=lambda _: self.cluster_dirty.mark_many(
                [r.name for r in self.cluster_quotas.records("")]
            ),
            page_size=self.config.page_size,
            relist_period=self.config.resync_period,
        )
        # as of each cluster quota's last recompute: the namespaces it selects, and back
        self.selection = cl.Selection()
        self.synced = asyncio.Event()
        self.dirty = DirtyQueue(
            self.flush,
            quiet=self.config.quiet,
            max_delay=self.config.max_delay,
            retry_delay=RECOMPUTE_RETRY,
            retry_cap=RECOMPUTE_RETRY_CAP,
        )
        self.cluster_dirty = DirtyQueue(
            self.flush_cluster,
            quiet=self.config.quiet,
            max_delay=self.config.max_delay,
            retry_delay=RECOMPUTE_RETRY,
            retry_cap=RECOMPUTE_RETRY_CAP,
            name="cluster-recompute",
        )
        # The jobs that follow a namespace's recompute on the leader, each in a queue of its
        # own (the Kubernetes quota controller's way: a queue per job), so that a slow one
        # never holds up the recompute that releases quota: the orphan audit (binding GETs),
        # waiting for room (controller.room: admitting queued bindings, merge patches the
        # webhook charges, then waking waiting workloads, PATCHes of their templates; on
        # followers it only publishes the queue lengths), the member guards (requests to every
        # member, a confirmation wait per lowering: `guards.queue`), the enforcement labels
        # (`enforcement.queue`) and the tenants' views (`views.queue`).
        self.audit = OrphanAudit(
            api,
            self.quotas,
            self.cluster_quotas,
            self.index,
            self.config,
            self._can_write,
            self._released,
        )
        self.room_job = RoomJob(
            self.quotas.quotas,
            self.index.queued,
            dequeuer,
            waker,
            self._can_write,
            self._clock,
            self.dirty.mark,
        )
        self.room = self.room_job.queue
        if guards is not None:
            guards.attach(api, self.quotas, self, self.config.write_timeout)
        # None: the enforcement label is neither watched nor written (Enforced not reported)
        self.enforcement = (
            Enforcement(
                api,
                namespace_api,
                self._queues_wanted,
                lambda: self.synced.is_set() and self._can_write(),
                self._mark,
                relabelled=self._relabelled,
                page_size=self.config.page_size,
                relist_period=self.config.resync_period,
            )
            if namespace_api is not None
            else None
        )
        self.views = (
            Views(
                api,
                api,
                self._cluster_quota,
                self.selection.of,
                lambda: self.synced.is_set() and self._can_write(),
                page_size=self.config.page_size,
                relist_period=self.config.resync_period,
                max_delay=self.config.view_delay,
            )
            if self.config.tenant_views
            else None
        )
        # the jobs that follow a recompute (controller.jobs), each registered only when enabled
        self.jobs: tuple[Job, ...] = (
            self.audit,
            self.room_job,
            *(j for j in (self.guards, self.enforcement, self.views) if j is not None),
        )
        self.queues: tuple[DirtyQueue, ...] = (
            self.dirty,
            self.cluster_dirty,
            *(j.queue for j in self.jobs),
        )
        self.binding_informer = Informer(
            paths.bindings(),
            BindingFeed(
                self.index,
                self.templates,
                self.template_bindings,
                metrics.bindings_indexed,
                self._mark,
                self._relisted,
            ),
            api,
            page_size=self.config.page_size,
            relist_period=self.config.resync_period,
            name="resourcebindings",
        )
        self.writer = StatusWriter(api, metrics, self.config)

    @property
    def waker(self) -> Waker | None:
        """Wakes refused workloads as room appears (None: they wait on Karmada's own retry
        backoff); the room job's."""
        return self.room_job.waker

    @waker.setter
    def waker(self, waker: Waker | None) -> None:
        self.room_job.waker = waker

    @property
    def writes(self) -> int:
        """Quota status writes that succeeded (the one writer's count)."""
        return self.writer.writes

    # ---- inputs ----------------------------------------------------------------------------

    def _mark(self, namespace: str) -> None:
        # a namespace whose quota is gone still has its queued bindings to admit
        if self.quotas.has(namespace) or self.index.has_queued(namespace):
            self.dirty.mark(namespace)
        self.cluster_dirty.mark_many(self.selection.selecting(namespace))

    def mark_all(self) -> None:
        self.dirty.mark_many(self.quotas.namespaces())
        self.dirty.mark_many(self.index.queued_namespaces())
        self.cluster_dirty.mark_many([r.name for r in self.cluster_quotas.records("")])

    def _relabelled(self, namespace: str) -> None:
        """A namespace's labels changed (or it came or went): every cluster quota whose
        selection of it changes is recomputed (its usage moves with it)."""
        assert self.enforcement is not None
        records = self.cluster_quotas.records("")
        self.cluster_dirty.mark_many(
            self.selection.moved(
                namespace,
                self.enforcement.labels.get(namespace),
                [(r.name, r.quota) for r in records],
            )
        )

    def _selects(self, namespace: str) -> bool:
        """Some cluster quota selects the namespace now (it needs the enforcement label)."""
        if self.enforcement is None:
            return False
        return cl.selects_any(
            self.enforcement.labels.get(namespace),
            [r.quota for r in self.cluster_quotas.records("")],
        )

    def _cluster_quota_deleted(self, record: QuotaRecord) -> None:
        self.metrics.forget_quota("", record.name)
        self.selection.set(record.name, frozenset())
        if self.views is not None:
            self.views.queue.mark(record.name)  # its views go (the garbage collector's too)

    def _cluster_quota(self, name: str) -> ClusterKarmadaQuota | None:
        record = self.cluster_quotas.get("", name)
        quota = record.quota if record is not None else None
        return quota if isinstance(quota, ClusterKarmadaQuota) else None

    def member_changed(self, namespaces: Collection[str] | None) -> None:
        if namespaces is None:
            if self.guards is not None and self.members is not None:
                self.guards.recovered(
                    [m.name for m in self.members.views() if m.synced and not m.error]
                )
            self.mark_all()
        else:
            for ns in namespaces:
                self._mark(ns)

    def _quota_deleted(self, record: QuotaRecord) -> None:
        ns, name = record.namespace, record.name
        self.metrics.forget_quota(ns, name)
        self._outcomes.pop((ns, name), None)
        if self.guards is not None:
            self.guards.forget(ns, name)
        if self.waker is not None and record.quota is not None:
            # its waiting workloads may fit now; the namespace may have no quota left
            self.waker.quota_deleted(record.quota)
            self.dirty.mark(ns)
        if self.index.has_queued(ns):
            self.dirty.mark(ns)  # what it queued is admitted now (quota_deleted)

    # ---- full resync -----------------------------------------------------------------------

    async def resync(self) -> None:
        """List bindings and quotas in full and fold them in (every quota is recomputed)."""
        await self.binding_informer.relist()
        await self.quotas.informer.relist()

    def _relisted(self) -> None:
        if not (self.binding_informer.synced.is_set() and self.quotas.informer.synced.is_set()):
            return
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

    def _template_arrived(self, key: Key, pod_changed: bool) -> None:
        """Observe again the bindings charged with a template whose pod changed, or that
        waited for its version (controller/template_bindings.py)."""
        again = self.template_bindings.again(key, pod_changed)
        for obj in again.now:
            self.binding_informer.handler.added(obj)
        for ns, uid, name in again.read:
            task = asyncio.get_running_loop().create_task(self._reread(ns, uid, name))
            self._rereads.add(task)
            task.add_done_callback(self._rereads.discard)

    async def _reread(self, namespace: str, uid: str, name: str) -> None:
        """Read a binding again and observe it, when it is still the version indexed (a newer
        one is on its way through the watch, which observes it)."""
        try:
            obj = await self.api.get(paths.binding(namespace, name))
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.info(
                "binding not read again after its template changed",
                extra={"namespace": namespace, "binding": name, "error": str(e)},
            )
            return
        meta = obj.get("metadata") or {}
        have = self.index.get(namespace, uid)
        if (
            meta.get("uid") == uid
            and have is not None
            and have.rv == parse_rv(meta.get("resourceVersion"))
        ):
            self.binding_informer.handler.added(obj)

    async def _bindings_after_templates(self) -> None:
        """The binding informer, once every template informer has listed: a binding then waits
        for its template only while the template's own watch event is on its way."""
        if self.templates is not None:
            await asyncio.gather(*(i.synced.wait() for i in self.templates.informers))
        await self.binding_informer.run()

    async def run(self) -> None:
        """Watch bindings and quotas and flush dirty namespaces until cancelled."""
        templates = self.templates.informers if self.templates is not None else []
        await _together(
            {
                "queues": self.run_queues(),
                "binding-informer": self._bindings_after_templates(),
                **{f"template-informer-{i.name}": i.run() for i in templates},
                "quota-informer": self.quotas.informer.run(),
                "cluster-quota-informer": self.cluster_quotas.informer.run(),
                **({"view-informer": self.views.informer.run()} if self.views is not None else {}),
                **(
                    {"namespace-informer": self.enforcement.informer.run()}
                    if self.enforcement is not None
                    else {}
                ),
            }
        )

    # ---- flush -----------------------------------------------------------------------------

    def _snapshot(self, namespace: str) -> rc.NamespaceSnapshot:
        snapshot = rc.NamespaceSnapshot(
            bindings=self.index.bindings(namespace),
            deleted=self.index.deleted,
            members=self.members.views() if self.members is not None else (),
            member_watch=self.config.member_watch,
            disproved=functools.partial(self.audit.disproved, namespace),
        )
        if self.waker is not None:
            snapshot = replace(snapshot, gone=functools.partial(self.waker.gone, namespace))
        if self.enforcement is not None:
            snapshot = replace(snapshot, enforced=self.enforcement.enforced(namespace))
        if self.guards is not None:
            snapshot = replace(
                snapshot,
                guards=functools.partial(self.guards.shown, namespace),
                guard_problems=functools.partial(self.guards.problems, namespace),
            )
        return snapshot

    async def flush(self, namespace: str) -> None:
        """Recompute every quota of `namespace`; the leader writes those that differ.

        Nothing is computed before bindings and quotas are listed in full (the first list
        arrives page by page; every namespace is marked again once it is complete)."""
        if not self.synced.is_set():
            return
        contended = False
        for record in self.quotas.records(namespace):
            contended = not await self._sync_quota(record) or contended
        if contended:  # another writer is busy: come back very soon (its rate limiter)
            self.dirty.retry(namespace)
        leader = self._can_write()
        for job in self.jobs:
            job.after_recompute(namespace, leader)

    async def flush_cluster(self, name: str) -> None:
        """Recompute one cluster quota over the namespaces it selects now; the leader writes
        it when it differs (and labels those namespaces for enforcement, from its queue)."""
        if not self.synced.is_set():
            return
        record = self.cluster_quotas.get("", name)
        if record is None:
            self.selection.set(name, frozenset())
            return
        quota = record.quota
        selected = self.selection.choose(
            name,
            quota if isinstance(quota, ClusterKarmadaQuota) else None,
            self.enforcement.labels.table() if self.enforcement is not None else {},
        )
        if not await self._sync_quota(record, selected):
            self.cluster_dirty.retry(name)
        leader = self._can_write()
        for job in self.jobs:
            job.after_cluster_recompute(
                name, quota if isinstance(quota, ClusterKarmadaQuota) else None, selected, leader
            )

    def _cluster_snapshot(self, selected: list[str], name: str) -> cl.ClusterSnapshot:
        enforced = None
        if self.enforcement is not None:
            enforced = all(self.enforcement.enforced(ns) for ns in selected)
        return cl.ClusterSnapshot(
            selected=selected,
            bindings=self.index.bindings,
            deleted=self.index.deleted,
            members=self.members.views() if self.members is not None else (),
            member_watch=self.config.member_watch,
            enforced=enforced,
            disproved=self.audit.disproved("", name),
        )

    def idle(self) -> bool:
        """Nothing marked or running in any of the controller's queues."""
        return all(q.idle() for q in self.queues)

    async def run_queues(self) -> None:
        """The recompute queue and the queues of the jobs that follow it, until cancelled."""
        await _together({f"queue/{q.name}": q.run() for q in self.queues})

    def _queues_wanted(self, namespace: str) -> bool | None:
        """None when the namespace holds no quota and no cluster quota selects it; else
        whether one of its quotas queues (its namespace needs the queueing label too:
        controller.enforcement; a cluster quota never queues)."""
        records = self.quotas.records(namespace)
        if not records:
            return False if self._selects(namespace) else None
        return any(
            r.quota is not None and r.quota.spec.onExceed == ON_EXCEED_QUEUE for r in records
        )

    # ---- what the jobs read and tell -------------------------------------------------------

    def _released(self, namespace: str) -> None:
        """The orphan audit released a reservation: recomputed at once (its cluster quotas
        too: it may be one of theirs)."""
        self._mark(namespace)
        self.cluster_dirty.mark_many([r.name for r in self.cluster_quotas.records("")])

    def guard_inputs(self, namespace: str, quota: str) -> gd.GuardInputs | None:
        """The guard job's inputs of a quota: its last recompute's (None: an invalid spec)."""
        outcome = self._outcomes.get((namespace, quota))
        return None if outcome is None else outcome.guard

    def may_write(self) -> bool:
        return self._can_write()

    def guards_written(self, namespace: str) -> None:
        self.dirty.mark(namespace)  # the status shows the guards as written

    def _can_write(self) -> bool:
        """The leader gate: listed in full, leading, and for longer than a write may take."""
        return self.synced.is_set() and may_lead(self.leadership, self.config.write_timeout)

    async def _sync_quota(self, record: QuotaRecord, selected: list[str] | None = None) -> bool:
        """Recompute one quota and write it if needed; False when every CAS attempt lost.
        With `selected` (the namespaces it picks), a cluster quota."""
        ns, name = record.namespace, record.name
        cluster = selected is not None
        store = self.cluster_quotas if cluster else self.quotas
        queue = self.cluster_dirty if cluster else self.dirty
        quota_path = paths.cluster_quota(name) if cluster else paths.quota(ns, name)
        if record.quota is None:
            return True  # unreadable (logged): nothing to recompute until it changes
        extra = {"namespace": ns, "quota": name, "uid": record.quota.metadata.uid}
        outcome: rc.Outcome | None = None
        computed = (self._clock(), 0.0)  # when the last outcome was computed, and how long it took

        def desired(current: QuotaRecord) -> st.StatusWrite | None:
            # pure but for the clock: called again after each lost compare-and-swap, so the
            # side effects of an outcome (metrics, its expiry timer) follow the last one, below
            nonlocal outcome, computed
            if current.quota is None:
                return None
            now = self._clock()
            started = time.perf_counter()
            if selected is not None and isinstance(current.quota, ClusterKarmadaQuota):
                snapshot = self._cluster_snapshot(selected, name)
                outcome = cl.recompute_cluster(current.quota, snapshot, now)
            else:
                outcome = rc.recompute(current.quota, self._snapshot(ns), now)
            self._outcomes[(ns, name)] = outcome
            computed = (now, time.perf_counter() - started)
            change = rc.status_to_write(current.raw.get("status"), outcome)
            if change is None or not self._can_write():
                return None  # followers keep their figures warm; the leader writes
            return change

        try:
            result = await self.writer.write(record, store, quota_path, desired)
        except ConflictsExhausted:
            self._computed(ns, name, outcome, *computed, queue)
            log.info("status write contended; retrying shortly", extra=extra)
            return False
        except NotFound:
            return True
        self._computed(ns, name, outcome, *computed, queue)
        if result is None or outcome is None:
            return True
        for reason, n in outcome.released.items():
            self.metrics.released.labels(reason).inc(n)
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

    def _computed(
        self,
        ns: str,
        name: str,
        outcome: rc.Outcome | None,
        now: datetime,
        seconds: float,
        queue: DirtyQueue,
    ) -> None:
        """What a quota's last computed outcome publishes: its metrics (followers keep their
        figures warm too) and a recompute when its earliest reservation lapses."""
        if outcome is None:
            return
        self.metrics.recompute_duration.observe(seconds)
        self.metrics.set_quota(ns, name, outcome.used, outcome.hard, outcome.status)
        if outcome.next_expiry is not None:
            loop = asyncio.get_running_loop()
            due = loop.time() + (outcome.next_expiry - now).total_seconds() + 0.05
            queue.mark_at(name if queue is self.cluster_dirty else ns, due)

    # ---- leadership ------------------------------------------------------------------------

    def leadership_changed(self, leader: bool) -> None:
        self.metrics.leader.set(1 if leader else 0)
        if not leader and self.dequeuer is not None:
            self.dequeuer.forget()
        if leader:
            self.mark_all()  # a new leader writes whatever its predecessor left undone


async def _together(jobs: Mapping[str, Coroutine[Any, Any, None]]) -> None:
    """Run `jobs` as named tasks until one fails or the caller is cancelled; then stop all."""
    tasks = [asyncio.create_task(job, name=name) for name, job in jobs.items()]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
