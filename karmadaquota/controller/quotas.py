"""The controller's KarmadaQuotas: the raw object (the base of a status write) and its model.

Fed by the quota informer and by our own status writes; the informer decides which version is
the newest (`kube.informer`), this table only holds what it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from karmadaquota.api import KarmadaQuota

log = logging.getLogger("karmadaquota.controller.quotas")


@dataclass(frozen=True, slots=True)
class QuotaRecord:
    raw: dict[str, Any]
    quota: KarmadaQuota

    @property
    def namespace(self) -> str:
        return self.quota.metadata.namespace

    @property
    def name(self) -> str:
        return self.quota.metadata.name


def parse_quota(raw: Mapping[str, Any]) -> QuotaRecord | None:
    try:
        quota = KarmadaQuota.model_validate(raw)
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        log.warning(
            "ignoring unreadable KarmadaQuota",
            extra={"namespace": meta.get("namespace"), "quota": meta.get("name"), "error": str(e)},
        )
        return None
    return QuotaRecord(dict(raw), quota)


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

    def put(self, raw: Mapping[str, Any]) -> QuotaRecord | None:
        """Store a quota; the record, or None when it cannot be read (the old one stays)."""
        record = parse_quota(raw)
        if record is not None:
            self._by_ns.setdefault(record.namespace, {})[record.name] = record
        return record

    def remove(self, namespace: str, name: str) -> bool:
        bucket = self._by_ns.get(namespace)
        if bucket is None or bucket.pop(name, None) is None:
            return False
        if not bucket:
            del self._by_ns[namespace]
        return True
