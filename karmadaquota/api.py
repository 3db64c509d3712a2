"""Wire models: the KarmadaQuota CRD and the parts of a Karmada ResourceBinding we read.

Models mirror the JSON on the wire (camelCase field names) so that one model serves the
API server, the webhook and the CRD schema generator. They are lenient to fields we do not
read (Karmada adds fields every release) and strict on the ones we do. Quantities stay strings
here; `resources.parse_resource_list` turns them into exact values where a decision needs them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from karmadaquota import pending
from karmadaquota.times import parse_time

log = logging.getLogger("karmadaquota.api")

GROUP = "quota.karmada.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "KarmadaQuota"
PLURAL = "karmadaquotas"
SINGULAR = "karmadaquota"
SHORT_NAMES = ["kq"]
# the cluster-scoped quota over the namespaces a label selector picks (docs/cluster-quotas.md)
CLUSTER_KIND = "ClusterKarmadaQuota"
CLUSTER_PLURAL = "clusterkarmadaquotas"
CLUSTER_SINGULAR = "clusterkarmadaquota"
CLUSTER_SHORT_NAMES = ["ckq"]

BINDING_GROUP = "work.karmada.io"
OVERRIDE_GROUP = "policy.karmada.io"
OVERRIDE_PLURAL = "overridepolicies"
CLUSTER_OVERRIDE_PLURAL = "clusteroverridepolicies"
BINDING_VERSION = "v1alpha2"
BINDING_API_VERSION = f"{BINDING_GROUP}/{BINDING_VERSION}"
BINDING_KIND = "ResourceBinding"
BINDING_PLURAL = "resourcebindings"

# Scope names and operators stay plain strings in the model so that `scopes.validate_scopes`
# can reject bad ones in Kubernetes' own words; the CRD schema still carries them as enums.
SCOPE_NAME_ENUM: list[JsonValue] = ["PriorityClass", "BestEffort", "NotBestEffort"]
OPERATOR_ENUM: list[JsonValue] = ["In", "NotIn", "Exists", "DoesNotExist"]

# A k8s quantity on the wire: a string ("1500m", "2Gi") or a JSON integer.
# The namespace label that turns quota admission on (kube.namespaces): the ResourceBinding
# webhook's namespaceSelector matches it.
ENFORCED_LABEL = "quota.karmada.io/enforced"
ENFORCED_VALUE = "true"
# on namespaces holding a KarmadaQuota with onExceed: Queue: the queueing (mutating) webhook's
# namespaceSelector, so that a namespace whose quotas only refuse pays no second call per create
QUEUEING_LABEL = "quota.karmada.io/queueing"

QuantityValue = str | int

# spec.onExceed and spec.queueingStrategy (karmadaquota.queueing)
OnExceed = Literal["Refuse", "Queue"]
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
ON_EXCEED_REFUSE: OnExceed = "Refuse"
ON_EXCEED_QUEUE: OnExceed = "Queue"
STRATEGY_BEST_EFFORT: QueueingStrategy = "BestEffortFIFO"
STRATEGY_STRICT: QueueingStrategy = "StrictFIFO"
RawResourceList = dict[str, QuantityValue]

# spec.memberEnforcement: ResourceQuota (the default: a guard ResourceQuota in every member holds
# the budget there, so what the members run is bounded) or None (admission only)
ENFORCEMENT_NONE = "None"
ENFORCEMENT_RESOURCE_QUOTA = "ResourceQuota"
ENFORCEMENT_ENUM: list[JsonValue] = [ENFORCEMENT_NONE, ENFORCEMENT_RESOURCE_QUOTA]

# spec.failover.evictedReplicas (karmadaquota.evictions): Release (the default) stops charging
# a graceful eviction task's replicas once Karmada says their cluster is not Ready; Hold
# charges them until the task ends
EVICTED_RELEASE = "Release"
EVICTED_HOLD = "Hold"
EVICTED_ENUM: list[JsonValue] = [EVICTED_RELEASE, EVICTED_HOLD]
# spec.reclaimWithinCohort (Kueue's name): whether a lender takes its loans back by force
RECLAIM_NEVER = "Never"
RECLAIM_ANY = "Any"
RECLAIM_ENUM: list[JsonValue] = [RECLAIM_NEVER, RECLAIM_ANY]


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
    creationTimestamp: str | None = None
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


class Failover(_Lenient):
    evictedReplicas: str = Field(
        default=EVICTED_RELEASE,
        description="Replicas Karmada evicted from a cluster (a binding's graceful eviction "
        "task) are charged until the task ends. Release (the default): no longer once Karmada "
        "reports that cluster not Ready (its Ready condition False or Unknown, for the "
        "controller's --evicted-cluster-grace), so that a failover is admitted while the failed "
        "cluster is away, as Kubernetes' ResourceQuota stops counting a lost node's pods. Hold: "
        "until the task ends (a partitioned cluster may still run them).",
        json_schema_extra={"enum": EVICTED_ENUM},
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
    onExceed: OnExceed = Field(
        default=ON_EXCEED_REFUSE,
        description="What happens to a new workload that does not fit: Refuse (by default; "
        "admission refuses its ResourceBinding; it is woken by annotation when room appears) "
        "or Queue "
        "(its binding is created with scheduling suspended and admitted in order as room "
        "appears). Scale-ups of running workloads are refused either way.",
    )
    queueingStrategy: QueueingStrategy = Field(
        default=STRATEGY_BEST_EFFORT,
        description="Order of admission from the queue (higher priority first, then oldest): "
        "BestEffortFIFO (the default) admits every queued workload that fits; StrictFIFO admits "
        "none past the first that does not fit, and queues new workloads behind it.",
    )
    memberEnforcement: str = Field(
        default=ENFORCEMENT_RESOURCE_QUOTA,
        description="ResourceQuota (the default): the controller keeps a guard ResourceQuota in "
        "every member it can reach, so that what the members run — pods in their grace period, "
        "rollouts and moves, what a member's own admission or controllers add — cannot pass the "
        "global hard; kinds and overrides admission cannot price are admitted and bounded there. "
        "None: admission only; usage is what Karmada's bindings charge plus, where the "
        "controller observes the members, what their pods use past that, counted after the "
        "fact; nothing in the members stops such pods.",
        json_schema_extra={"enum": ENFORCEMENT_ENUM},
    )
    clusterHard: dict[str, RawResourceList] = Field(
        default_factory=dict,
        description="Per member cluster caps (cluster name to resource list): the most of the "
        "global hard one member's guard may hold. Names must be in hard, values at most hard. "
        "Only with memberEnforcement ResourceQuota.",
        json_schema_extra={"additionalProperties": {"x-kq-resource-list": True}},
    )

    failover: Failover | None = Field(
        default=None,
        description='How a cluster failover is charged (docs/charging.md, "Failover").',
    )
    cohort: str = Field(
        default="",
        description="The cohort this quota shares unused hard with (docs/cohorts.md): quotas "
        "naming the same cohort lend each other what they leave unused, as Kueue's cohorts "
        "do; for every cohort Σ used ≤ Σ hard. Empty: none.",
    )
    borrowingLimit: RawResourceList | None = Field(
        default=None,
        description="With a cohort: the most this quota may use beyond its hard, per name of "
        "hard, borrowed from the cohort. Absent: all the cohort may lend; a name left out may "
        "borrow without limit.",
        json_schema_extra={"x-kq-resource-list": True},
    )
    reclaimWithinCohort: str = Field(
        default=RECLAIM_NEVER,
        description="With a cohort: Never (the default): a loan in use comes back when the "
        "borrower stops using it. Any: when a workload of this quota waits because what it "
        "lent is in use, the controller takes it back — the borrowers' bindings queued "
        "(their workloads leave the members), lowest priority first, then the most recently "
        "written, each with a Reclaimed event on its resource template.",
        json_schema_extra={"enum": RECLAIM_ENUM},
    )
    lendingLimit: RawResourceList | None = Field(
        default=None,
        description="With a cohort: the most of its unused hard others may borrow, per name of "
        "hard, at most hard; hard − lendingLimit is always its own. Absent: all of its unused "
        "hard may be lent; a name left out may be lent in full.",
        json_schema_extra={"x-kq-resource-list": True},
    )

    @property
    def guarded(self) -> bool:
        """Whether member guards (and observed usage) are on for this quota."""
        return self.memberEnforcement == ENFORCEMENT_RESOURCE_QUOTA

    @property
    def releases_evicted(self) -> bool:
        """Whether replicas evicted from a cluster that is not Ready stop being charged."""
        return self.failover is None or self.failover.evictedReplicas != EVICTED_HOLD


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
    expirationTime: str = Field(
        description="RFC 3339 time after which the controller audits the reservation (it "
        "holds until its binding is counted in used or proven never created)."
    )
    generation: int = Field(
        default=0,
        description="The binding generation that carries this usage: the controller drops the "
        "reservation once it observes the binding at this generation or later.",
    )

    def expires(self) -> datetime | None:
        """When the reservation is due for the orphan audit; None when unreadable (due at
        once). It holds its charge either way."""
        return parse_time(self.expirationTime)

    def due(self, now: datetime) -> bool:
        """Expired at `now` (naive means UTC): due for the orphan audit, still held."""
        return pending.expired(self.expirationTime, now)


def _read_status(status: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A wire status with `pending` as the model's fields (see `wire_reservations`)."""
    out = {k: v for k, v in status.items() if k != "pending"}
    out["reservations"] = pending.wire_reservations(status, namespace)
    return out


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
    guard: RawResourceList | None = Field(
        default=None,
        description="The hard of this member's guard ResourceQuota as the controller last "
        "confirmed it (memberEnforcement ResourceQuota).",
        json_schema_extra={"x-kq-resource-list": True},
    )


