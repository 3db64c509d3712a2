"""A watch-fed cache of KarmadaQuotas, so that admission never LISTs per request.

LIST once, then WATCH from that resourceVersion; relist when the watch expires (410) or breaks.
Our own status writes are folded in immediately (`update`) so the next batch starts from what we
wrote; a late watch event carrying an older resourceVersion never rolls the cache back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pydantic import ValidationError

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, Gone, KubeClient

log = logging.getLogger("karmadaquota.cache")


def _rv(obj: KarmadaQuota) -> int:
    return _int_rv(obj.metadata.resourceVersion)


def _int_rv(rv: str) -> int:
    try:
        return int(rv)
    except ValueError:
        return -1


class QuotaCache:
    def __init__(self, client: KubeClient, on_change: Callable[[int], None] | None = None) -> None:
        self._client = client
        self._by_ns: dict[str, dict[str, KarmadaQuota]] = {}
        self._on_change = on_change
        self.synced = asyncio.Event()

    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        return list(self._by_ns.get(namespace, {}).values())

    def has_quotas(self, namespace: str) -> bool:
        return bool(self._by_ns.get(namespace))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_ns.values())

    def update(self, quota: KarmadaQuota) -> None:
        """Fold in a newer version of a quota (ours or the watch's); never go backwards."""
        ns = self._by_ns.setdefault(quota.metadata.namespace, {})
        current = ns.get(quota.metadata.name)
        if current is None or _rv(quota) >= _rv(current) or _rv(quota) < 0:
            ns[quota.metadata.name] = quota
            self._changed()

    def _known(self, obj: JSON, rv: str) -> bool:
        """The cache already holds this version (or a newer one): no need to parse it."""
        meta = obj.get("metadata", {})
        current = self._by_ns.get(meta.get("namespace", ""), {}).get(meta.get("name", ""))
        return current is not None and 0 <= _int_rv(rv) <= _rv(current)

    def remove(self, namespace: str, name: str) -> None:
        self._by_ns.get(namespace, {}).pop(name, None)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self))

    async def run(self) -> None:
        """List and watch forever; the caller cancels the task to stop it."""
        while True:
            try:
                rv = await self._list()
                self.synced.set()
                while True:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("quota watch expired; listing again")
            except Exception as e:
                log.warning("quota watch failed; listing again in 1s", extra={"error": str(e)})
                await asyncio.sleep(1.0)  # back-off before reconnecting, not synchronisation

    async def _list(self) -> str:
        doc = await self._client.get(paths.quotas())
        fresh: dict[str, dict[str, KarmadaQuota]] = {}
        for item in doc.get("items", []):
            q = _parse(item)
            if q is not None:
                fresh.setdefault(q.metadata.namespace, {})[q.metadata.name] = q
        self._by_ns = fresh
        self._changed()
        return str(doc.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, rv: str) -> str:
        async for kind, obj in self._client.watch(paths.quotas(), rv):
            new_rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
            if kind == "BOOKMARK" or (kind != "DELETED" and self._known(obj, new_rv)):
                rv = new_rv  # a bookmark, or a version we hold already (our own PUT)
                continue
            q = _parse(obj)
            if q is None:
                continue
            if kind == "DELETED":
                self.remove(q.metadata.namespace, q.metadata.name)
            else:
                self.update(q)
            rv = new_rv
        return rv


def _parse(obj: JSON) -> KarmadaQuota | None:
    try:
        return KarmadaQuota.model_validate(obj)
    except ValidationError as e:
        meta = obj.get("metadata", {})
        log.warning(
            "ignoring unreadable KarmadaQuota",
            extra={"namespace": meta.get("namespace"), "quota": meta.get("name"), "error": str(e)},
        )
        return None
