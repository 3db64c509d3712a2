"""The controller's KarmadaQuotas: the raw object (the base of a status write) and its model.

Fed by the quota informer and by our own status writes; the informer decides which version is
the newest (`kube.informer`), this table only holds what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karmadaquota.api import KarmadaQuota, read_quota


class QuotaRecord:
    """One quota as last stored: the raw object, parsed on first use.

    Parsing is deferred to the recompute: during a storm the webhook writes the quota (adding
    reservations) many times between two recomputes, and only the last version is read.

    `metadata.managedFields` (the API server's field-ownership bookkeeping, often the bulk of
    a quota's metadata) is not kept: a status write that omits it leaves the server's as it
    is, and with a thousand quotas it would be megabytes held for nothing.
    """

    __slots__ = ("_quota", "name", "namespace", "raw")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = dict(raw)
        meta = self.raw.get("metadata") or {}
        if "managedFields" in meta:
            meta = self.raw["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        self.namespace = str(meta.get("namespace", ""))
        self.name = str(meta.get("name", ""))
        self._quota: KarmadaQuota | bool | None = False  # False: not parsed yet

    @property
    def quota(self) -> KarmadaQuota | None:
        """The parsed quota; None (logged once) when it cannot be read."""
        if self._quota is False:
            self._quota = read_quota(self.raw)
        return self._quota if isinstance(self._quota, KarmadaQuota) else None


class QuotaTable:
    """namespace -> name -> QuotaRecord."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, QuotaRecord]] = {}

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_ns.values())

    def namespaces(self) -> list[str]:
        return sorted(self._by_ns)

    def has(self, namespace: str) -> bool:
        return namespace in self._by_ns

    def quotas(self, namespace: str) -> list[QuotaRecord]:
        return sorted(self._by_ns.get(namespace, {}).values(), key=lambda s: s.name)

    def get(self, namespace: str, name: str) -> QuotaRecord | None:
        return self._by_ns.get(namespace, {}).get(name)

    def put(self, raw: Mapping[str, Any]) -> QuotaRecord:
        record = QuotaRecord(raw)
        self._by_ns.setdefault(record.namespace, {})[record.name] = record
        return record

    def remove(self, namespace: str, name: str) -> bool:
        bucket = self._by_ns.get(namespace)
        if bucket is None or bucket.pop(name, None) is None:
            return False
        if not bucket:
            del self._by_ns[namespace]
        return True
