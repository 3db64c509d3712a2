"""The orphan audit: pending charges of bindings that were never stored, released on proof.

Admission happens before the API server stores the object, so a create can still fail after
it (the name already taken, another webhook refusing it), and an UPDATE admitted can lose the
API server's resourceVersion check: its charge then waits for a binding that never comes. On
the leader, after each recompute of a namespace (its own queue, so that the binding GETs never
hold up a recompute), the audit looks at the pending charges of the namespace's bindings —
in its quotas and in every cluster quota — that no binding in the index explains
(`recompute.orphan_checks`, `recompute.stale_charges`) and proves one only when a quorum GET
after the admission window disproves it; nothing is released because it expired. The audit
writes nothing: what it proved (`index.mark_absent` for a create, `disproved` for an UPDATE)
is released by the recompute's own status write, which it marks at once (`released`): one
writer of quota status in the controller, for both kinds of quota. Its look-agains (the
grace, the admission window) are on its own queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller import recompute as rc
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.controller.index import BindingIndex
from karmadaquota.kube import paths
from karmadaquota.kube.client import Api, NotFound
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.pending import EntryKey

log = logging.getLogger("karmadaquota.controller")


class AuditConfig(Protocol):
    """The reconciler's configuration the audit reads (each time: tests and flags change them)."""

    orphan_grace: float
    admission_window: float


