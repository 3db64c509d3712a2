"""The controller: what it watches, the recompute and the jobs that follow it, and `run`.

Informers (`kube.informer`) feed ResourceBindings into the binding index (`binding_feed`) and
KarmadaQuotas and ClusterKarmadaQuotas into their stores, in version order; member pod watches
feed the member pod tables. Each change marks what it touches in the recompute's queues
(`reconciler`: a namespace, or a cluster quota — those selecting the namespace, or whose
selection a relabelling moves). Each recompute then marks the jobs that follow it
(`controller.jobs`), each in a module and a queue of its own (the Kubernetes quota controller's
way): the orphan audit (`controller.orphan_audit`), waiting for room (`controller.room`:
admitting queued bindings with `controller.dequeue`, then waking waiting workloads with
`controller.wake`), the member guards and their finalizer (`controller.guard_keeper`), the
namespaces' enforcement labels (`controller.enforcement`) and the tenants' views
(`controller.views`). Every job retries on its own queue (`dirty.DirtyQueue.retry`: one rate
limiter per key); a job marks the recompute only when it changed what the recompute reads (a
pending charge disproved, a guard written, a template found deleted), never to be retried.
Nothing is written but by the leader (`leader.may_lead`), and only once bindings and quotas
have been listed in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from karmadaquota.api import ON_EXCEED_QUEUE, ClusterKarmadaQuota
from karmadaquota.controller import cluster as cl
from karmadaquota.controller import guards as gd
from karmadaquota.controller.binding_feed import BindingFeed
from karmadaquota.controller.dequeue import Dequeuer
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.enforcement import Enforcement
from karmadaquota.controller.guard_keeper import GuardKeeper
from karmadaquota.controller.index import BindingIndex
from karmadaquota.controller.jobs import Findings, Job
from karmadaquota.controller.leader import Leadership, may_lead
from karmadaquota.controller.loans import CohortBook
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.orphan_audit import OrphanAudit
from karmadaquota.controller.reclaim import Reclaimer
from karmadaquota.controller.reconciler import Reconciler, ReconcilerConfig, Sources
from karmadaquota.controller.room import RoomJob
from karmadaquota.controller.status_writer import StatusWriter
from karmadaquota.controller.template_bindings import TemplateBindings
from karmadaquota.controller.views import Views
from karmadaquota.controller.wake import Waker
from karmadaquota.evictions import Readiness
from karmadaquota.kube import namespaces, paths
from karmadaquota.kube.client import Api, KubeError
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.quotas import PARSED_KEPT, QuotaRecord, QuotaStore, cluster_quota_store
from karmadaquota.kube.templates import Key, TemplateStore
from karmadaquota.kube.versions import parse_rv

log = logging.getLogger("karmadaquota.controller")


class ControllerApi(Api, Lister, Protocol):
    """Requests, lists and watches: `KubeClient`, or a fake in unit tests."""


class Controller:
    """The controller: its informers and stores, the recompute (`reconciler`) and the jobs that
    follow it, their queues, the leader gate, and `run`."""

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
        status_api: Api | None = None,
        guard_api: Api | None = None,
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
        self.metrics = metrics
        self.leadership = leadership
        self.config = config or ReconcilerConfig()
        self.members = members
        self._clock = clock
        self.index = BindingIndex()
        # member clusters not Ready, fed by the Cluster events (operator.registry)
        self.readiness = Readiness(self.config.evicted_cluster_grace, self._readiness_changed)
        self._release_timer: asyncio.TimerHandle | None = None
        self._stores(api)
        # as of each cluster quota's last recompute: the namespaces it selects, and back
        self.selection = cl.Selection()
        self.synced = asyncio.Event()
        self._jobs(api, waker, dequeuer, namespace_api)
        self.reconciler = Reconciler(
            Sources(
                self.index,
                self.quotas,
                self.cluster_quotas,
                self.selection,
                self._findings(),
                members,
                self.enforcement.ensure if self.enforcement is not None else None,
                self.readiness,
                self.cohorts,
            ),
            self.jobs,
            # the quota status writes: a connection pool of their own in the product
            # (`KubeClient.lane`), so that no job's slow request holds up a release
            StatusWriter(status_api or api, metrics, self.config),
            metrics,
            self.config,
            clock,
            self.synced,
            self._can_write,
        )
        # the recompute's queues, by the names the jobs and tests know them
        self.dirty = self.reconciler.dirty
        self.cluster_dirty = self.reconciler.cluster_dirty
        self.queues: tuple[DirtyQueue, ...] = (
            self.dirty,
            self.cluster_dirty,
            *(j.queue for j in self.jobs),
        )
        if guards is not None:
            # the quotas' guard finalizers: in the product on the guard job's connection pool
            # (`KubeClient.lane`), with its guard Works
            guards.attach(guard_api or api, self.quotas, self, self.config.write_timeout)
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

    def _stores(self, api: ControllerApi) -> None:
        """The quota stores (each quota's change marks its recompute)."""
        self.quotas = QuotaStore(
            api,
            on_put=self._quota_put,
            on_delete=self._quota_deleted,
            on_relisted=lambda _: self._relisted(),
            page_size=self.config.page_size,
            relist_period=self.config.resync_period,
            parsed=PARSED_KEPT,
        )
        # which quotas share a cohort: a member's change marks the others (controller.loans)
        self.cohorts = CohortBook(self.quotas, self.index.queued, self.index.bindings)
        # ClusterKarmadaQuotas (all under namespace ""), each recomputed from its own queue
        # (keyed by its name) over the namespaces its selector picks (controller.cluster)
        self.cluster_quotas = cluster_quota_store(
            api,
            on_put=lambda record: self.cluster_dirty.mark(record.name),
            on_delete=self._cluster_quota_deleted,
            # each only reads its own record: no need to wait for the others' list
            on_relisted=lambda _: self.cluster_dirty.sweep(
                [r.name for r in self.cluster_quotas.records("")]
            ),
            page_size=self.config.page_size,
            relist_period=self.config.resync_period,
        )

    def _jobs(
        self,
        api: ControllerApi,
        waker: Waker | None,
        dequeuer: Dequeuer | None,
        namespace_api: namespaces.Patcher | None,
    ) -> None:
        """The jobs that follow a recompute (`jobs`), each registered only when enabled."""
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
        self._waker = waker
        self.room_job = RoomJob(
            self.quotas.quotas,
            self.index.queued,
            dequeuer,
            waker,
            self._can_write,
            self._clock,
            self._recompute,
        )
        self.room = self.room_job.queue
        # None: the enforcement label is neither watched nor written (Enforced not reported)
        self.enforcement = (
            Enforcement(
                api,
                namespace_api,
                self._queues_wanted,
                lambda: self.synced.is_set() and self._can_write(),
                self._enforcement_moved,
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
                totals_delay=self.config.view_totals_delay,
            )
            if self.config.tenant_views
            else None
        )
        # a lender's forced reclaim within its cohort (spec.reclaimWithinCohort: Any)
        self.reclaim = Reclaimer(
            api,
            self.index,
            self.cohorts,
            dequeuer.class_values if dequeuer is not None else _no_classes,
            lambda: self.synced.is_set() and self._can_write(),
        )
        # the jobs that follow a recompute (controller.jobs), each registered only when enabled
        self.jobs: tuple[Job, ...] = (
            self.audit,
            self.room_job,
            self.reclaim,
            *(j for j in (self.guards, self.enforcement, self.views) if j is not None),
        )

    def _findings(self) -> Findings:
        """What the jobs tell the recompute (`jobs.Findings`), read from them when it asks."""
        enforcement, guards = self.enforcement, self.guards
        if guards is not None:
            self.cohorts.guards_held = guards.held
        return Findings(
            disproved=self.audit.disproved,
            gone=self._gone,
            enforced=enforcement.enforced if enforcement is not None else None,
            labels=enforcement.labels if enforcement is not None else None,
            guards=guards.shown if guards is not None else None,
            guard_problems=guards.problems if guards is not None else None,
            guard_routes=guards.routes if guards is not None else None,
        )

    def _gone(self, namespace: str, key: str) -> bool:
        """A waiting workload's template is gone, as the waker (if any, now) found it."""
        return self._waker is not None and self._waker.gone(namespace, key)

    @property
    def waker(self) -> Waker | None:
        """Wakes refused workloads as room appears (None: they wait on Karmada's own retry
        backoff); the room job's."""
        return self._waker

    @waker.setter
    def waker(self, waker: Waker | None) -> None:
        self._waker = self.room_job.waker = waker

    @property
    def writes(self) -> int:
        """Quota status writes that succeeded (the one writer's count)."""
        return self.reconciler.writer.writes

    # ---- inputs ----------------------------------------------------------------------------

    def _mark(
        self,
        namespace: str,
        only: Callable[[Iterable[str]], Iterable[str]] | None = None,
    ) -> None:
        """Recompute the namespace and the cluster quotas selecting it (`only`: those of them
        it returns)."""
        # a namespace whose quota is gone still has its queued bindings to admit
        if self.quotas.has(namespace) or self.index.has_queued(namespace):
            self.dirty.mark(namespace)
        selecting = self.selection.selecting(namespace)
        self.cluster_dirty.mark_many(selecting if only is None else only(selecting))

    def _enforcement_moved(self, namespace: str) -> None:
        """The namespace's enforcement label came or went: its quotas' `Enforced` moves, a
        cluster quota's only when whether all its namespaces are labelled does."""
        self._mark(namespace, self.reconciler.enforcement_moved)

    def _readiness_changed(self) -> None:
        """A cluster turned Ready or not, or its grace ended: what the namespaces with eviction
        tasks charge moves (and so may every observed member's figures: all are recomputed
        where some binding is evicted); the next end of a grace is timed."""
        for namespace in self.index.evicting_namespaces():
            self._mark(namespace)
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        now = time.time()
        due = self.readiness.next_release(now)
        if due is not None:
            with contextlib.suppress(RuntimeError):  # no running loop: a unit test's feed
                self._release_timer = asyncio.get_running_loop().call_later(
                    max(0.0, due - now) + 0.01, self._readiness_changed
                )

    def mark_all(self) -> None:
        """Every quota recomputed, after what an event marks (`DirtyQueue.sweep`)."""
        self.dirty.sweep(self.quotas.namespaces())
        self.dirty.sweep(self.index.queued_namespaces())
        self.cluster_dirty.sweep([r.name for r in self.cluster_quotas.records("")])

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

    def _quota_put(self, record: QuotaRecord) -> None:
        self.dirty.mark(record.namespace)
        self.dirty.mark_many(self.cohorts.put(record))

    def _quota_deleted(self, record: QuotaRecord) -> None:
        ns, name = record.namespace, record.name
        self.dirty.mark_many(self.cohorts.delete(record))
        self.metrics.forget_quota(ns, name)
        self.reconciler.forget(ns, name)
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
        return any(r.on_exceed == ON_EXCEED_QUEUE for r in records)

    # ---- what the jobs read and tell -------------------------------------------------------

    def _released(self, namespace: str) -> None:
        """The orphan audit released a reservation: recomputed at once (its cluster quotas
        too: it may be one of theirs)."""
        self._mark(namespace)
        self.cluster_dirty.mark_many([r.name for r in self.cluster_quotas.records("")])

    def guard_inputs(self, namespace: str, quota: str) -> gd.GuardInputs | None:
        return self.reconciler.guard_inputs(namespace, quota)

    def may_write(self) -> bool:
        return self._can_write()

    def guards_written(self, namespace: str) -> None:
        self.dirty.mark(namespace)  # the status shows the guards as written

    def _recompute(self, namespace: str) -> None:
        self.dirty.mark(namespace)

    def _can_write(self) -> bool:
        """The leader gate: listed in full, leading, and for longer than a write may take."""
        return self.synced.is_set() and may_lead(self.leadership, self.config.write_timeout)

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


async def _no_classes(names: set[str]) -> dict[str, int]:
    """Without the queue job no PriorityClass is read: every binding ranks at 0."""
    return {}
