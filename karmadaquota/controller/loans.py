"""The controller's cohorts: which quotas share a cohort, and each one's loans to record.

The plan and the rules of the two writes are `karmadaquota.cohorts` (pure); here they meet the
quota store. A quota's recompute asks `CohortBook.loans` what to record as borrowed and lent
(read from its cohort's statuses as the store holds them, the quota itself as being written),
and a change of one member's status or spec marks the other members' namespaces, so that a
lender writes its side and the borrower follows (`peers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence

from karmadaquota import cohorts, resources, waiting
from karmadaquota.api import KarmadaQuota, WaitingWorkload
from karmadaquota.controller.index import IndexedBinding
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore
from karmadaquota.quantity import QuantityError
from karmadaquota.queueing import QueueEntry
from karmadaquota.resources import ResourceList

Key = tuple[str, str]  # (namespace, name)


class CohortBook:
    """cohort -> its quotas, kept from the quota store's events."""

    def __init__(
        self,
        store: QuotaStore,
        queued: Callable[[str], Iterable[QueueEntry]] = lambda namespace: (),
        bindings: Callable[[str], Mapping[str, IndexedBinding]] = lambda namespace: {},
    ) -> None:
        self.store = store
        # a namespace's bindings: a waiting create whose binding exists as another object was
        # admitted since (waiting.settled) and asks for nothing any more
        self.bindings = bindings
        # (namespace, quota) -> Σ of what its member guards may hold now (None: unknown), from
        # the guard job when it runs: a borrower's guards use a loan once the lender's guards
        # gave it up (`loans`); None: no guards kept here, loans are used as written
        self.guards_held: Callable[[str, str], Mapping[str, int] | None] | None = None
        # a namespace's bindings its quotas queued (onExceed Queue): what they wait for is
        # asked of the cohort, as a refused workload's is
        self.queued = queued
        self._members: dict[str, set[Key]] = {}
        self._cohort: dict[Key, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, namespace: str, name: str) -> asyncio.Lock | None:
        """The lock a recompute of this quota holds through its write, when it is in a cohort:
        one quota of a cohort at a time, each computed from the others as last written (a
        borrower raising its side from a lender's status that the lender lowers meanwhile
        would borrow more than is lent)."""
        cohort = self._cohort.get((namespace, name), "")
        if not cohort:
            return None
        return self._locks.setdefault(cohort, asyncio.Lock())

    def put(self, record: QuotaRecord) -> list[str]:
        """A quota stored: the namespaces of the others of its cohort (before and after)."""
        k = (record.namespace, record.name)
        quota = record.quota
        cohort = quota.spec.cohort if quota is not None else ""
        before = self._cohort.get(k, "")
        if before != cohort:
            self._leave(k)
            if cohort:
                self._cohort[k] = cohort
                self._members.setdefault(cohort, set()).add(k)
        return self._peers(k, {before, cohort})

    def delete(self, record: QuotaRecord) -> list[str]:
        """A quota deleted: the namespaces of the others of its cohort."""
        k = (record.namespace, record.name)
        cohort = self._cohort.get(k, "")
        self._leave(k)
        return self._peers(k, {cohort})

    def others(self, namespace: str, name: str) -> list[str]:
        """The namespaces of the other quotas of its cohort: what a write of this quota's
        status may move (the store reports no write of ours to `put`)."""
        k = (namespace, name)
        return self._peers(k, {self._cohort.get(k, "")})

    def _leave(self, k: Key) -> None:
        cohort = self._cohort.pop(k, "")
        if cohort:
            members = self._members.get(cohort, set())
            members.discard(k)
            if not members:
                self._members.pop(cohort, None)

    def _peers(self, k: Key, names: Iterable[str]) -> list[str]:
        out = {ns for c in names if c for ns, _ in self._members.get(c, ()) if (ns, _) != k}
        return sorted(out)

    def loans(
        self, quota: KarmadaQuota, used: ResourceList | None = None
    ) -> (
        tuple[dict[str, cohorts.Amounts], dict[str, cohorts.Amounts], dict[str, cohorts.Amounts]]
        | None
    ):
        """What `quota` (as being written; `used`: its usage as just computed, else its status')
        is to record as (borrowed, lent), and what of its borrowed its member guards may use
        (`usable`); None when it is in no cohort and holds no loan (nothing to change)."""
        me = cohorts.key(quota)
        cohort = quota.spec.cohort
        if not cohort and not quota.status.borrowed and not quota.status.lent:
            return None
        ns, name = quota.metadata.namespace, quota.metadata.name
        others: dict[str, KarmadaQuota] = {}
        for k in sorted(self._members.get(cohort, ())) if cohort else ():
            if k == (ns, name):
                continue
            record = self.store.get(*k)
            if record is not None and record.quota is not None:
                others[f"{k[0]}/{k[1]}"] = record.quota
        # the other side of every loan it holds, in a cohort or not any more
        for entry in [*quota.status.borrowed, *quota.status.lent]:
            if entry.quota not in others and "/" in entry.quota:
                record = self.store.get(*entry.quota.split("/", 1))
                if record is not None and record.quota is not None:
                    others[entry.quota] = record.quota
        # its cohort as the plan reads it; a quota that left keeps only what is borrowed
        members = [
            m
            for q in ([quota, *others.values()] if cohort else [])
            if q.spec.cohort == cohort
            and (m := self.member(q, used if q is quota else None)) is not None
        ]
        planned = cohorts.plan(members)
        lent_to_me = {k: cohorts.loans_of(q.status.lent).get(me, {}) for k, q in others.items()}
        borrowed_from_me = {
            k: cohorts.loans_of(q.status.borrowed).get(me, {}) for k, q in others.items()
        }
        borrowed = cohorts.borrowed(me, planned, lent_to_me)
        return borrowed, cohorts.lent(me, planned, borrowed_from_me), self._usable(me, borrowed)

    def _usable(
        self, me: str, borrowed: Mapping[str, cohorts.Amounts]
    ) -> dict[str, cohorts.Amounts]:
        """Of each loan, what the lender's guards gave up: its hard less what they may hold
        now, shared among its borrowers in the order of their names. Until then the lender's
        members may still run it, so the borrower's members may not (Σ guards ≤ Σ hard)."""
        out: dict[str, cohorts.Amounts] = {}
        for lender, amounts in borrowed.items():
            record = self.store.get(*lender.split("/", 1)) if "/" in lender else None
            quota = record.quota if record is not None else None
            if quota is None or not quota.spec.guarded or self.guards_held is None:
                out[lender] = dict(amounts)  # no guards there: admission alone holds it
                continue
            held = self.guards_held(quota.metadata.namespace, quota.metadata.name)
            if held is None:
                continue  # not known yet: none of it
            hard = cohorts.amounts(quota.spec.hard)
            lent = cohorts.loans_of(quota.status.lent)
            got: cohorts.Amounts = {}
            for n, v in amounts.items():
                freed = max(0, hard.get(n, 0) - held.get(n, 0))
                before = sum(a.get(n, 0) for b, a in lent.items() if b < me)
                got[n] = min(v, max(0, freed - before))
            out[lender] = got
        return out

    def member(
        self, quota: KarmadaQuota, used: ResourceList | None = None
    ) -> cohorts.Member | None:
        """A quota as the plan reads it: what waits in it are its waiting workloads not
        admitted since and the bindings it queued (`used`: its usage as just computed)."""
        ns, name = quota.metadata.namespace, quota.metadata.name
        holders: dict[str, set[str]] = {}
        for uid, b in self.bindings(ns).items():
            holders.setdefault(b.name, set()).add(uid)
        still = [w for w in quota.status.waiting if not waiting.settled(w, holders)]
        queued = resources.total(e.charge.total for e in self.queued(ns) if e.quota == name)
        return member(quota, still, queued, used)


