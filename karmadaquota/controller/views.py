"""The tenants' view of cluster quotas: an AppliedClusterKarmadaQuota in every selected namespace.

A tenant with only namespaced read rights cannot read a cluster-scoped ClusterKarmadaQuota, and
its status lists every namespace's usage. So the leader keeps, in each namespace a cluster quota
selects, a namespaced object of that name showing the totals and that namespace's usage
(`cluster.view`); an aggregated ClusterRole lets `view`, `edit` and `admin` read it
(docs/cluster-quotas.md). Views are watched (an informer) and written from their own queue,
keyed by the cluster quota, coalesced (a storm's hundreds of status changes become a write per
namespace every `max_delay`), only where they differ; a view of a namespace no longer selected
is deleted, and every view is owned by its cluster quota (the garbage collector takes them with
it). They are informational: admission never reads them.

A view whose only change is the cluster quota's totals (`used`, `summary`: another namespace's
usage moved) waits until `totals_delay` has passed since the totals were last brought up to date
everywhere: otherwise every admission anywhere under a cluster quota of 100 namespaces rewrote
100 views a second, on the API server that admission waits on (docs/benchmarks.md, issue 37).
A namespace's own usage, the hard and the selection are written within `max_delay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from karmadaquota.api import (
    APPLIED_PLURAL,
    CLUSTER_QUOTA_LABEL,
    GROUP,
    VERSION,
    ClusterKarmadaQuota,
)
from karmadaquota.controller.cluster import view
from karmadaquota.controller.dirty import DirtyQueue
from karmadaquota.kube.client import Api, KubeError, NotFound
from karmadaquota.kube.informer import Informer, Lister

log = logging.getLogger("karmadaquota.controller.views")

# cluster quotas whose views are written at once: informational, they take a small share of the
# API server, which a cold start's quota status writes need (50 cluster quotas × 100 views to
# create beside 5,000 statuses: docs/benchmarks.md, issue 37)
CONCURRENCY = 2


def views_path(namespace: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}"
    return (
        f"{base}/namespaces/{namespace}/{APPLIED_PLURAL}"
        if namespace
        else f"{base}/{APPLIED_PLURAL}"
    )


class Views:
    """Views in (an informer's `Handler`), view writes out (`queue`, keyed by cluster quota)."""

    def __init__(
        self,
        api: Api,
        lister: Lister,
        quota: Callable[[str], ClusterKarmadaQuota | None],
        selected: Callable[[str], frozenset[str]],
        may_write: Callable[[], bool],
        *,
        page_size: int = 500,
        relist_period: float | None = None,
        max_delay: float = 1.0,
        totals_delay: float = 10.0,
    ) -> None:
        self._api = api
        self._quota = quota
        self._selected = selected
        self._may_write = may_write
        # cluster quota -> namespace -> the view as last seen
        self._held: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.informer = Informer(
            views_path(),
            self,
            lister,
            page_size=page_size,
            relist_period=relist_period,
            name="appliedclusterkarmadaquotas",
        )
        self.queue = DirtyQueue(
            self.sync, quiet=0.2, max_delay=max_delay, concurrency=CONCURRENCY, name="views"
        )
        self.writes = 0
        self.totals_delay = totals_delay
        # cluster quota -> when (loop time) its views' totals were last all brought up to date
        self._totals_at: dict[str, float] = {}

    def after_recompute(self, namespace: str, leader: bool) -> None:
        """A view shows a cluster quota only."""

    def after_cluster_recompute(
        self, name: str, quota: ClusterKarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        if leader:
            self.queue.mark(name)

    def held(self, quota: str) -> Mapping[str, Mapping[str, Any]]:
        return self._held.get(quota, {})

    # ---- informer.Handler ------------------------------------------------------------------

    def added(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(CLUSTER_QUOTA_LABEL)
        if owner:
            self._held.setdefault(str(owner), {})[str(meta.get("namespace"))] = obj

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner = str((meta.get("labels") or {}).get(CLUSTER_QUOTA_LABEL) or "")
        held = self._held.get(owner)
        if held is not None:
            held.pop(str(meta.get("namespace")), None)
            if not held:
                del self._held[owner]

    def relisted(self, resource_version: int) -> None:
        self.queue.mark_many(list(self._held))

    # ---- the job ---------------------------------------------------------------------------

    async def sync(self, name: str) -> None:
        """Make the views of one cluster quota what its status says (leader only)."""
        if not self._may_write() or not self.informer.synced.is_set():
            return
        quota = self._quota(name)
        wanted: dict[str, dict[str, Any]] = {}
        if quota is not None and quota.status.hard:
            wanted = {ns: view(quota, ns) for ns in sorted(self._selected(name))}
        held = dict(self.held(name))
        now = asyncio.get_running_loop().time()
        totals_due = self._totals_at.get(name, -math.inf) + self.totals_delay
        waiting = False  # some view's totals wait for `totals_due`
        try:
            for ns, doc in wanted.items():
                have = held.get(ns)
                if have is None:
                    stored = await self._api.request("POST", views_path(ns), doc)
                elif have.get("status") != doc["status"]:
                    if now < totals_due and _totals_only(have.get("status"), doc["status"]):
                        waiting = True
                        continue
                    rv = (have.get("metadata") or {}).get("resourceVersion")
                    body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": rv}}
                    stored = await self._api.request("PUT", f"{views_path(ns)}/{name}", body)
                else:
                    continue
                self.informer.offer("MODIFIED", stored)
                self.writes += 1
            for ns in sorted(set(held) - set(wanted)):
                with contextlib.suppress(NotFound):
                    await self._api.request("DELETE", f"{views_path(ns)}/{name}")
                self.deleted(held[ns])
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.info("view not written; retrying", extra={"quota": name, "error": str(e)})
            self.queue.retry(name)
            return
        if waiting:
            self.queue.mark_at(name, totals_due)
        elif not wanted:
            self._totals_at.pop(name, None)
        elif now >= totals_due:  # every view's totals written now: the next wait from here
            self._totals_at[name] = now


# what a view shows of the cluster quota as a whole (it moves with every other namespace)
_TOTALS = frozenset({"used", "summary"})


def _totals_only(have: Any, want: Mapping[str, Any]) -> bool:
    """The view as held differs from the one wanted in the cluster quota's totals only."""
    if not isinstance(have, Mapping):
        return False
    names = (set(have) | set(want)) - _TOTALS
    return all(have.get(n) == want.get(n) for n in names)
