"""Wire models: the KarmadaQuota CRD and the parts of a Karmada ResourceBinding we read.

Models mirror the JSON on the wire (camelCase field names) so that one model serves the
API server, the webhook and the CRD schema generator. They are lenient to fields we do not
read (Karmada adds fields every release) and strict on the ones we do. Quantities stay strings
here; `resources.parse_resource_list` turns them into exact values where a decision needs them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar
from urllib.parse import unquote

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
    """Whether a pending charge expiring at `expiration_time` is due for the controller's
    orphan audit at `now` (naive means UTC); an unreadable time is due at once.

    Never a release: an expired charge holds exactly what it held before (a clock alone never
    frees quota — with no controller the quota fills and refuses). Only the controller drops
    an entry, once it has counted its binding in `used` or proved that it never existed."""
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
        return expired(self.expirationTime, now)


# ---------------------------------------------------------------------------------------------
# Pending charges on the wire: `status.pending`
#
# Every admitted-but-not-yet-observed charge used to be a full Reservation object in
# `status.reservations` (~300 bytes of JSON each); a storm put 50–200 of them in every status
# write. On the wire they are grouped by charge and expiry, one short string per binding (~50
# bytes): a batch's reservations share their expiration, whole seconds rounded up, so the
# batches of one second share a group, and a storm keeps one or two groups per charge alive.
# An entry is the binding's name and uid, and its generation only when it is not 1 (a create's):
#
#   pending: [{"charge": {"pods": "1", "requests.cpu": "100m"},
#              "expires": "2026-01-01T12:01:00Z",
#              "bindings": ["web-deployment/6f1c…", "api-deployment/0b5e…/2", …]}, …]
#
# In memory nothing changed: `KarmadaQuotaStatus.reservations` is the logical list of
# `Reservation`s. Decoding fills in what the entry leaves out (reservedBy apiVersion/kind: a
# ResourceBinding; namespace: the quota's; generation 1; the group's expiry); encoding keeps
# only name, uid, generation, expiration (whole seconds, rounded up) and the charge.
#
# Read once after an upgrade, and never written: the first form of `pending` (groups by charge
# alone, `<name>/<uid>/<generation>/<expires in Unix seconds>` per entry) and v0.1's
# `status.reservations`.

# name/uid, name/uid/generation, or (the first form, read only) name/uid/generation/expires.
# Names and uids never contain '/' (DNS subdomains, UUIDs); the encoder escapes '%' and '/'
# anyway, so whatever it writes matches the pattern.
PENDING_ENTRY_PATTERN = r"^[^/]*/[^/]*(/[0-9]+){0,2}$"
# a group's expiry: RFC 3339 (the encoder writes UTC whole seconds, `format_time`)
PENDING_EXPIRES_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
# the generation an entry leaves out: a create's (the API server sets 1 before admission)
DEFAULT_GENERATION = 1
# generation of an entry whose generation is unreadable: no binding reaches it, so the charge
# holds until the orphan audit settles it (never dropped early, which could under-count)
HOLD_GENERATION = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_SECONDS = int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH).total_seconds())
_UNREADABLE = "unreadable:"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F") if "%" in text or "/" in text else text


def _unescape(text: str) -> str:
    return unquote(text) if "%" in text else text


def expiry_seconds(expiration_time: str) -> int | None:
    """An RFC 3339 expiration as Unix seconds, rounded up (a charge is never audited earlier
    than it said) and clamped to 0..9999-12-31; None when unreadable (due at once)."""
    when = parse_time(expiration_time)
    if when is None:
        return None
    delta = when - _EPOCH
    seconds = delta.days * 86400 + delta.seconds + (1 if delta.microseconds else 0)
    return min(max(seconds, 0), _MAX_SECONDS)


def _seconds_time(seconds: int) -> str:
    """Unix seconds (0..9999-12-31) as the RFC 3339 time a group's `expires` says."""
    return format_time(_EPOCH + timedelta(seconds=seconds))


def pending_entry(r: Reservation) -> str:
    """`<name>/<uid>`, or `<name>/<uid>/<generation>` when the generation is not
    `DEFAULT_GENERATION`; the expiry is its group's."""
    name, uid = _escape(r.reservedBy.name), _escape(r.reservedBy.uid)
    generation = min(max(r.generation, 0), HOLD_GENERATION)
    return f"{name}/{uid}" if generation == DEFAULT_GENERATION else f"{name}/{uid}/{generation}"


def charge_key(reserved: Mapping[str, QuantityValue]) -> tuple[tuple[str, QuantityValue], ...]:
    """What groups reservations in `pending` (with their expiry): the same names and values (2
    and "2" differ)."""
    return tuple(sorted(reserved.items()))


PendingKey = tuple[tuple[tuple[str, QuantityValue], ...], int, str | None]
# one entry as `status.pending` keeps it: uid, generation, charge, expiry second (0: unreadable)
EntryKey = tuple[str, int, tuple[tuple[str, QuantityValue], ...], int]


