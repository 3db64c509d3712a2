"""The batcher's I/O, for both kinds of quota: reads from the informer-fed store, live reads
and status writes against the API server.

One class for a namespace's KarmadaQuotas (a batch queue's key is the namespace) and for a
ClusterKarmadaQuota (the key is its name): only which quotas a key holds and their REST paths
differ. The API time spent per key is kept, so that a review's own share of its latency is
what remains after the calls its batch queue made while it waited (the decision log).
"""

from __future__ import annotations

import time

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, Api
from karmadaquota.kube.quotas import QuotaStore

# A charge's read and write end within the API server's webhook timeout (the chart registers
# 3 s): a review is answered by then or not at all, so a write still running after it holds
# its batch, and the namespace's next reviews, for nothing. A write cut short refuses its
# reviews (fail closed); a pending charge it stored anyway is disproved by the orphan audit.
REQUEST_TIMEOUT = 3.0


class KubeQuotaBackend:
    """`Batcher`'s `QuotaBackend` over the API server; `cluster`: the store holds
    ClusterKarmadaQuotas, one per key."""

    def __init__(self, client: Api, store: QuotaStore, cluster: bool = False) -> None:
        self._client = client
        self._store = store
        self._cluster = cluster
        # cumulative seconds spent in API calls per key
        self.api_seconds: dict[str, float] = {}

    def quotas(self, key: str) -> list[KarmadaQuota]:
        if not self._cluster:
            return self._store.enforced(key)
        record = self._store.get("", key)
        quota = record.quota if record is not None else None
        return [quota] if quota is not None else []

    def update(self, quota: KarmadaQuota) -> None:
        self._store.fold_quota(quota)

    async def get(self, key: str, name: str) -> JSON:
        path = paths.cluster_quota(name) if self._cluster else paths.quota(key, name)
        started = time.perf_counter()
        try:
            return await self._client.request("GET", path, timeout=REQUEST_TIMEOUT)
        finally:
            self._spent(key, started)

    async def put_status(self, quota: JSON) -> JSON:
        meta = quota["metadata"]
        key = meta["name"] if self._cluster else meta["namespace"]
        path = (
            paths.cluster_quota_status(meta["name"])
            if self._cluster
            else paths.quota_status(meta["namespace"], meta["name"])
        )
        started = time.perf_counter()
        try:
            return await self._client.request("PUT", path, quota, timeout=REQUEST_TIMEOUT)
        finally:
            self._spent(key, started)

    def _spent(self, key: str, started: float) -> None:
        self.api_seconds[key] = self.api_seconds.get(key, 0.0) + time.perf_counter() - started
