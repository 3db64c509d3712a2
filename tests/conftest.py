"""Shared builders for the pure-core unit tests: ResourceBindings and KarmadaQuotas.

Every builder goes through the pydantic models from plain wire-shaped dicts, exactly as the
webhook and the controller receive them, so the tests exercise the same parsing path. Import
them as `from tests.conftest import binding, quota, view`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.charge import Charge, charge
from karmadaquota.evaluate import QuotaView
from karmadaquota.quantity import Quantity
from karmadaquota.resources import ResourceList

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
"""The fixed clock every evaluate test uses."""

Raw = Mapping[str, str | int]
# (scopeName, operator, values)
ExprSpec = tuple[str, str, Sequence[str]]


def rl(raw: Mapping[str, str] | None = None, **named: str) -> ResourceList:
    """An exact ResourceList: rl({"requests.cpu": "2"}) or rl(pods="3")."""
    out = {name: Quantity.parse(value) for name, value in (raw or {}).items()}
    out.update({name: Quantity.parse(value) for name, value in named.items()})
    return out


def as_strings(resource_list: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical strings, for readable equality assertions."""
    return {name: str(q) for name, q in resource_list.items()}


def component(
    name: str, replicas: int, requests: Raw | None = None, priority_class: str = ""
) -> dict[str, Any]:
    """One spec.components[] entry."""
    comp: dict[str, Any] = {"name": name, "replicas": replicas}
    if requests is not None or priority_class:
        comp["replicaRequirements"] = {
            "resourceRequest": dict(requests or {}),
            "priorityClassName": priority_class,
        }
    return comp


def binding_doc(
    replicas: int = 0,
    requests: Raw | None = None,
    *,
    kind: str = "Deployment",
    api_version: str = "apps/v1",
    name: str = "web",
    namespace: str = "team-a",
    priority_class: str = "",
    clusters: Mapping[str, int] | None = None,
    components: Sequence[Mapping[str, Any]] = (),
    evictions: Mapping[str, int | None] | None = None,
    required_by: Mapping[str, int] | None = None,
    preserve: bool | None = None,
    object_name: str | None = None,
    uid: str | None = None,
    rv: int | None = None,
    generation: int = 1,
    deleting: bool = False,
    created: str | None = None,
) -> dict[str, Any]:
    """A ResourceBinding on the wire, as karmada-controller-manager writes it.

    `requests` is the per-replica `replicaRequirements.resourceRequest`; with neither requests
    nor a priority class the binding carries no `replicaRequirements` at all (a Service, or a
    workload without requests). `clusters` maps a member cluster to its scheduled replicas.
    The object is named `<name>-<kind>` (as Karmada names bindings) unless `object_name` says.
    """
    spec: dict[str, Any] = {
        "resource": {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
        },
        "replicas": replicas,
    }
    if requests is not None or priority_class:
        spec["replicaRequirements"] = {
            "resourceRequest": dict(requests or {}),
            "priorityClassName": priority_class,
        }
    if clusters is not None:
        spec["clusters"] = [{"name": c, "replicas": r} for c, r in clusters.items()]
    if components:
        spec["components"] = [dict(c) for c in components]
    if required_by is not None:
        spec["requiredBy"] = [
            {
                "namespace": namespace,
                "name": "dependent",
                "clusters": [{"name": c, "replicas": r} for c, r in required_by.items()],
            }
        ]
    if preserve is not None:
        spec["preserveResourcesOnDeletion"] = preserve
    if evictions is not None:
        spec["gracefulEvictionTasks"] = [
            {"fromCluster": c, "replicas": r, "reason": "TaintUntolerated", "producer": "x"}
            for c, r in evictions.items()
        ]
    metadata: dict[str, Any] = {
        "name": object_name or f"{name}-{kind.lower()}",
        "namespace": namespace,
        "uid": uid or f"rb-uid-{name}",
        "generation": generation,
    }
    if rv is not None:
        metadata["resourceVersion"] = str(rv)
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if created is not None:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": metadata,
        "spec": spec,
    }


def binding(replicas: int = 0, requests: Raw | None = None, **kw: Any) -> ResourceBinding:
    """binding_doc(...) as the model the webhook and the controller parse it into."""
    return ResourceBinding.model_validate(binding_doc(replicas, requests, **kw))


def raw_binding(
    name: str = "web",
    *,
    replicas: int = 2,
    requests: Mapping[str, str] | None = None,
    uid: str | None = None,
    rv: int = 1,
    **kw: Any,
) -> dict[str, Any]:
    """A binding as a watch event carries it: 2 replicas of {cpu: 1, memory: 1Gi} by default."""
    return binding_doc(
        replicas,
        dict(requests) if requests is not None else {"cpu": "1", "memory": "1Gi"},
        name=name,
        uid=uid or f"uid-{name}",
        rv=rv,
        **kw,
    )


def charge_of(replicas: int = 0, requests: Raw | None = None, **kw: Any) -> Charge:
    """charge(binding(...)) in one call."""
    return charge(binding(replicas, requests, **kw))


def reservation(
    reserved: Raw, expires: datetime | str = NOW + timedelta(minutes=1), name: str = "other"
) -> dict[str, Any]:
    """One status.reservations[] entry; `expires` as a datetime or a raw wire string."""
    when = expires if isinstance(expires, str) else expires.isoformat().replace("+00:00", "Z")
    return {
        "reservedBy": {
            "apiVersion": "work.karmada.io/v1alpha2",
            "kind": "ResourceBinding",
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
        },
        "reserved": dict(reserved),
        "expirationTime": when,
    }


def quota_doc(
    name: str = "team-a",
    hard: Raw | None = None,
    used: Raw | None = None,
    *,
    scopes: Sequence[str] = (),
    expressions: Sequence[ExprSpec] = (),
    scope_selector: Mapping[str, Any] | None = None,
    reservations: Sequence[Mapping[str, Any]] = (),
    namespace: str = "team-a",
    rv: int = 1,
    uid: str | None = None,
    member_enforcement: str | None = None,
) -> dict[str, Any]:
    """A KarmadaQuota on the wire (`member_enforcement`: spec.memberEnforcement, absent: the
    default). `used` defaults to zero for every hard name (a synced
    controller); scopes come as `scopes`, as (scope, operator, values) `expressions`, or as a
    raw `scope_selector`."""
    hard = dict(hard or {})
    spec: dict[str, Any] = {"hard": hard}
    if scopes:
        spec["scopes"] = list(scopes)
    if expressions:
        spec["scopeSelector"] = {
            "matchExpressions": [
                {"scopeName": s, "operator": op, "values": list(vals)}
                for s, op, vals in expressions
            ]
        }
    if scope_selector:
        spec["scopeSelector"] = dict(scope_selector)
    if member_enforcement is not None:
        spec["memberEnforcement"] = member_enforcement
    status: dict[str, Any] = {
        "hard": hard,
        "used": dict(used) if used is not None else dict.fromkeys(hard, "0"),
        "reservations": [dict(r) for r in reservations],
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": str(rv)}
    if uid is not None:
        metadata["uid"] = uid
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def quota(
    name: str = "team-a", hard: Raw | None = None, used: Raw | None = None, **kw: Any
) -> KarmadaQuota:
    """quota_doc(...) as the model."""
    return KarmadaQuota.model_validate(quota_doc(name, hard, used, **kw))


def view(
    name: str = "team-a",
    hard: Raw | None = None,
    used: Raw | None = None,
    *,
    now: datetime = NOW,
    **kw: Any,
) -> QuotaView:
    """QuotaView.of(quota(...))."""
    return QuotaView.of(quota(name, hard, used, **kw))