class Loan(_Lenient):
    """What one quota of a cohort lends another (in the lender's `lent`, the borrower's
    `borrowed`): written by the controller, lender first (docs/cohorts.md)."""

    quota: str = Field(description="The other quota of the loan: namespace/name.")
    resources: RawResourceList = _resource_list("The amount lent, per name of hard.")


class Condition(_Lenient):
    type: str = Field(
        description="Ready, Valid, MemberObserved, BindingsCharged, Enforced, OutOfBandUsage or "
        "Guarded."
    )
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    lastTransitionTime: str = Field(default="", description="RFC 3339 time of the last change.")
    observedGeneration: int = 0


# Only the CRD schema is generated from this model: `pending.decode_pending` reads the wire by
# hand, so
# that a malformed entry never makes the whole quota unreadable.
class PendingCharge(_Lenient):
    """Bindings admitted with one charge and expiry that the controller has not yet observed."""

    charge: RawResourceList = _resource_list(
        "The usage each of these bindings reserved: its admitted delta."
    )
    expires: str = Field(
        default="",
        description="RFC 3339 time after which the controller audits these charges if it has "
        "not counted them (they hold until counted in used or proven never created; whole "
        "seconds: the reservations of one second's batches share it). Absent only in a status "
        "written before this layout, whose entries carry their own expiry.",
        json_schema_extra={"pattern": pending.PENDING_EXPIRES_PATTERN},
    )
    bindings: list[str] = Field(
        default_factory=list,
        description="One entry per binding, `<name>/<uid>`, or `<name>/<uid>/<generation>` when "
        "the binding generation that carries the charge is not 1 (a create's): the controller "
        "drops the entry once it observes the binding at that generation or later. (A status "
        "written before this layout has `<name>/<uid>/<generation>/<expires in Unix seconds>`; "
        "it is read, never written.)",
        json_schema_extra={"items": {"type": "string", "pattern": pending.PENDING_ENTRY_PATTERN}},
    )


