"""Wire models: the KarmadaQuota CRD and the parts of a Karmada ResourceBinding we read.

Models mirror the JSON on the wire (camelCase field names) so that one model serves the
API server, the webhook and the CRD schema generator. They are lenient to fields we do not
read (Karmada adds fields every release) and strict on the ones we do. Quantities stay strings
here; `resources.parse_resource_list` turns them into exact values where a decision needs them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

log = logging.getLogger("karmadaquota.api")

GROUP = "quota.karmada.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KarmadaQuota"
PLURAL = "karmadaquotas"
SINGULAR = "karmadaquota"
SHORT_NAMES = ["kq"]

BINDING_GROUP = "work.karmada.io"
BINDING_VERSION = "v1alpha2"
BINDING_API_VERSION = f"{BINDING_GROUP}/{BINDING_VERSION}"
BINDING_KIND = "ResourceBinding"
BINDING_PLURAL = "resourcebindings"

# Scope names and operators stay plain strings in the model so that `scopes.validate_scopes`
# can reject bad ones in Kubernetes' own words; the CRD schema still carries them as enums.
SCOPE_NAME_ENUM: list[JsonValue] = ["PriorityClass", "BestEffort", "NotBestEffort"]
OPERATOR_ENUM: list[JsonValue] = ["In", "NotIn", "Exists", "DoesNotExist"]

# A k8s quantity on the wire: a string ("1500m", "2Gi") or a JSON integer.
QuantityValue = str | int
RawResourceList = dict[str, QuantityValue]


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 time from the wire, in UTC; None when unreadable.

    RFC 3339 always carries an offset; a time without one is read as UTC rather than letting a
    naive/aware comparison raise later.
    """
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def expired(expiration_time: str, now: datetime) -> bool:
    """Whether a reservation expiring at `expiration_time` has lapsed at `now` (naive means
    UTC); an unreadable time has lapsed, so that it holds nothing."""
    when = parse_time(expiration_time)
    return when is None or when <= (now.replace(tzinfo=UTC) if now.tzinfo is None else now)


def format_time(when: datetime, micro: bool = False) -> str:
    """RFC 3339 in UTC as the API server prints it: metav1.Time (seconds) or, with `micro`,
    metav1.MicroTime (microseconds). Naive means UTC."""
    utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def describe(e: ValidationError) -> str:
    """A pydantic error as one line of `field.path: problem` clauses, for error messages."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())


_QUANTITY_SCHEMA: dict[str, Any] = {"x-kubernetes-int-or-string": True}
_RESOURCE_LIST_SCHEMA: dict[str, Any] = {"additionalProperties": _QUANTITY_SCHEMA}


def _resource_list(description: str) -> Any:
    return Field(
        default_factory=dict,
        description=description,
        json_schema_extra={"x-kq-resource-list": True},
    )


class _Lenient(BaseModel):
    """Unknown fields are ignored: the API server is the schema authority for them."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)


class ObjectMeta(_Lenient):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletionTimestamp: str | None = None


# ---------------------------------------------------------------------------------------------
# KarmadaQuota


class ScopedResourceSelectorRequirement(_Lenient):
    """One scope expression, as Kubernetes' ResourceQuota scopeSelector has it."""

    scopeName: str = Field(
        description="The scope this expression applies to.",
        json_schema_extra={"enum": SCOPE_NAME_ENUM},
    )
    operator: str = Field(
        description="In/NotIn need values; Exists/DoesNotExist take none. "
        "BestEffort and NotBestEffort only support Exists.",
        json_schema_extra={"enum": OPERATOR_ENUM},
    )
    values: list[str] = Field(
        default_factory=list, description="PriorityClass names for In and NotIn."
    )


class ScopeSelector(_Lenient):
    matchExpressions: list[ScopedResourceSelectorRequirement] = Field(
        default_factory=list,
        description="All expressions must match (intersection) for the quota to track a binding.",
    )


class KarmadaQuotaSpec(_Lenient):
    hard: RawResourceList = _resource_list(
        "The global hard limit per resource name, summed over every member cluster."
    )
    scopeSelector: ScopeSelector | None = Field(
        default=None, description="Restricts the quota to bindings matching every expression."
    )
    scopes: list[str] = Field(
        default_factory=list,
        description="Shorthand for scopeSelector expressions with operator Exists.",
        json_schema_extra={"items": {"type": "string", "enum": ["BestEffort", "NotBestEffort"]}},
    )


class ObjectReference(_Lenient):
    """A namespaced object: the binding that took a reservation, the template that waits."""

    apiVersion: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = Field(description="Identifies the exact object; a re-created one is another.")


class Reservation(_Lenient):
    """Usage admitted by the webhook that the controller has not yet observed."""

    reservedBy: ObjectReference = Field(
        description="The binding that took the reservation (apiVersion, kind, name, uid)."
    )
    reserved: RawResourceList = _resource_list("The incremental usage reserved.")
    expirationTime: str = Field(description="RFC 3339 time after which the reservation lapses.")
    generation: int = Field(
        default=0,
        description="The binding generation that carries this usage: the controller drops the "
        "reservation once it observes the binding at this generation or later.",
    )

    def expires(self) -> datetime | None:
        """When the reservation lapses; None when unreadable (then it holds nothing)."""
        return parse_time(self.expirationTime)

    def lapsed(self, now: datetime) -> bool:
        """Expired at `now` (naive means UTC); an unreadable expiration holds nothing."""
        return expired(self.expirationTime, now)


