"""What one ResourceBinding costs, per DESIGN §3 — the contract shared by webhook and controller.

R = max(spec.replicas, Σ spec.clusters[].replicas): the intent before scheduling and the real
footprint after it (Duplicated placement lists `replicas` in every cluster). A binding with more
than one component charges Σ component replicas × component requests once per target cluster
(Karmada places a multi-component workload whole); a single component is charged like the legacy
fields it replaces. Replicas under graceful eviction are not in `spec.clusters` and are not charged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from karmadaquota import resources
from karmadaquota.api import ResourceBinding, ResourceBindingSpec
from karmadaquota.quantity import Quantity
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import BindingTraits

# Bare resource names whose request a quota tracking them requires (seed 001).
REQUIRED_REQUESTS = ("cpu", "memory")

# Core kinds that Kubernetes also counts under a legacy quota name.
_LEGACY_COUNTS = {
    "Service": "services",
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}

_ONE = Quantity.from_int(1)


@dataclass(frozen=True, slots=True)
class Charge:
    """The usage of one binding, in every quota resource name it can be charged under."""

    total: ResourceList
    per_cluster: Mapping[str, ResourceList]
    traits: BindingTraits
    # Bare names (cpu, memory) that a replica-carrying part of the binding does not request.
    missing_requests: frozenset[str] = field(default_factory=frozenset)


def count_name(api_version: str, kind: str) -> str:
    """`count/<resource>.<group>` for a kind, guessing the plural as Kubernetes' RESTMapper does."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    singular = kind.lower()
    if singular.endswith("s"):
        plural = singular + "es"
    elif singular.endswith("y"):
        plural = singular[:-1] + "ies"
    else:
        plural = singular + "s"
    return f"count/{plural}.{group}" if group else f"count/{plural}"


def _per_replica(requests: Mapping[str, Quantity], replicas: int) -> ResourceList:
    """requests × replicas under every quota name they can be charged as, plus pods."""
    out: ResourceList = {}
    if replicas <= 0:
        return out
    for name, q in resources.to_quota_names(requests, None).items():
        if name in ("pods", "requests.pods"):
            continue  # pods is charged as the replica count, never as a request
        out[name] = q * replicas
    out["pods"] = Quantity.from_int(replicas)
    return out


def _requests(raw: Mapping[str, str | int] | None, field_path: str) -> ResourceList:
    return resources.parse_resource_list(raw or {}, field_path)


def _missing(requests: Mapping[str, Quantity]) -> set[str]:
    # A "requests.cpu" key is charged as cpu (resources.to_quota_names), so it specifies cpu.
    given = {name.removeprefix(resources.REQUESTS_PREFIX) for name in requests}
    return {r for r in REQUIRED_REQUESTS if r not in given}


def _is_best_effort(requests: Mapping[str, Quantity]) -> bool:
    return all(q.is_zero for name, q in requests.items() if name != "pods")


def charge(binding: ResourceBinding) -> Charge:
    """The binding's charge. Raises QuantityError naming the field on a bad quantity."""
    spec = binding.spec
    objects: ResourceList = {count_name(spec.resource.apiVersion, spec.resource.kind): _ONE}
    legacy = _LEGACY_COUNTS.get(spec.resource.kind)
    if legacy and spec.resource.apiVersion == "v1":
        objects[legacy] = _ONE
    if len(spec.components) > 1:
        return _multi_component(spec, objects)
    return _single(spec, objects)


def _single(spec: ResourceBindingSpec, objects: ResourceList) -> Charge:
    if spec.components:
        comp = spec.components[0]
        reqs_model = comp.replicaRequirements
        path = "spec.components[0].replicaRequirements.resourceRequest"
        replicas = comp.replicas
    else:
        reqs_model = spec.replicaRequirements
        path = "spec.replicaRequirements.resourceRequest"
        replicas = spec.replicas
    requests = _requests(reqs_model.resourceRequest if reqs_model else None, path)
    placed = sum(c.replicas for c in spec.clusters)
    total_replicas = max(replicas, placed)
    total = resources.add(objects, _per_replica(requests, total_replicas))
    per_cluster = {
        c.name: resources.add(objects, _per_replica(requests, c.replicas)) for c in spec.clusters
    }
    has_replicas = total_replicas > 0
    traits = BindingTraits(
        has_replicas=has_replicas,
        best_effort=has_replicas and _is_best_effort(requests),
        priority_class=reqs_model.priorityClassName if reqs_model else "",
    )
    missing = frozenset(_missing(requests)) if has_replicas else frozenset()
    return Charge(total, per_cluster, traits, missing)


def _multi_component(spec: ResourceBindingSpec, objects: ResourceList) -> Charge:
    one_copy: ResourceList = {}
    missing: set[str] = set()
    best_effort = True
    priority = spec.replicaRequirements.priorityClassName if spec.replicaRequirements else ""
    for i, comp in enumerate(spec.components):
        path = f"spec.components[{i}].replicaRequirements.resourceRequest"
        reqs_model = comp.replicaRequirements
        requests = _requests(reqs_model.resourceRequest if reqs_model else None, path)
        one_copy = resources.add(one_copy, _per_replica(requests, comp.replicas))
        if comp.replicas > 0:
            missing |= _missing(requests)
            best_effort = best_effort and _is_best_effort(requests)
        if not priority and reqs_model is not None:
            priority = reqs_model.priorityClassName
    copies = max(1, len(spec.clusters))
    total = resources.add(objects, resources.multiply(one_copy, copies))
    per_cluster = {c.name: resources.add(objects, one_copy) for c in spec.clusters}
    has_replicas = any(c.replicas > 0 for c in spec.components)
    traits = BindingTraits(
        has_replicas=has_replicas,
        best_effort=has_replicas and best_effort,
        priority_class=priority,
    )
    return Charge(total, per_cluster, traits, frozenset(missing) if has_replicas else frozenset())
