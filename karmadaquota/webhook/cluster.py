"""ClusterKarmadaQuotas in the webhook: which select a review's namespace, and their writers.

A binding must fit every KarmadaQuota of its namespace and every ClusterKarmadaQuota selecting
it. Each object keeps one writer per replica: the namespace's quotas the namespace's batch
queue (as before), each cluster quota a batch queue of its own keyed by its name (a second
`Batcher` over ClusterKarmadaQuota), so reviews of many namespaces charging one cluster quota
are batched into one compare-and-swap write, and unrelated namespaces never wait for each
other. A review is submitted to all of its objects at once and admitted only when every one
reserved it; if one refuses, the reservations the others made for it are taken back by their
own writers (`Batcher.release`) — a compensation, never a retry, so a denial stays a denial.

Which cluster quotas select a namespace is read from the webhook's own namespace informer (an
AdmissionReview carries no namespace labels): the labels as the API server has them now,
milliseconds behind, rather than the selection the controller last published, which lags by
its recompute. A table that cannot say fails closed: before the namespace informer or the
cluster quota informer has listed, for a namespace it has not seen (created since), and while
its namespace watch is broken (a failed list or watch, until the next full list), a review is
refused with `try again`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace

from karmadaquota import selectors
from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.evaluate import Decision
from karmadaquota.kube.informer import Lister
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.kube.quotas import QuotaStore, cluster_quota_store
from karmadaquota.resources import ResourceList
from karmadaquota.webhook.batcher import Batcher, ChargeRequest


def cluster_store(client: Lister | None) -> QuotaStore:
    """The webhook's informer-fed store of ClusterKarmadaQuotas."""
    return cluster_quota_store(client)


class ClusterQuotas:
    """The cluster quotas, the namespace table and the cluster quotas' batcher."""

    def __init__(
        self,
        store: QuotaStore,
        labels: NamespaceLabels,
        batcher: Batcher,
        api_seconds: Mapping[str, float] | None = None,
    ) -> None:
        self.store = store
        self.labels = labels
        self.batcher = batcher
        # per cluster quota, cumulative seconds of its API calls (backend.KubeQuotaBackend)
        self.api_seconds: Mapping[str, float] = api_seconds if api_seconds is not None else {}

    def synced(self) -> bool:
        return self.store.synced.is_set() and self.labels.synced.is_set()

    def any(self) -> bool:
        return len(self.store) > 0

    def selecting(self, namespace: str) -> list[str] | None:
        """The cluster quotas selecting the namespace, by name; None when the table cannot say
        while cluster quotas exist (a namespace not seen yet, or the namespace watch broken
        and not listed again since: fail closed). A quota whose spec
        is otherwise invalid selects too: it refuses what it would charge (it has no `used`),
        as a namespaced one does; an invalid selector selects nothing."""
        if not self.any():
            return []
        labels = self.labels.get(namespace)
        if labels is None or self.labels.stale:
            return None
        out = []
        for record in self.store.records(""):
            quota = record.quota
            if not isinstance(quota, ClusterKarmadaQuota):
                continue
            if selectors.matches(quota.spec.namespaceSelector, labels):
                out.append(record.name)
        return out

    async def run(self) -> None:
        await asyncio.gather(self.store.run(), self.labels.run())

    async def close(self) -> None:
        await self.batcher.close()


def combined(results: Sequence[Decision]) -> tuple[Decision, list[int]]:
    """The review's decision from each object's (in submission order: the namespace's quotas
    first, then cluster quotas by name), and which admissions to take back (their indexes):
    allowed only if every one allowed; else the first refusal, and every admission that
    reserved something is released. A cluster quota's refusal names it, as Kubernetes names a
    quota (`exceeded quota: <name>, requested: …, used: …, limited: …`)."""
    refused = next((d for d in results if not d.allowed), None)
    if refused is None:
        charges: dict[str, ResourceList] = {}
        for d in results:
            charges.update(d.charges)
        return Decision(True, charges=charges), []
    undo = [i for i, d in enumerate(results) if d.allowed and d.charges]
    return refused, undo


def for_cluster_quota(request: ChargeRequest, name: str) -> ChargeRequest:
    """The same review queued behind one cluster quota's writer."""
    return replace(request, key=name)
