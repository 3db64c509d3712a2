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

A namespace holding a quota with `onExceed: Queue` also gets `quota.karmada.io/queueing=true`,
the queueing (mutating) webhook's namespaceSelector, the same way and at the same moments: a
namespace whose quotas only refuse is never sent to it. Neither label is removed when the last
such quota goes (a stale label costs one call per create that changes nothing); remove it by
hand to stop the calls.
"""

from __future__ import annotations

from typing import Protocol

from karmadaquota.api import ENFORCED_LABEL, ENFORCED_VALUE, QUEUEING_LABEL
from karmadaquota.kube.client import JSON


class Patcher(Protocol):
    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON: ...


__all__ = ["ENFORCED_LABEL", "ENFORCED_VALUE", "QUEUEING_LABEL", "enforce", "enforced", "path"]


def path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}"


def labels(queueing: bool = False) -> dict[str, str]:
    """The labels a namespace holding quotas needs (`queueing`: one of them says Queue)."""
    wanted = {ENFORCED_LABEL: ENFORCED_VALUE}
    if queueing:
        wanted[QUEUEING_LABEL] = ENFORCED_VALUE
    return wanted


def enforced(namespace_object: JSON, queueing: bool = False) -> bool:
    """The namespace carries every label `labels(queueing)` asks for."""
    have = (namespace_object.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels(queueing).items())


async def enforce(
    api: Patcher, namespace: str, queueing: bool = False, timeout: float = 10.0
) -> JSON:
    """Label `namespace` so that karmada-apiserver sends its bindings to the webhook — and to
    the queueing webhook too with `queueing` (a JSON merge patch: idempotent, touches no other
    label); the namespace as stored."""
    body = {"metadata": {"labels": labels(queueing)}}
    return await api.merge_patch(path(namespace), body, timeout=timeout)
