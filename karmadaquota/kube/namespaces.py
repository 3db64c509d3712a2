"""The namespace label that turns quota admission on: `quota.karmada.io/enforced=true`.

The ResourceBinding webhook is registered with `namespaceSelector: {matchLabels:
{quota.karmada.io/enforced: "true"}}`, so karmada-apiserver does not call it for a namespace
without a KarmadaQuota. The label is put on by the webhook itself while it admits a
KarmadaQuota (before the quota is stored: no quota exists in an unlabelled namespace), and by
the controller's leader for quotas created before the label existed (an upgrade); the
controller reports it in each quota's `Enforced` condition.

What remains between a quota's creation and its enforcement is karmada-apiserver's own
namespace informer catching up with the label (its webhook dispatcher reads namespaces from
it): milliseconds, once. Bindings created before that are counted by the controller like any
other, and the quota refuses what would exceed it from then on.
"""

from __future__ import annotations

from typing import Protocol

from karmadaquota.api import ENFORCED_LABEL, ENFORCED_VALUE
from karmadaquota.kube.client import JSON


class Patcher(Protocol):
    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON: ...


__all__ = ["ENFORCED_LABEL", "ENFORCED_VALUE", "enforce", "enforced", "path"]


def path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}"


def enforced(namespace_object: JSON) -> bool:
    labels = (namespace_object.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(ENFORCED_LABEL) == ENFORCED_VALUE)


async def enforce(api: Patcher, namespace: str, timeout: float = 10.0) -> JSON:
    """Label `namespace` so that karmada-apiserver sends its bindings to the webhook (a JSON
    merge patch: idempotent, touches no other label); the namespace as stored."""
    body = {"metadata": {"labels": {ENFORCED_LABEL: ENFORCED_VALUE}}}
    return await api.merge_patch(path(namespace), body, timeout=timeout)
