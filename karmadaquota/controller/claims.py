"""Observed claims: the PersistentVolumeClaims a member cluster holds (pure).

A claim counts as Kubernetes' quota counts it (its PVC evaluator): every claim that exists,
whatever its phase, one being deleted included (the `kubernetes.io/pvc-protection` finalizer
keeps it while a pod still uses it, and the member's quota counts it until it is gone). It is
charged `persistentvolumeclaims` 1 and `count/persistentvolumeclaims` 1, `requests.storage` the
larger of its `spec.resources.requests.storage` and its `status.allocatedResources.storage`
(Kubernetes with RecoverVolumeExpansionFailure, the default), rounded up to a whole byte, and
both again under `<class>.storageclass.storage.k8s.io/` for its class (`spec.storageClassName`,
or the beta annotation `volume.beta.kubernetes.io/storage-class`): the class the member gave it,
its default class included.

A claim is never *terminating* in the pods' sense: what a member holds is compared with what
Karmada placed there (`recompute._beyond`), so a claim a live StatefulSet replica is charged
for and the member holds counts once, and the claims a scale-down or a deleted StatefulSet
retained (`persistentVolumeClaimRetentionPolicy` Retain, the default) count on top of the
charges until they are deleted (docs/charging.md, "Claims a member keeps").

Scopes: Kubernetes' scoped quotas (BestEffort, NotBestEffort, PriorityClass, ...) never match a
claim, and a scoped KarmadaQuota cannot track a claim name (`scopes.resource_allowed`): claims
count only in quotas without scopes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from karmadaquota.controller.pods import UidTable
from karmadaquota.pod_template import (
    COUNT_PVCS,
    PVCS,
    REQUESTS_STORAGE,
    STORAGE_CLASS_SUFFIX,
    is_claim_name,
)
from karmadaquota.quantity import NANO, Quantity, QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import Expression

log = logging.getLogger("karmadaquota.controller.claims")

CLAIMS_PATH = "/api/v1/persistentvolumeclaims"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
_ONE = Quantity.from_int(1)


def storage_class(claim: Mapping[str, Any]) -> str:
    """The claim's class as Kubernetes' GetPersistentVolumeClaimClass reads it: the beta
    annotation first, then spec.storageClassName ("" when neither)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    beta = annotations.get(BETA_CLASS_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(beta, str):
        return beta
    klass = (claim.get("spec") or {}).get("storageClassName")
    return klass if isinstance(klass, str) else ""


def _storage(raw: object, where: str) -> Quantity | None:
    if raw is None:
        return None
    try:
        q = Quantity.parse(str(raw), where)
    except QuantityError as e:  # the member's API server validated it: should not happen
        log.warning("claim storage unreadable; not counted", extra={"error": str(e)})
        return None
    whole = -(-q.nanos // NANO) * NANO  # whole bytes, rounded up (issue 94313)
    return Quantity(max(whole, 0), q.format)


def claim_usage(claim: Mapping[str, Any]) -> ResourceList:
    """What one claim is charged under every quota name a claim can be (module docstring)."""
    spec = claim.get("spec") or {}
    requested = _storage(
        ((spec.get("resources") or {}).get("requests") or {}).get("storage"),
        "spec.resources.requests.storage",
    )
    allocated = _storage(
        ((claim.get("status") or {}).get("allocatedResources") or {}).get("storage"),
        "status.allocatedResources.storage",
    )
    if requested is not None and allocated is not None and allocated > requested:
        requested = allocated
    usage: ResourceList = {PVCS: _ONE, COUNT_PVCS: _ONE}
    klass = storage_class(claim)
    if klass:
        usage[klass + STORAGE_CLASS_SUFFIX + PVCS] = _ONE
    if requested is not None:
        usage[REQUESTS_STORAGE] = requested
        if klass:
            usage[klass + STORAGE_CLASS_SUFFIX + REQUESTS_STORAGE] = requested
    return usage


class ClaimTable(UidTable[ResourceList]):
    """The claims of one member cluster: namespace -> uid -> usage."""

    def usage(self, obj: Mapping[str, Any]) -> ResourceList | None:
        return claim_usage(obj)

    def observed(
        self, namespace: str, names: Collection[str], exprs: tuple[Expression, ...]
    ) -> ResourceList:
        """Σ usage of the namespace's claims, masked to the claim names of `names`: zero for
        each, so a namespace without claims reads 0 rather than nothing; nothing under a
        scoped quota (a scope never matches a claim)."""
        wanted = [n for n in names if is_claim_name(n)]
        if exprs or not wanted:
            return {}
        out: ResourceList = {n: Quantity.zero() for n in wanted}
        for usage in self._by_ns.get(namespace, {}).values():
            for name, q in usage.items():
                have = out.get(name)
                if have is not None:
                    out[name] = have + q
        return out
