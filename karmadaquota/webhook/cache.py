"""A watch-fed cache of KarmadaQuotas, so that admission never LISTs per request.

Fed by the shared informer (`kube.informer`: list, watch, relist on 410, version order). Our
own status writes are folded in at once (`update`) so the next batch starts from what we wrote;
the informer then skips the watch's echo of that write, and a late event carrying an older
resourceVersion never rolls the cache back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from karmadaquota.api import KarmadaQuota, read_quota
from karmadaquota.kube import paths
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.retry import Backoff


class QuotaCache:
    """namespace -> name -> KarmadaQuota, as the informer delivers them (its `Handler`)."""

    def __init__(self, client: Lister, on_change: Callable[[int], None] | None = None) -> None:
        self._by_ns: dict[str, dict[str, KarmadaQuota]] = {}
        self._on_change = on_change
        self.informer = Informer(paths.quotas(), self, client, backoff=Backoff(1.0, 1.0))
        self.synced = self.informer.synced

    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        return list(self._by_ns.get(namespace, {}).values())

    def has_quotas(self, namespace: str) -> bool:
        return bool(self._by_ns.get(namespace))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_ns.values())

    def update(self, quota: KarmadaQuota) -> None:
        """Fold in the quota a status write returned, unless a newer version is held."""
        meta = quota.metadata
        if self.informer.hold(meta.namespace, meta.name, meta.uid, meta.resourceVersion):
            self._put(quota)

    async def run(self) -> None:
        """List and watch forever; the caller cancels the task to stop it."""
        await self.informer.run()

    # ---- informer.Handler --------------------------------------------------------------------

    def added(self, obj: Mapping[str, Any]) -> None:
        q = read_quota(obj)
        if q is not None:
            self._put(q)

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self._by_ns.get(str(meta.get("namespace", "")), {}).pop(str(meta.get("name", "")), None)
        self._changed()

    def relisted(self, resource_version: int) -> None:
        self._changed()

    def _put(self, quota: KarmadaQuota) -> None:
        self._by_ns.setdefault(quota.metadata.namespace, {})[quota.metadata.name] = quota
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self))