def member(
    quota: KarmadaQuota,
    waits: Sequence[WaitingWorkload] | None = None,
    queued: ResourceList | None = None,
    used: ResourceList | None = None,
) -> cohorts.Member | None:
    """A quota as the plan reads it (`waits`: its waiting workloads, else its status'; `queued`:
    what the bindings it queued ask for; `used`: its usage as just computed, else its status');
    None when a value of it cannot be read (validation and admission report and refuse it; it
    neither lends nor borrows)."""
    try:
        hard = resources.parse_resource_list(quota.spec.hard, "spec.hard")
        if used is None:
            used = resources.parse_resource_list(quota.status.used, "status.used")
        pending = resources.total(
            resources.parse_resource_list(r.reserved, "pending") for r in quota.status.reservations
        )
        wanted = resources.total(
            [
                *(
                    resources.parse_resource_list(w.requested, "waiting")
                    for w in (quota.status.waiting if waits is None else waits)
                ),
                queued or {},
            ]
        )
    except QuantityError:
        return None
    names = set(hard)
    spec = quota.spec
    return cohorts.Member(
        key=cohorts.key(quota),
        hard={n: q.nanos for n, q in hard.items()},
        used={
            n: (used[n].nanos if n in used else 0) + (pending[n].nanos if n in pending else 0)
            for n in names
        },
        wanted={n: q.nanos for n, q in wanted.items() if n in names},
        borrowing_limit=(
            None if spec.borrowingLimit is None else cohorts.amounts(spec.borrowingLimit, names)
        ),
        lending_limit=(
            None if spec.lendingLimit is None else cohorts.amounts(spec.lendingLimit, names)
        ),
        borrowed=cohorts.loans_of(quota.status.borrowed),
        lent=cohorts.loans_of(quota.status.lent),
        known=names <= set(used),
    )