class WaitingWorkload(_Lenient):
    """A workload whose binding this quota refused, waiting for room.

    Written by the webhook on refusal (coalesced, at most once a second per namespace); the
    controller's leader makes Karmada retry it when it fits, and it leaves the list once its
    binding is admitted or its resource template is deleted.
    """

    template: ObjectReference = Field(
        description="The resource template (apiVersion, kind, name, uid) Karmada propagates."
    )
    binding: str = Field(description="The ResourceBinding whose create or update was refused.")
    bindingUID: str = Field(
        default="",
        description="The refused binding's uid: another binding of that name means the refused "
        "create lost to one that was admitted.",
    )
    requested: RawResourceList = _resource_list(
        "What the refused binding asked for on top of the usage it already holds."
    )
    priorityClassName: str = Field(
        default="", description="The binding's priority class, for scoped quotas."
    )
    bestEffort: bool = Field(
        default=False, description="The binding requests no resources (BestEffort scope)."
    )
    firstRefused: str = Field(description="RFC 3339 time of the first refusal: the queue order.")
    lastRefused: str = Field(default="", description="RFC 3339 time of the latest refusal.")
    refusals: int = Field(default=1, description="How many refusals were recorded.")


class ClusterUsage(_Lenient):
    clusterName: str = Field(description="A member cluster (cluster.karmada.io Cluster name).")
    used: RawResourceList = _resource_list("Usage charged by bindings placed in this cluster.")
    observed: RawResourceList | None = Field(
        default=None,
        description="Usage summed from non-terminal pods seen in the member cluster itself.",
        json_schema_extra={"x-kq-resource-list": True},
    )


class Condition(_Lenient):
    type: str = Field(description="Ready, Valid or MemberObserved.")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    lastTransitionTime: str = Field(default="", description="RFC 3339 time of the last change.")
    observedGeneration: int = 0


class KarmadaQuotaStatus(_Lenient):
    hard: RawResourceList = _resource_list("The enforced hard limits.")
    used: RawResourceList = _resource_list(
        "Global usage observed by the controller, summed over every member cluster."
    )
    aggregatedStatus: list[ClusterUsage] = Field(
        default_factory=list, description="Per member cluster breakdown."
    )
    reservations: list[Reservation] = Field(
        default_factory=list, description="Admitted usage not yet observed by the controller."
    )
    waiting: list[WaitingWorkload] = Field(
        default_factory=list,
        description="Workloads this quota refused, oldest first; requeued when they fit.",
    )
    summary: str = Field(default="", description="used/hard per resource, for kubectl get.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Valid and MemberObserved conditions."
    )
    observedGeneration: int = Field(
        default=0, description="The quota generation the controller last computed status for."
    )


class KarmadaQuota(_Lenient):
    """A global hard quota for the bindings of one namespace on the Karmada control plane."""

    apiVersion: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: KarmadaQuotaSpec = Field(
        default_factory=KarmadaQuotaSpec, description="The desired global hard limits."
    )
    status: KarmadaQuotaStatus = Field(
        default_factory=KarmadaQuotaStatus,
        description="Enforced limits and usage, written by the controller (used, per-cluster "
        "breakdown) and the webhook (reservations, waiting workloads).",
    )


def read_quota(raw: Mapping[str, Any]) -> KarmadaQuota | None:
    """A quota from the wire, or None (logged) when unreadable: webhook and controller both
    skip such an object rather than fail on it; the API server's schema makes it rare."""
    try:
        return KarmadaQuota.model_validate(raw)
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        log.warning(
            "ignoring unreadable KarmadaQuota",
            extra={"namespace": meta.get("namespace"), "quota": meta.get("name"), "error": str(e)},
        )
        return None


# ---------------------------------------------------------------------------------------------
# ResourceBinding (work.karmada.io/v1alpha2), the fields that decide its charge


class BindingResource(_Lenient):
    """spec.resource: the resource template the binding propagates."""

    apiVersion: str
    kind: str
    name: str = ""
    namespace: str = ""
    uid: str = ""
    # the template's resourceVersion the binding was built from: it moves with every change of
    # the template (Karmada's detector rebuilds the binding from the template each time)
    resourceVersion: str = ""


class ReplicaRequirements(_Lenient):
    resourceRequest: RawResourceList = Field(default_factory=dict)
    priorityClassName: str = ""
    namespace: str = ""


class Component(_Lenient):
    name: str = ""
    replicas: int = 0  # negative values are charged as zero and refused by charge()
    replicaRequirements: ReplicaRequirements | None = None


class TargetCluster(_Lenient):
    name: str
    replicas: int = 0  # negative values are charged as zero and refused by charge()


class GracefulEvictionTask(_Lenient):
    fromCluster: str
    replicas: int | None = None


class ResourceBindingSpec(_Lenient):
    resource: BindingResource
    replicas: int = 0  # negative values are charged as zero and refused by charge()
    replicaRequirements: ReplicaRequirements | None = None
    components: list[Component] = Field(default_factory=list)
    clusters: list[TargetCluster] = Field(default_factory=list)
    gracefulEvictionTasks: list[GracefulEvictionTask] = Field(default_factory=list)


class ResourceBinding(_Lenient):
    apiVersion: str = BINDING_API_VERSION
    kind: str = BINDING_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceBindingSpec
