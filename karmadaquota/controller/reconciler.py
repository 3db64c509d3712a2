"""The recompute and its write: a quota's status from the index, written by the one writer.

Each change marks a namespace (or a cluster quota) in a `DirtyQueue`; the queue flushes it:
every quota of the namespace is recomputed from scratch (`recompute.recompute`, or
`cluster.recompute_cluster` over the namespaces a cluster quota selects now) and, on the leader
only, written when its status differs, through the controller's one writer of quota status
(`status_writer`: a JSON patch that compare-and-swaps on the controller's own revision, so the
webhook's writes of pending charges do not make it lose; a lost write re-applies the recompute
to the fresh version). Nothing is computed before bindings and quotas have been listed in full.
After each recompute the jobs that follow it are marked (`controller.jobs`), each in a queue of
its own, so that a slow GET or PATCH of theirs never delays the recompute that releases quota.
What the controller watches, and when, is `controller.manager`'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller import cluster as cl
from karmadaquota.controller import guards as gd
from karmadaquota.controller import recompute as rc
from karmadaquota.controller import status as st
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.index import BindingIndex
from karmadaquota.controller.jobs import Findings, Job
from karmadaquota.controller.loans import CohortBook
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.status_writer import StatusWriter
from karmadaquota.evictions import Readiness
from karmadaquota.kube import paths
from karmadaquota.kube.client import NotFound
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore
from karmadaquota.kube.retry import Backoff, ConflictsExhausted

log = logging.getLogger("karmadaquota.controller")

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
# a fold is written at once when this many charges are pending: the webhook rewrites them all
# with each charge it adds
FOLD_MAX_PENDING = 64


@dataclass
class ReconcilerConfig:
    quiet: float = 0.03
    # seconds a cluster is not Ready before its evicted replicas are released (evictions)
    evicted_cluster_grace: float = 0.0
    # under a continuous storm a namespace is recomputed this often: it bounds how long an
    # observed pending charge stays in the quota object (its size, docs/benchmarks.md)
    max_delay: float = 0.1
    # a write that only counts admitted pending charges as used (status.fold_only) waits up
    # to this long, or until FOLD_MAX_PENDING charges are pending: admissions into the quota
    # meanwhile are not raced by it (docs/benchmarks.md, issue 37)
    fold_delay: float = 1.0
    # namespaces (cluster quotas) recomputed and written at once, each queue: a cold start's
    # 5,000 first writes wait on the API server, not on our CPU (docs/benchmarks.md, issue 37)
    concurrency: int = 48
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
    # ... and a view whose only change is the cluster quota's totals, this often (views.py)
    view_totals_delay: float = 10.0


@dataclass(frozen=True)
class Sources:
    """What a recompute reads besides the quota itself: the binding index and the quota
    stores, each cluster quota's selection, and what its jobs found (`jobs.Findings`: pending
    charges the audit disproved, templates the waker found deleted, the enforcement labels,
    the guards)."""

    index: BindingIndex
    quotas: QuotaStore
    cluster_quotas: QuotaStore
    selection: cl.Selection
    found: Findings
    members: Members | None = None
    # the one thing a recompute has a job do first, on the leader: put a namespace's
    # enforcement label on when it is missing (None: the labels are not kept)
    label_first: Callable[[str], Awaitable[None]] | None = None
    # member clusters not Ready (karmadaquota.evictions; None: every eviction is charged)
    readiness: Readiness | None = None
    # which quotas share a cohort, and what each is to record as lent and borrowed
    cohorts: CohortBook | None = None


class Reconciler:
    """`dirty` (per namespace) and `cluster_dirty` (per cluster quota): recompute and write."""

    def __init__(
        self,
        sources: Sources,
        jobs: Sequence[Job],
        writer: StatusWriter,
        metrics: ControllerMetrics,
        config: ReconcilerConfig,
        clock: Callable[[], datetime],
        synced: asyncio.Event,
        may_write: Callable[[], bool],
    ) -> None:
        self.sources = sources
        self.jobs = tuple(jobs)
        self.writer = writer
        self.metrics = metrics
        self.config = config
        self._clock = clock
        self.synced = synced
        self._may_write = may_write
        # each guarded quota's guard inputs as of its last recompute (not the whole outcome:
        # 19 KB a quota of status objects at 5,000 quotas)
        self._guards: dict[tuple[str, str], gd.GuardInputs] = {}
        # each selected namespace's sums, re-taken only when its bindings change
        self._ns_sums = cl.NamespaceSums(sources.index)
        # each cluster quota's "every namespace it selects is labelled" as its last recompute
        # read it: a namespace's label flip moves a cluster quota's status only through it
        self._enforced: dict[str, bool] = {}
        # (namespace, name) of each quota whose fold waits (status.fold_only) -> since when
        # (loop time); "" is the namespace of a cluster quota
        self._folding: dict[tuple[str, str], float] = {}
        # debounced (a storm is a few recomputes), retried soon after every lost CAS
        recompute = functools.partial(
            DirtyQueue,
            quiet=config.quiet,
            max_delay=config.max_delay,
            concurrency=config.concurrency,
            retry_delay=RECOMPUTE_RETRY,
            retry_cap=RECOMPUTE_RETRY_CAP,
            listed=synced,
        )
        self.dirty = recompute(self.flush)
        self.cluster_dirty = recompute(self.flush_cluster, name="cluster-recompute")

    def guard_inputs(self, namespace: str, quota: str) -> gd.GuardInputs | None:
        """The guard job's inputs of a quota: its last recompute's (None: an invalid spec)."""
        return self._guards.get((namespace, quota))

    def enforcement_moved(self, names: Iterable[str]) -> list[str]:
        """The cluster quotas among `names` whose every-namespace-labelled flag is not what
        their last recompute read (or that none has read): at a cold start 5,000 label writes
        each recomputed the cluster quota of its namespace, while only the last of its 100
        changes its status."""
        enforced = self.sources.found.enforced
        if enforced is None:
            return list(names)
        selection = self.sources.selection
        return [
            name
            for name in names
            if self._enforced.get(name) != all(enforced(ns) for ns in selection.of(name))
        ]

    def forget(self, namespace: str, quota: str) -> None:
        """A quota was deleted: its last outcome goes with it."""
        self._guards.pop((namespace, quota), None)
        self._folding.pop((namespace, quota), None)

    @property
    def folds_waiting(self) -> bool:
        """Some fold waits (its queue holds a timer for it)."""
        return bool(self._folding)

    def _fold_due(
        self, key: tuple[str, str], current: Mapping[str, Any] | None, desired: Mapping[str, Any]
    ) -> float | None:
        """When a write of `desired` over `current` that only folds pending charges is due
        (loop time), None when it is to be written now: it is not a fold, the quota holds
        FOLD_MAX_PENDING charges, or its fold has waited `fold_delay` already."""
        delay = self.config.fold_delay
        if (
            delay <= 0
            or st.pending_count(current) >= FOLD_MAX_PENDING
            or not st.fold_only(current, desired)
        ):
            return None
        now = asyncio.get_running_loop().time()
        due = self._folding.setdefault(key, now) + delay
        return due if now < due else None

    def _readiness(self) -> dict[str, Any]:
        """The clusters released now, and when those not Ready yet within the grace are."""
        r = self.sources.readiness
        if r is None:
            return {}
        now = time.time()
        return {"released": r.released(now), "releasing": r.releasing(now)}

    def _snapshot(self, namespace: str) -> rc.NamespaceSnapshot:
        found = self.sources.found
        snapshot = rc.NamespaceSnapshot(
            bindings=self.sources.index.bindings(namespace),
            deleted=self.sources.index.deleted,
            members=self.sources.members.views() if self.sources.members is not None else (),
            member_watch=self.config.member_watch,
            disproved=functools.partial(found.disproved, namespace),
            evicting=self.sources.index.evicting(namespace),
            **self._readiness(),
        )
        if self.sources.cohorts is not None:
            snapshot = replace(snapshot, loans=self.sources.cohorts.loans)
        if found.gone is not None:
            snapshot = replace(snapshot, gone=functools.partial(found.gone, namespace))
        if found.enforced is not None:
            snapshot = replace(snapshot, enforced=found.enforced(namespace))
        if (
            found.guards is not None
            and found.guard_problems is not None
            and found.guard_routes is not None
        ):
            snapshot = replace(
                snapshot,
                guards=functools.partial(found.guards, namespace),
                guard_problems=functools.partial(found.guard_problems, namespace),
                guard_routes=functools.partial(found.guard_routes, namespace),
            )
        return snapshot

    async def flush(self, namespace: str) -> None:
        """Recompute every quota of `namespace`; the leader writes those that differ.

        Nothing is computed before bindings and quotas are listed in full (the first list
        arrives page by page; every namespace is marked again once it is complete)."""
        if not self.synced.is_set():
            return
        label_first = self.sources.label_first
        if label_first is not None and self._may_write():
            # label first (when it is missing): the status is then written once, Enforced,
            # instead of False and again True — at a cold start 5,000 writes fewer
            await label_first(namespace)
        contended = False
        for record in self.sources.quotas.records(namespace):
            contended = not await self._sync_quota(record) or contended
        if contended:  # another writer is busy: come back very soon (its rate limiter)
            self.dirty.retry(namespace)
        leader = self._may_write()
        for job in self.jobs:
            job.after_recompute(namespace, leader)

    async def flush_cluster(self, name: str) -> None:
        """Recompute one cluster quota over the namespaces it selects now; the leader writes
        it when it differs (and labels those namespaces for enforcement, from its queue)."""
        if not self.synced.is_set():
            return
        record = self.sources.cluster_quotas.get("", name)
        selection = self.sources.selection
        before = selection.of(name)
        if record is None:
            self._enforced.pop(name, None)
            selection.set(name, frozenset())
            self._ns_sums.forget(lambda ns: bool(selection.selecting(ns)))
            return
        quota = record.quota
        labels = self.sources.found.labels
        selected = selection.choose(
            name,
            quota if isinstance(quota, ClusterKarmadaQuota) else None,
            labels.table() if labels is not None else {},
            labels.version if labels is not None else None,
        )
        if before - selection.of(name):  # namespaces left it: their sums may be held for none
            self._ns_sums.forget(lambda ns: bool(selection.selecting(ns)))
        if not await self._sync_quota(record, selected):
            self.cluster_dirty.retry(name)
        leader = self._may_write()
        for job in self.jobs:
            job.after_cluster_recompute(
                name, quota if isinstance(quota, ClusterKarmadaQuota) else None, selected, leader
            )

    def _cluster_snapshot(self, selected: list[str], name: str) -> cl.ClusterSnapshot:
        enforced = None
        if self.sources.found.enforced is not None:
            enforced = all(self.sources.found.enforced(ns) for ns in selected)
            self._enforced[name] = enforced
        return cl.ClusterSnapshot(
            selected=selected,
            bindings=self.sources.index.bindings,
            deleted=self.sources.index.deleted,
            members=self.sources.members.views() if self.sources.members is not None else (),
            member_watch=self.config.member_watch,
            enforced=enforced,
            disproved=self.sources.found.disproved("", name),
            sums=self._ns_sums.of,
            evicting=self.sources.index.evicting,
            **self._readiness(),
        )

    async def _sync_quota(self, record: QuotaRecord, selected: list[str] | None = None) -> bool:
        """Recompute one quota and write it if needed; False when every CAS attempt lost.
        With `selected` (the namespaces it picks), a cluster quota. A quota of a cohort holds
        its cohort's lock through the write (`loans.CohortBook.lock`)."""
        cohorts = self.sources.cohorts
        lock = (
            None
            if cohorts is None or selected is not None
            else cohorts.lock(record.namespace, record.name)
        )
        if lock is None:
            return await self._sync_one(record, selected)
        async with lock:
            return await self._sync_one(record, selected)

    async def _sync_one(self, record: QuotaRecord, selected: list[str] | None) -> bool:
        ns, name = record.namespace, record.name
        cluster = selected is not None
        store = self.sources.cluster_quotas if cluster else self.sources.quotas
        queue = self.cluster_dirty if cluster else self.dirty
        quota_path = paths.cluster_quota(name) if cluster else paths.quota(ns, name)
        if record.quota is None:
            return True  # unreadable (logged): nothing to recompute until it changes
        extra = {"namespace": ns, "quota": name, "uid": record.quota.metadata.uid}
        outcome: rc.Outcome | None = None
        computed = (self._clock(), 0.0)  # when the last outcome was computed, and how long it took
        folding: float | None = None  # when the fold this recompute did not write is due

        def desired(current: QuotaRecord) -> st.StatusWrite | None:
            # pure but for the clock: called again after each lost compare-and-swap, so the
            # side effects of an outcome (metrics, its expiry timer) follow the last one, below
            nonlocal outcome, computed, folding
            folding = None  # each attempt decides afresh (a retry may not be a fold)
            if current.quota is None:
                return None
            now = self._clock()
            started = time.perf_counter()
            if selected is not None and isinstance(current.quota, ClusterKarmadaQuota):
                snapshot = self._cluster_snapshot(selected, name)
                outcome = cl.recompute_cluster(current.quota, snapshot, now)
            else:
                outcome = rc.recompute(current.quota, self._snapshot(ns), now)
            if outcome.guard is not None:
                self._guards[(ns, name)] = outcome.guard
            else:
                self._guards.pop((ns, name), None)
            computed = (now, time.perf_counter() - started)
            status, wanted = current.raw.get("status"), st.dump(outcome.status)
            change = st.status_write(status, wanted)
            if change is None:
                self._folding.pop((ns, name), None)
                return None
            if not self._may_write():
                return None  # followers keep their figures warm; the leader writes
            folding = self._fold_due((ns, name), status, wanted)
            return None if folding is not None else change

        try:
            result = await self.writer.write(record, store, quota_path, desired)
        except ConflictsExhausted:
            self._computed(ns, name, outcome, *computed, queue)
            log.info("status write contended; retrying shortly", extra=extra)
            return False
        except NotFound:
            return True
        self._computed(ns, name, outcome, *computed, queue)
        if folding is not None:
            queue.mark_at(name if cluster else ns, folding)
        if result is None or outcome is None:
            return True
        if self.sources.cohorts is not None and not cluster:
            # its usage, waiting list or loans moved: the others of its cohort plan again
            self.dirty.mark_many(self.sources.cohorts.others(ns, name))
        self._folding.pop((ns, name), None)
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
        self.metrics.set_quota(ns, name, outcome.used, outcome.hard, outcome.status, outcome.cohort)
        if outcome.next_expiry is not None:
            loop = asyncio.get_running_loop()
            due = loop.time() + (outcome.next_expiry - now).total_seconds() + 0.05
            queue.mark_at(name if queue is self.cluster_dirty else ns, due)