def _pending_schema(schema: dict[str, Any]) -> None:
    """KarmadaQuotaStatus's JSON schema: `pending` (the wire field), next to the deprecated
    `reservations` it replaces (kept so that the API server does not prune the old layout
    before its first decode; see `pending.decode_pending`)."""
    props = schema.get("properties", {})
    pending = {
        "type": "array",
        "description": "Admitted usage not yet observed by the controller, grouped by charge and "
        "expiry.",
        "items": PendingCharge.model_json_schema(),
    }
    schema["properties"] = {}
    for name, prop in props.items():
        if name == "reservations":
            schema["properties"]["pending"] = pending
        schema["properties"][name] = prop


# Pending charges are one logical list, `KarmadaQuotaStatus.reservations` (every reader and
# writer uses it); on the wire they are `status.pending` (`pending.encode_pending`), and a wire
# `status.reservations` is only read, from a status an earlier version wrote
# (`pending.decode_pending`).
# status fields of a quota in a cohort (karmadaquota.cohorts), omitted when empty
LOAN_FIELDS = ("borrowed", "lent", "loans")


class KarmadaQuotaStatus(_Lenient):
    model_config = ConfigDict(json_schema_extra=_pending_schema)

    hard: RawResourceList = _resource_list("The enforced hard limits.")
    used: RawResourceList = _resource_list(
        "Global usage observed by the controller, summed over every member cluster."
    )
    aggregatedStatus: list[ClusterUsage] = Field(
        default_factory=list,
        description="Per member cluster breakdown: each cluster something is placed in, each "
        "member whose pods are observed, every member of a guarded quota.",
    )
    reservations: list[Reservation] = Field(
        default_factory=list,
        description="Deprecated: the v0.1 layout of pending charges (one object per binding); "
        "read once after an upgrade, never written.",
        exclude=True,
    )
    waiting: list[WaitingWorkload] = Field(
        default_factory=list,
        description="Workloads this quota refused, oldest first; woken when they fit.",
    )
    queued: int = Field(
        default=0,
        description="ResourceBindings this quota queued that wait, suspended, to be admitted.",
    )
    summary: str = Field(default="", description="used/hard per resource, for kubectl get.")
    borrowed: list[Loan] = Field(
        default_factory=list,
        description="spec.cohort: what this quota borrows from each lender of its cohort (it "
        "may use hard + borrowed − lent).",
    )
    lent: list[Loan] = Field(
        default_factory=list,
        description="spec.cohort: what this quota lends each borrower of its cohort.",
    )
    loans: str = Field(
        default="",
        description="spec.cohort: borrowed and lent in short, for kubectl get (empty: none).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Valid, MemberObserved, BindingsCharged, Enforced, OutOfBandUsage, "
        "Guarded.",
    )
    observedGeneration: int = Field(
        default=0, description="The quota generation the controller last computed status for."
    )
    controllerRevision: int = Field(
        default=0,
        description="Counts the controller's status writes. The controller compare-and-swaps "
        "on it (a JSON patch that tests it) instead of on resourceVersion, so that the "
        "webhook's writes of pending charges in between never make it lose; the webhook "
        "carries it over unchanged.",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_pending(cls, data: Any) -> Any:
        # a status read on its own: reservedBy.namespace stays "" (KarmadaQuota fills it)
        if isinstance(data, Mapping) and "pending" in data:
            return _read_status(data, "")
        return data

    @model_serializer(mode="wrap")
    def _write_pending(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # `reservations` is never written (Field(exclude=True)): `pending` says it all, and a
        # status write replaces the whole status, so the first one drops an old layout's list
        out: dict[str, Any] = handler(self)
        for name in LOAN_FIELDS:  # a quota in no cohort carries none of them
            if not out.get(name, True):
                out.pop(name)
        groups = pending.encode_pending(self.reservations)
        if not groups:  # omitted when empty, as the API server drops an empty list anyway
            return out
        wire: dict[str, Any] = {}
        for name, value in out.items():
            if name == "waiting":
                wire["pending"] = groups
            wire[name] = value
        wire.setdefault("pending", groups)
        return wire


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
        "breakdown) and the webhook (pending charges, waiting workloads).",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_pending(cls, data: Any) -> Any:
        # here the quota's namespace is known: it is every pending binding's namespace
        if isinstance(data, Mapping):
            status = data.get("status")
            if isinstance(status, Mapping) and "pending" in status:
                meta = data.get("metadata")
                ns = meta.get("namespace") if isinstance(meta, Mapping) else ""
                return {**data, "status": _read_status(status, ns if isinstance(ns, str) else "")}
        return data


_Quota = TypeVar("_Quota", bound=KarmadaQuota)


def read_quota(raw: Mapping[str, Any]) -> KarmadaQuota | None:
    """A quota from the wire, or None (logged) when unreadable: webhook and controller both
    skip such an object rather than fail on it; the API server's schema makes it rare."""
    return _read(KarmadaQuota, raw, namespaced=True)


def _read(model: type[_Quota], raw: Mapping[str, Any], namespaced: bool) -> _Quota | None:
    """`read_quota` for either kind (a cluster quota's log names no namespace)."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        where = {"namespace": meta.get("namespace")} if namespaced else {}
        log.warning(
            f"ignoring unreadable {model.__name__}",
            extra={**where, "quota": meta.get("name"), "error": str(e)},
        )
        return None


# ---------------------------------------------------------------------------------------------
# ClusterKarmadaQuota: one budget over the namespaces a label selector picks


LABEL_OPERATOR_ENUM: list[JsonValue] = ["In", "NotIn", "Exists", "DoesNotExist"]


class LabelSelectorRequirement(_Lenient):
    """metav1.LabelSelectorRequirement."""

    # the operator stays a string: `selectors.validate` refuses a bad one in Kubernetes' words

    key: str = Field(description="The label key the selector applies to.")
    operator: str = Field(
        description="In/NotIn need values; Exists/DoesNotExist take none.",
        json_schema_extra={"enum": LABEL_OPERATOR_ENUM},
    )
    values: list[str] = Field(default_factory=list, description="Label values for In and NotIn.")


class LabelSelector(_Lenient):
    """metav1.LabelSelector: matchLabels and matchExpressions, ANDed; empty selects all."""

    matchLabels: dict[str, str] = Field(
        default_factory=dict, description="Labels a namespace must carry, with these values."
    )
    matchExpressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Requirements a namespace's labels must all meet."
    )


class ClusterKarmadaQuotaSpec(KarmadaQuotaSpec):
    memberEnforcement: str = Field(
        default=ENFORCEMENT_NONE,
        description="None, the only value: a member guard is a ResourceQuota, which holds one "
        "namespace; a budget shared by many namespaces cannot be split into them without "
        "stranding it (the namespaces' own KarmadaQuotas guard the members).",
        json_schema_extra={"enum": ENFORCEMENT_ENUM},
    )
    namespaceSelector: LabelSelector = Field(
        description="The namespaces whose bindings share this budget (metav1.LabelSelector over "
        "namespace labels). Required; an empty selector selects every namespace."
    )


class NamespaceUsage(_Lenient):
    namespace: str = Field(description="A selected namespace.")
    used: RawResourceList = _resource_list("Usage charged by this namespace's bindings.")


class ClusterPendingCharge(PendingCharge):
    """Pending charges of one namespace's bindings with one charge and expiry."""

    namespace: str = Field(description="The namespace of these bindings.")


def _cluster_status_schema(schema: dict[str, Any]) -> None:
    """ClusterKarmadaQuotaStatus's JSON schema: `pending` groups carry their namespace; no
    waiting list or queue (a cluster quota refuses; see docs/cluster-quotas.md)."""
    _pending_schema(schema)
    props = schema["properties"]
    props["pending"]["items"] = ClusterPendingCharge.model_json_schema()
    for name in CLUSTER_STATUS_UNUSED:
        props.pop(name, None)


# fields of KarmadaQuotaStatus a cluster quota never fills (onExceed Queue is refused for it,
# and refused workloads are retried by Karmada's own backoff): not in its schema, never written
CLUSTER_STATUS_UNUSED = ("waiting", "queued", "borrowed", "lent", "loans")


class ClusterKarmadaQuotaStatus(KarmadaQuotaStatus):
    model_config = ConfigDict(json_schema_extra=_cluster_status_schema)

    namespaces: list[NamespaceUsage] = Field(
        default_factory=list,
        description="Usage per selected namespace, only those with non-zero usage (sorted).",
    )
    selectedNamespaces: int = Field(
        default=0, description="How many namespaces the selector picks now."
    )

    @model_serializer(mode="wrap")
    def _write_pending(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in CLUSTER_STATUS_UNUSED:
            out.pop(name, None)
        groups = pending.encode_pending(self.reservations, by_namespace=True)
        if groups:
            out["pending"] = groups
        return out


class ClusterKarmadaQuota(KarmadaQuota):
    """A global hard quota for the bindings of every namespace its selector picks, summed."""

    kind: str = CLUSTER_KIND
    spec: ClusterKarmadaQuotaSpec = Field(description="The desired global hard limits.")
    status: ClusterKarmadaQuotaStatus = Field(
        default_factory=ClusterKarmadaQuotaStatus,
        description="Enforced limits and usage, written by the controller (used, per namespace "
        "and per member cluster) and the webhook (pending charges).",
    )


def read_cluster_quota(raw: Mapping[str, Any]) -> ClusterKarmadaQuota | None:
    """A cluster quota from the wire, or None (logged) when unreadable (`read_quota`)."""
    return _read(ClusterKarmadaQuota, raw, namespaced=False)


# A tenant's view of the cluster quotas applying to a namespace: one object per (cluster quota,
# selected namespace), kept by the controller, readable with namespaced rights
# (docs/cluster-quotas.md)
APPLIED_KIND = "AppliedClusterKarmadaQuota"
APPLIED_PLURAL = "appliedclusterkarmadaquotas"
APPLIED_SINGULAR = "appliedclusterkarmadaquota"
APPLIED_SHORT_NAMES = ["ackq"]
# on every view: the cluster quota it shows (what the controller lists its views by)
CLUSTER_QUOTA_LABEL = "quota.karmada.io/cluster-quota"


class AppliedClusterKarmadaQuotaStatus(_Lenient):
    clusterQuota: str = Field(description="The ClusterKarmadaQuota this view shows.")
    hard: RawResourceList = _resource_list("The cluster quota's hard limits.")
    used: RawResourceList = _resource_list(
        "The cluster quota's usage: the total over every namespace it selects."
    )
    namespaceUsed: RawResourceList = _resource_list("What this namespace's bindings use of it.")
    summary: str = Field(default="", description="used/hard per resource, for kubectl get.")
    namespaceSummary: str = Field(
        default="", description="this namespace's usage per resource, for kubectl get."
    )
    selectedNamespaces: int = Field(
        default=0, description="How many namespaces share the budget (not which)."
    )


class AppliedClusterKarmadaQuota(_Lenient):
    """A ClusterKarmadaQuota as seen from one namespace it selects: its totals and this
    namespace's usage, never other namespaces'. Kept by the controller; read-only for users."""

    apiVersion: str = API_VERSION
    kind: str = APPLIED_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    status: AppliedClusterKarmadaQuotaStatus = Field(
        description="Written by the controller from the cluster quota's status."
    )


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
    # Directly / Immediately: Karmada renders no Work for the task (charge._placed)
    purgeMode: str | None = None
    # set by Karmada's graceful eviction controller; the task ends by its timeout from then
    # (gracePeriodSeconds, or karmada-controller-manager's --graceful-eviction-timeout)
    creationTimestamp: str | None = None
    gracePeriodSeconds: int | None = None


class BindingSnapshot(_Lenient):
    """spec.requiredBy[]: a binding that depends on this one, and where it is placed (Karmada
    renders this binding into those clusters too)."""

    namespace: str = ""
    name: str = ""
    clusters: list[TargetCluster] = Field(default_factory=list)


class Suspension(_Lenient):
    """spec.suspension: `scheduling` true keeps Karmada's scheduler away (Karmada >= 1.13)."""

    scheduling: bool | None = None


class SchedulePriority(_Lenient):
    """spec.schedulePriority, from a PropagationPolicy's schedulePriority."""

    priority: int = 0


class ResourceBindingSpec(_Lenient):
    resource: BindingResource
    replicas: int = 0  # negative values are charged as zero and refused by charge()
    replicaRequirements: ReplicaRequirements | None = None
    components: list[Component] = Field(default_factory=list)
    clusters: list[TargetCluster] = Field(default_factory=list)
    gracefulEvictionTasks: list[GracefulEvictionTask] = Field(default_factory=list)
    requiredBy: list[BindingSnapshot] = Field(default_factory=list)
    # a PropagationPolicy's preserveResourcesOnDeletion: what was rendered keeps running in the
    # members after the binding is gone (charge.Charge.uncounted)
    preserveResourcesOnDeletion: bool | None = None
    # a binding queued by a quota (karmadaquota.queueing) is charged nothing while suspended
    suspension: Suspension | None = None
    # read for queue order only; never charged
    schedulePriority: SchedulePriority | None = None


class ResourceBinding(_Lenient):
    apiVersion: str = BINDING_API_VERSION
    kind: str = BINDING_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceBindingSpec
