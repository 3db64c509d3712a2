"""Forced reclaim within a cohort (`spec.reclaimWithinCohort: Any`), the leader's job.

A lender whose workloads wait because what it lent is in use takes it back through Karmada:
the borrowers' bindings `cohorts.reclaim` picks (lowest priority first, then the most recently
written) are *queued* — our annotation naming the borrower's quota, scheduling suspended, the
placement cleared (one merge patch on the resourceVersion the pick was made from, through the
validating webhook like any UPDATE). Karmada's binding controller then removes their Works, so
the members stop running them; the borrower's usage falls as their pods end, its loans come
back (`cohorts.plan`, the waiting lender's first) and the lender's workload is admitted. The
queued bindings wait in the borrower's queue (`controller.dequeue`) until its quota has room
again. A Reclaimed event on each one's resource template says why.

Nothing here writes a quota or a loan: the loans follow the usage, so a reclaim never lets the
lender use what the borrower's members still run. A binding already on its way out (queued, or
its pods ending) counts as coming back (`coming`), so a reclaim is not repeated for it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

from karmadaquota import cohorts, queued, scopes
from karmadaquota.api import RECLAIM_ANY, ClusterKarmadaQuota, KarmadaQuota
from karmadaquota.controller import events
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.index import BindingIndex
from karmadaquota.controller.loans import CohortBook, member
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, MERGE_PATCH, Api, Conflict, KubeError, NotFound
from karmadaquota.queueing import Template

log = logging.getLogger("karmadaquota.reclaim")

EVENT_RECLAIMED = "Reclaimed"


class Reclaimer:
    """The reclaim job: its queue (per namespace of a reclaiming lender) and the patches."""

    def __init__(
        self,
        api: Api,
        index: BindingIndex,
        book: CohortBook,
        class_values: Callable[[set[str]], Awaitable[Mapping[str, int]]],
        may_write: Callable[[], bool],
        timeout: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.index = index
        self.book = book
        # PriorityClass values by name (the dequeuer's cached reads)
        self._class_values = class_values
        self._may_write = may_write
        self.timeout = timeout
        self._clock = clock
        self.queue = DirtyQueue(self.sync, quiet=0.2, max_delay=1.0, name="reclaim")

    def after_recompute(self, namespace: str, leader: bool) -> None:
        if leader and any(_reclaims(q) for q in self.book.store.quotas(namespace)):
            self.queue.mark(namespace)

    def after_cluster_recompute(
        self,
        name: str,
        quota: ClusterKarmadaQuota | None,
        selected: Sequence[str],
        leader: bool,
    ) -> None:
        """A cluster quota joins no cohort."""

    async def sync(self, namespace: str) -> None:
        for quota in self.book.store.quotas(namespace):
            if _reclaims(quota) and self._may_write():
                await self._reclaim(quota)

    async def _reclaim(self, quota: KarmadaQuota) -> None:
        lent = cohorts.loans_of(quota.status.lent)
        lender = self.book.member(quota)
        if lender is None or not lent or not any(lender.wanted.values()):
            return
        candidates: list[tuple[cohorts.Candidate, str]] = []  # with the class it names
        coming: cohorts.Amounts = {}
        for key in sorted(lent):
            ns, _, name = key.partition("/")
            record = self.book.store.get(ns, name)
            borrower = record.quota if record is not None else None
            held = member(borrower) if borrower is not None else None
            if borrower is None or held is None:
                continue
            exprs = scopes.expressions(borrower.spec)
            bound = dict.fromkeys(held.hard, 0)
            for b in self.index.bindings(ns).values():
                if b.queue is not None or not scopes.matches(exprs, b.usage.traits):
                    continue
                charge = {
                    n: b.usage.total[i] for i, n in enumerate(b.usage.names) if n in held.hard
                }
                for n, v in charge.items():
                    bound[n] += v
                c = cohorts.Candidate(key, ns, b.name, charge, 0, b.rv)
                candidates.append((c, b.usage.traits.priority_class))
            for n, hard in held.hard.items():
                leaving = held.used.get(n, 0) - max(hard, bound[n])
                coming[n] = coming.get(n, 0) + min(lent[key].get(n, 0), max(0, leaving))
        if not candidates:
            return
        values = await self._class_values({cls for _, cls in candidates if cls})
        ranked = [
            cohorts.Candidate(
                c.borrower, c.namespace, c.name, c.charge, values.get(cls, 0), c.written
            )
            for c, cls in candidates
        ]
        for c in cohorts.reclaim(lender, lent, coming, ranked):
            await self._queue_binding(quota, c)

    async def _queue_binding(self, lender: KarmadaQuota, c: cohorts.Candidate) -> None:
        """Queue one borrower binding by the borrower's quota (see the module docstring)."""
        path = f"{paths.bindings(c.namespace)}/{c.name}"
        borrower = c.borrower.partition("/")[2]
        try:
            rb = await self.api.get(path)
            meta = rb.get("metadata") or {}
            if queued.marked(rb):
                return
            body: JSON = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {queued.ANNOTATION: borrower},
                },
                "spec": {"suspension": {"scheduling": True}, "clusters": None},
            }
            await self.api.request(
                "PATCH", path, body, timeout=self.timeout, content_type=MERGE_PATCH
            )
        except (NotFound, Conflict):
            self.queue.retry(lender.metadata.namespace)  # gone or moved: picked again
            return
        except (KubeError, TimeoutError, OSError) as e:
            log.warning(
                "reclaim not made",
                extra={"namespace": c.namespace, "binding": c.name, "error": str(e)},
            )
            self.queue.retry(lender.metadata.namespace)
            return
        log.info(
            "binding queued to reclaim a loan",
            extra={
                "namespace": c.namespace,
                "binding": c.name,
                "lender": cohorts.key(lender),
                "cohort": lender.spec.cohort,
            },
        )
        await self._event(rb, lender, c)

    async def _event(self, rb: JSON, lender: KarmadaQuota, c: cohorts.Candidate) -> None:
        r = (rb.get("spec") or {}).get("resource") or {}
        template = Template(
            str(r.get("apiVersion", "")),
            str(r.get("kind", "")),
            str(r.get("name", "")),
            str(r.get("uid", "")),
        )
        wanted = ",".join(f"{n}={v / 1e9:g}" for n, v in sorted(c.charge.items()) if v)
        message = (
            f"cohort {lender.spec.cohort}: quota {cohorts.key(lender)} reclaims what it lent "
            f"to {c.borrower} (reclaimWithinCohort: Any) for its waiting workloads; "
            f"{c.name} ({wanted}, priority {c.priority}) is queued until {c.borrower} has "
            "room again"
        )
        await events.record(
            self.api, c.namespace, template, EVENT_RECLAIMED, message, self._clock(), warning=True
        )


def _reclaims(quota: KarmadaQuota) -> bool:
    return bool(quota.spec.cohort) and quota.spec.reclaimWithinCohort == RECLAIM_ANY
