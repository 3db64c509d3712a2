"""The controller's view of KarmadaQuotas: the raw object (for writes) and its parsed model.

Fed by watch events, relists and our own status writes; like the binding index, a version is
replaced only by one at least as new, and a relist drops quotas it does not contain unless they
are newer than the list.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.index import parse_rv

log = logging.getLogger("karmadaquota.controller.store")


@dataclass(frozen=True, slots=True)
class StoredQuota:
    raw: dict[str, Any]
    quota: KarmadaQuota
    rv: int

    @property
    def namespace(self) -> str:
        return self.quota.metadata.namespace

    @property
    def name(self) -> str:
        return self.quota.metadata.name


def parse_quota(raw: Mapping[str, Any]) -> StoredQuota | None:
    try:
        quota = KarmadaQuota.model_validate(raw)
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        log.warning(
            "ignoring unreadable KarmadaQuota",
            extra={"namespace": meta.get("namespace"), "quota": meta.get("name"), "error": str(e)},
        )
        return None
    return StoredQuota(dict(raw), quota, parse_rv(quota.metadata.resourceVersion))


class QuotaStore:
    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, StoredQuota]] = {}

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_ns.values())

    def namespaces(self) -> list[str]:
        return sorted(self._by_ns)

    def has(self, namespace: str) -> bool:
        return namespace in self._by_ns

    def quotas(self, namespace: str) -> list[StoredQuota]:
        return sorted(self._by_ns.get(namespace, {}).values(), key=lambda s: s.name)

    def get(self, namespace: str, name: str) -> StoredQuota | None:
        return self._by_ns.get(namespace, {}).get(name)

    def update(self, raw: Mapping[str, Any]) -> StoredQuota | None:
        """Fold in a version of a quota; the stored one if it changed, else None."""
        stored = parse_quota(raw)
        if stored is None:
            return None
        bucket = self._by_ns.setdefault(stored.namespace, {})
        current = bucket.get(stored.name)
        if current is not None and stored.rv and current.rv > stored.rv:
            return None  # an older version (a late event after our own write)
        bucket[stored.name] = stored
        return stored

    def remove(self, namespace: str, name: str, rv: int = 0) -> bool:
        bucket = self._by_ns.get(namespace)
        if bucket is None or name not in bucket:
            return False
        if rv and bucket[name].rv > rv:
            return False
        del bucket[name]
        if not bucket:
            del self._by_ns[namespace]
        return True

    def replace(self, items: Iterable[Mapping[str, Any]], list_rv: int) -> set[str]:
        """Fold in a full list; returns every namespace that has (or had) quotas."""
        seen: set[tuple[str, str]] = set()
        touched: set[str] = set()
        for raw in items:
            self.update(raw)
            meta = raw.get("metadata") or {}
            key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            seen.add(key)
            touched.add(key[0])
        for ns in list(self._by_ns):
            touched.add(ns)
            for name, s in list(self._by_ns[ns].items()):
                if (ns, name) not in seen and (not list_rv or s.rv <= list_rv):
                    self.remove(ns, name)
        return touched