class OrphanAudit:
    """`queue` (per namespace of bindings): prove the pending charges its GETs disprove
    (leader only); the recompute releases them.

    `may_write()`: the leader, once quotas and bindings are listed. `released(ns)`: some
    pending charge of the namespace's bindings was disproved (its quotas, and the cluster
    quotas, are recomputed)."""

    def __init__(
        self,
        api: Api,
        quotas: QuotaStore,
        cluster_quotas: QuotaStore,
        index: BindingIndex,
        config: AuditConfig,
        may_write: Callable[[], bool],
        released: Callable[[str], None],
    ) -> None:
        self.api = api
        self.quotas = quotas
        self.cluster_quotas = cluster_quotas
        self.index = index
        self.config = config
        self._may_write = may_write
        self._released = released
        self.queue = DirtyQueue(self._audit, quiet=0.0, max_delay=0.0, name="orphan-audit")
        self._unseen: dict[str, float] = {}  # reservation uid -> loop time first seen unobserved
        self._absent: set[str] = set()  # of those, the ones whose binding's name a GET found free
        # (namespace, quota namespace, quota, key, count) of a stale charge -> loop time first
        # seen so (the quota namespace is "" for a cluster quota)
        self._stale: dict[tuple[str, str, str, EntryKey, int], float] = {}
        # (namespace, quota namespace, quota) -> entries disproved, until the quota holds
        # them no more (the recompute's write released them)
        self._disproved: dict[tuple[str, str, str], dict[EntryKey, int]] = {}

    def after_recompute(self, namespace: str, leader: bool) -> None:
        if leader:
            self.queue.mark(namespace)

    def after_cluster_recompute(
        self, name: str, quota: ClusterKarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        if leader and quota is not None:  # its pending charges, in their bindings' namespaces
            self.queue.mark_many(
                sorted({r.reservedBy.namespace for r in quota.status.reservations})
            )

    def disproved(self, quota_namespace: str, quota: str) -> Mapping[EntryKey, int]:
        """The entries of a quota's pending charges proved never stored, for the recompute
        to release (`recompute.NamespaceSnapshot.disproved`)."""
        if not self._disproved:
            return {}
        found: dict[EntryKey, int] = {}
        for (_, qns, name), entries in self._disproved.items():
            if qns == quota_namespace and name == quota:
                found.update(entries)
        return found

    async def _audit(self, namespace: str) -> None:
        """The orphan audit of one namespace (leader only): a released reservation is
        recomputed at once."""
        if self._may_write() and await self._audit_orphans(namespace):
            self._released(namespace)

    async def _audit_orphans(self, namespace: str) -> bool:
        """Release reservations of bindings that do not exist, or that exist below the
        generation charged (`_audit_stale`); True when some were found. Nothing is released
        because it expired: only what a quorum GET after the admission window disproves."""
        stale = await self._audit_stale(namespace)
        now = asyncio.get_running_loop().time()
        unobserved = rc.unobserved_reservations(
            [*self.quotas.quotas(namespace), *self.cluster_quotas.quotas("")],
            self.index.bindings(namespace),
            self.index.deleted,
            namespace,
        )
        window = self.config.admission_window
        checks = rc.orphan_checks(
            unobserved, self._unseen, self._absent, now, self.config.orphan_grace, window
        )
        self._unseen = checks.first_seen
        self._absent &= checks.first_seen.keys()
        if checks.recheck_at is not None:
            self.queue.mark_at(namespace, checks.recheck_at + 0.05)
        found = False
        for uid, name in checks.due.items():
            try:
                current = await self.api.get(f"{paths.bindings(namespace)}/{name}")
                holder = str(current.get("metadata", {}).get("uid", ""))
            except NotFound:
                holder = ""
            if rc.is_orphan(uid, holder, now - checks.first_seen[uid], window):
                log.info(
                    "reservation of a binding that does not exist released",
                    extra={"namespace": namespace, "binding": name, "uid": uid},
                )
                self.index.mark_absent(namespace, uid)
                self._unseen.pop(uid, None)
                self._absent.discard(uid)
                found = True
            elif not holder:  # its create may still be in flight: look again after the window
                self._absent.add(uid)
                self.queue.mark_at(namespace, checks.first_seen[uid] + window + 0.05)
        return found or stale

    async def _audit_stale(self, namespace: str) -> bool:
        """Disprove the charges of UPDATEs admitted but never stored (the binding is still
        below their generation once the admission window has passed since they were all
        there), in the namespace's quotas and in every cluster quota; True when one was newly
        disproved (the recompute then writes each quota without exactly those entries)."""
        now = asyncio.get_running_loop().time()
        window = self.config.admission_window
        charges = rc.stale_charges(
            [*self.quotas.quotas(namespace), *self.cluster_quotas.quotas("")],
            self.index.bindings(namespace),
        )
        seen = {(namespace, c.quota_namespace, c.quota, c.key, c.count) for c in charges}
        self._stale = {k: t for k, t in self._stale.items() if k[0] != namespace or k in seen}
        held = {k[:4] for k in seen}
        self._disproved = {
            q: kept
            for q, entries in self._disproved.items()
            if (kept := {k: n for k, n in entries.items() if q[0] != namespace or (*q, k) in held})
        }
        holders: dict[str, tuple[str, int]] = {}  # binding name -> (uid, generation) read
        found = False
        for c in charges:
            first = self._stale.setdefault(
                (namespace, c.quota_namespace, c.quota, c.key, c.count), now
            )
            due = first + window + rc.STALE_MARGIN
            if now < due:
                self.queue.mark_at(namespace, due + 0.05)
                continue
            if c.name not in holders:
                try:
                    got = await self.api.get(f"{paths.bindings(namespace)}/{c.name}")
                    meta = got.get("metadata") or {}
                    gen = meta.get("generation")
                    holders[c.name] = (str(meta.get("uid", "")), gen if isinstance(gen, int) else 0)
                except NotFound:
                    holders[c.name] = ("", 0)
            uid, generation = holders[c.name]
            if uid != c.key[0]:  # the object is gone (its name free, or another's): a uid
                self.index.mark_absent(namespace, c.key[0])  # never comes back
                found = True
                continue
            if not rc.stale_disproved(uid, generation, c, now - first, window):
                continue
            entries = self._disproved.setdefault((namespace, c.quota_namespace, c.quota), {})
            if entries.get(c.key) != c.count:
                entries[c.key] = c.count
                found = True
                log.info(
                    "charge of an update never stored disproved",
                    extra={
                        "namespace": namespace,
                        "quota": c.quota,
                        "quota_namespace": c.quota_namespace,
                        "binding": c.name,
                        "uid": c.key[0],
                        "generation": c.key[1],
                        "count": c.count,
                    },
                )
        return found