def entry_key(r: Reservation) -> EntryKey:
    """What tells reservations apart once written (two equal keys are one charge made twice:
    the same binding generation admitted again within a second)."""
    return (
        r.reservedBy.uid,
        r.generation,
        charge_key(r.reserved),
        expiry_seconds(r.expirationTime) or 0,
    )


def pending_groups(
    reservations: Iterable[Reservation], by_namespace: bool = False
) -> dict[PendingKey, list[Reservation]]:
    """The reservations by their `status.pending` group, (charge, expiry in whole seconds
    rounded up; 0 — due at once — when unreadable; and with `by_namespace` — a cluster quota,
    whose entries come from many namespaces — the binding's namespace), groups in order of first
    appearance, each in list order: what the encoder writes and the webhook's size bound
    counts."""
    groups: dict[PendingKey, list[Reservation]] = {}
    seconds: dict[str, int] = {}  # a batch's reservations share their expiration
    for r in reservations:
        stamp = r.expirationTime
        if stamp not in seconds:
            seconds[stamp] = expiry_seconds(stamp) or 0
        ns = r.reservedBy.namespace if by_namespace else None
        groups.setdefault((charge_key(r.reserved), seconds[stamp], ns), []).append(r)
    return groups


def encode_pending(
    reservations: Iterable[Reservation], by_namespace: bool = False
) -> list[dict[str, Any]]:
    """The wire `pending` of a logical reservation list (`pending_groups`), so an unchanged
    list encodes to the same JSON (the controller writes only what differs). Decoding the
    result gives the list grouped stably; a reservation whose expiration is unreadable is
    written as due at once (1970-01-01): it is held until the controller's audit drops it,
    never left out. With `by_namespace` (a cluster quota) each group says its bindings'
    `namespace`."""
    return [
        {
            **({"namespace": ns} if ns is not None else {}),
            "charge": dict(rs[0].reserved),
            "expires": _seconds_time(at),
            "bindings": [pending_entry(r) for r in rs],
        }
        for (_, at, ns), rs in pending_groups(reservations, by_namespace).items()
    ]


def _read_charge(raw: Any) -> dict[str, QuantityValue]:
    """A group's charge as written, so that it is charged as it says. What is not a quantity
    (only a writer that bypassed the CRD schema can put it there) is kept as text that fails
    to parse, so admission refuses in that namespace (fail closed) until the controller drops
    the entries (observed, or proven never created) — never read as nothing."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        return {"<unreadable charge>": repr(raw)}
    out: dict[str, QuantityValue] = {}
    for name, value in raw.items():
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        out[str(name)] = value if ok else repr(value)
    return out


def _read_expires(group: Mapping[str, Any]) -> str | None:
    """A group's `expires` as its entries' expirationTime (whole seconds, rounded up, as the
    encoder writes it); unreadable (held, due for the audit at once) when it is not an RFC 3339
    time; None when the group has none (the first form: its entries carry their own)."""
    if "expires" not in group:
        return None
    raw = group["expires"]
    seconds = expiry_seconds(raw) if isinstance(raw, str) else None
    return _UNREADABLE + repr(raw) if seconds is None else _seconds_time(seconds)


def _unix_time(expires: str, stamps: dict[str, str]) -> str:
    """A first-form entry's expiry (Unix seconds) as an expirationTime; unreadable when it is
    not 0..9999-12-31 in at most 12 digits (int() refuses thousands of them)."""
    stamp = stamps.get(expires)
    if stamp is None:
        ok = expires.isascii() and expires.isdigit() and len(expires) <= 12
        seconds = int(expires) if ok else -1
        stamp = _seconds_time(seconds) if 0 <= seconds <= _MAX_SECONDS else _UNREADABLE + expires
        stamps[expires] = stamp
    return stamp


def _read_entry(
    entry: Any,
    charge: dict[str, QuantityValue],
    namespace: str,
    expires: str | None,
    stamps: dict[str, str],
) -> dict[str, Any]:
    """One `bindings[]` entry of a group whose expiry reads `expires` (None: it has none) as
    a Reservation (dict form, validated by the caller)."""
    text = entry if isinstance(entry, str) else repr(entry)
    parts = text.split("/")
    if len(parts) == 4:  # the first form: name/uid/generation/expires (Unix seconds)
        name, uid, generation = parts[:3]
        stamp = _unix_time(parts[3], stamps)
    elif len(parts) in (2, 3):  # name/uid[/generation], by the group's expiry (if any)
        name, uid = parts[:2]
        generation = parts[2] if len(parts) == 3 else str(DEFAULT_GENERATION)
        stamp = expires if expires is not None else _UNREADABLE + text
    else:  # neither form: held under its text as name and uid, audited at once
        name, uid, generation, stamp = text, text, "", _UNREADABLE + text
    gen = (
        min(int(generation), HOLD_GENERATION)
        if generation.isascii() and generation.isdigit() and len(generation) <= 19
        else HOLD_GENERATION
    )
    return {
        "reservedBy": {
            "apiVersion": BINDING_API_VERSION,
            "kind": BINDING_KIND,
            "name": _unescape(name),
            "namespace": namespace,
            "uid": _unescape(uid),
        },
        "reserved": charge,
        "expirationTime": stamp,
        "generation": gen,
    }


def decode_pending(raw: Any, namespace: str = "") -> list[dict[str, Any]]:
    """The reservations (dict form) a wire `pending` holds, in order.

    Both forms are read: groups with an `expires` and entries `name/uid[/generation]` (what the
    encoder writes), and the first form, entries `name/uid/generation/expires` (Unix seconds),
    read by their own expiry in whatever group. A malformed entry never makes the quota
    unreadable (an unreadable quota is skipped by the webhook: nothing would be enforced) and
    never holds less than the old layout would have:
    - an expiry that cannot be read — a group's `expires` that is not an RFC 3339 time, a
      first-form expiry that is not Unix seconds within 0..9999-12-31, a group without
      `expires` for entries that carry none, or an entry that is neither form at all —
      becomes an unreadable `expirationTime`: the charge holds, due for the controller's
      orphan audit at once (`expired`), which drops it once its binding is counted or proven
      never created (a name no binding can have is proof at once);
    - an unreadable generation holds the charge until the audit settles it
      (`HOLD_GENERATION`);
    - an unreadable charge is charged as unparseable text: admission fails closed (see
      `_read_charge`);
    - a group that is not an object, or a `pending` that is not a list, holds no entry to read.
    """
    if not isinstance(raw, list):
        return []
    out: list[dict[str, Any]] = []
    stamps: dict[str, str] = {}
    for group in raw:
        if not isinstance(group, Mapping):
            continue
        charge = _read_charge(group.get("charge"))
        expires = _read_expires(group)
        entries = group.get("bindings")
        # a cluster quota's group names its bindings' namespace; a quota's are its own
        ns = group.get("namespace")
        ns = ns if isinstance(ns, str) else namespace
        for entry in entries if isinstance(entries, list) else []:
            out.append(_read_entry(entry, charge, ns, expires, stamps))
    return out


def _identity(r: Any) -> tuple[str, int] | None:
    """(uid, generation) of a reservation in dict or model form; None when it has none."""
    if isinstance(r, Reservation):
        return (r.reservedBy.uid, r.generation)
    if isinstance(r, Mapping):
        by = r.get("reservedBy")
        uid = by.get("uid") if isinstance(by, Mapping) else None
        generation = r.get("generation", 0)
        if isinstance(uid, str) and isinstance(generation, int):
            return (uid, generation)
    return None


def wire_reservations(status: Mapping[str, Any], namespace: str = "") -> list[Any]:
    """The pending charges of a status as the API server has it, as reservations in dict form
    (the model's `reservations`, before validation): `pending` decoded, followed by any
    old-layout `reservations` (a status written before the upgrade) that `pending` does not
    already hold (same uid and generation). For readers of raw objects (kubectl plugin);
    everyone else reads `KarmadaQuotaStatus.reservations`."""
    merged: list[Any] = decode_pending(status.get("pending"), namespace)
    old = status.get("reservations")
    if isinstance(old, list) and old:
        seen = {_identity(r) for r in merged}
        merged += [r for r in old if (_identity(r) or ("", -1)) not in seen]
    return merged


def _read_status(status: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A wire status with `pending` as the model's fields (see `wire_reservations`)."""
    out = {k: v for k, v in status.items() if k != "pending"}
    out["reservations"] = wire_reservations(status, namespace)
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


# Only the CRD schema is generated from this model: `decode_pending` reads the wire by hand, so
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
        json_schema_extra={"pattern": PENDING_EXPIRES_PATTERN},
    )
    bindings: list[str] = Field(
        default_factory=list,
        description="One entry per binding, `<name>/<uid>`, or `<name>/<uid>/<generation>` when "
        "the binding generation that carries the charge is not 1 (a create's): the controller "
        "drops the entry once it observes the binding at that generation or later. (A status "
        "written before this layout has `<name>/<uid>/<generation>/<expires in Unix seconds>`; "
        "it is read, never written.)",
        json_schema_extra={"items": {"type": "string", "pattern": PENDING_ENTRY_PATTERN}},
    )


def _pending_schema(schema: dict[str, Any]) -> None:
    """KarmadaQuotaStatus's JSON schema: `pending` (the wire field), next to the deprecated
    `reservations` it replaces (kept so that the API server does not prune the old layout
    before its first decode; see `decode_pending`)."""
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
# writer uses it); on the wire they are `status.pending` (`encode_pending`), and a wire
# `status.reservations` is only read, from a status an earlier version wrote (`decode_pending`).
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
        groups = encode_pending(self.reservations)
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
CLUSTER_STATUS_UNUSED = ("waiting", "queued")


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
        groups = encode_pending(self.reservations, by_namespace=True)
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
