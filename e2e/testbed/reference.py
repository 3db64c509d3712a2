"""The test bed's own reference charge: what docs/charging.md says a ResourceBinding costs, written
from the document's tables and never from the product (`karmadaquota.charge` is what is under
test; an oracle that calls it, or copies it, agrees with every mistake it makes).

The rules it reads, each from docs/charging.md:

* **Where Karmada renders a Work, with how many replicas** (the cluster table): every
  `spec.clusters[]` entry (one named twice: its sum); then each cluster of
  `spec.requiredBy[].clusters` that is not scheduled (its first listing); then each
  `spec.gracefulEvictionTasks[].fromCluster` in neither, unless purged `Directly` (or
  `Immediately`), with the task's `replicas`, or `spec.replicas` when it names none.
* **R = max(`spec.replicas`, Σ over those clusters)**; a Deployment's rollout adds, in every
  cluster, `maxSurge` of that cluster's replicas (25 % rounded up by default, none with
  `maxSurge: 0` or `Recreate`), and before placement of its `spec.replicas`.
* **Per replica**: `pods` 1 and `count/pods` 1 (Kubernetes' pod evaluator counts both); each
  request under `requests.<r>` and, for cpu, memory and ephemeral-storage, the bare `<r>`;
  with the template's pod (only when the binding names a template version: one made by hand is
  charged from its own fields) each request is the larger of the binding's and the pod's as
  Kubernetes charges it (containers summed plus sidecars, an init container beside the
  sidecars started before it, the overhead added, pod-level resources setting the total) and
  its limits under `limits.<r>`.
* **Claim templates** (a StatefulSet's `volumeClaimTemplates`): per replica and per entry
  `persistentvolumeclaims` 1, `count/persistentvolumeclaims` 1, `requests.storage` its request,
  and both the claim count and the storage again under `<class>.storageclass.storage.k8s.io/`
  when it names its `storageClassName`.
* **Objects**: 1 of `count/<resource>.<group>` per binding (`count/<resource>` for the core
  group) and of the legacy `services`, `secrets`, `configmaps`, `persistentvolumeclaims` for
  those kinds — except a propagated Pod, counted under `count/pods` per replica only.
* **Kinds**: Deployment, StatefulSet, ReplicaSet, Job, Pod and ReplicationController run their
  replicas (a ReplicationController's binding carries none: each cluster runs its template's
  `spec.replicas`, 1 when absent; so does any workload whose binding has no replicas while its
  template has some); a kind known to run no pods is charged its object only, never replicas;
  any other kind is charged its object and marked `uncounted` (what it runs, no charge counts).
* **Multi-component** bindings (more than one component): Σ component replicas × requests,
  once per target cluster (once before scheduling); one component like the legacy fields.
* A negative request or replica count is charged as zero; a binding queued by a quota (its
  `quota.karmada.io/queued-by` annotation, scheduling suspended, placed nowhere) is charged
  nothing. Scopes as Kubernetes' ResourceQuota reads a pod's: BestEffort is replicas without
  any cpu or memory request or limit, PriorityClass the replicas' class, and a binding without
  replicas matches no scope.

Quantities are Kubernetes' (suffixes, decimal exponents), kept exact as fractions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_SUFFIX = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{f"{p}i": Fraction(2 ** (10 * (i + 1))) for i, p in enumerate("KMGTPE")},
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)

# docs/charging.md, "Which kinds are charged"
RUN_REPLICAS = {
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("", "Pod"),
    ("", "ReplicationController"),
}
RUN_NO_PODS = {
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "PersistentVolumeClaim"),
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("coordination.k8s.io", "Lease"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("policy", "PodDisruptionBudget"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("multicluster.x-k8s.io", "ServiceExport"),
    ("multicluster.x-k8s.io", "ServiceImport"),
    ("networking.karmada.io", "MultiClusterService"),
    ("networking.karmada.io", "MultiClusterIngress"),
    ("gateway.networking.k8s.io", "HTTPRoute"),
    ("gateway.networking.k8s.io", "GRPCRoute"),
    ("gateway.networking.k8s.io", "ReferenceGrant"),
}
LEGACY = {
    "Service": "services",
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}
BARE = ("cpu", "memory", "ephemeral-storage")
NOT_RENDERED = ("Directly", "Immediately")
STORAGE_CLASS = "{}.storageclass.storage.k8s.io/{}"


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("1500m", "2Gi", "1e3", "1E", 3) exactly; ValueError if it is
    none."""
    m = _QUANTITY.match(str(value).strip())
    if m is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = m.groups()
    scale = Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIX[suffix or ""]
    return Fraction(number) * scale


Usage = dict[str, Fraction]


@dataclass(frozen=True)
class Charged:
    """One binding's charge by quota resource name, and what its scopes look at; `uncounted`:
    a kind that may run pods no charge counts (its object alone is charged)."""

    total: Usage
    has_replicas: bool
    best_effort: bool
    priority_class: str
    uncounted: bool = False


def _nonneg(value: Any) -> int:
    """A replica count; a negative or absent one is zero."""
    return int(value) if value is not None and int(value) > 0 else 0


def _plus(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Usage:
    return {k: a.get(k, Fraction(0)) + b.get(k, Fraction(0)) for k in {*a, *b}}


def _times(a: Mapping[str, Fraction], n: int) -> Usage:
    return {k: v * n for k, v in a.items()}


def _greater(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> Usage:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in {*a, *b}}


def _plural(kind: str) -> str:
    """The API resource of a kind, as Kubernetes names the built-in ones."""
    low = kind.lower()
    if low == "endpoints":
        return low
    if low.endswith(("s", "x", "z", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def object_names(api_version: str, kind: str) -> Usage:
    """What the object itself costs (docs' first table); a Pod none (per replica instead)."""
    group = _group(api_version)
    if (group, kind) == ("", "Pod"):
        return {}
    resource = _plural(kind)
    out: Usage = {f"count/{resource}.{group}" if group else f"count/{resource}": Fraction(1)}
    if not group and kind in LEGACY:
        out[LEGACY[kind]] = Fraction(1)
    return out


# --- one replica as Kubernetes charges its pod ------------------------------------------------


def _resources(container: Mapping[str, Any], which: str) -> Usage:
    values = (container.get("resources") or {}).get(which) or {}
    return {r: max(Fraction(0), quantity(v)) for r, v in values.items()}


def pod_charge(pod_spec: Mapping[str, Any], which: str) -> Usage:
    """The pod's `which` ("requests" or "limits") as Kubernetes' quota charges it: the regular
    containers summed with every sidecar (an init container with `restartPolicy: Always`); each
    other init container must fit beside the sidecars started before it, so the pod charges the
    larger of that and the sum; the overhead is added (to a limit only where one is set); the
    pod's own `spec.resources` replace the total for the names they set."""
    running: Usage = {}
    for c in pod_spec.get("containers") or []:
        running = _plus(running, _resources(c, which))
    sidecars: Usage = {}
    peak: Usage = {}
    for c in pod_spec.get("initContainers") or []:
        own = _resources(c, which)
        if c.get("restartPolicy") == "Always":
            sidecars = _plus(sidecars, own)
            peak = _greater(peak, sidecars)
        else:
            peak = _greater(peak, _plus(sidecars, own))
    total = _greater(_plus(running, sidecars), peak)
    pod_level = {
        r: max(Fraction(0), quantity(v))
        for r, v in ((pod_spec.get("resources") or {}).get(which) or {}).items()
    }
    total.update(pod_level)
    overhead = {
        r: max(Fraction(0), quantity(v)) for r, v in (pod_spec.get("overhead") or {}).items()
    }
    for r, v in overhead.items():
        if which == "requests" or r in total:
            total[r] = total.get(r, Fraction(0)) + v
    return {r: v for r, v in total.items() if v or r in pod_level}


def _pod_template(template: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kind = template.get("kind")
    if kind == "Pod":
        return template.get("spec") or {}
    return ((template.get("spec") or {}).get("template") or {}).get("spec")


def _template_replicas(template: Mapping[str, Any]) -> int:
    spec = template.get("spec") or {}
    kind = template.get("kind")
    if kind == "Job":
        return _nonneg(spec.get("parallelism", 1))
    if kind == "Pod":
        return 1
    return _nonneg(spec.get("replicas", 1))


def _surge(template: Mapping[str, Any] | None, replicas: int) -> int:
    """The pods a Deployment's rollout may add beside `replicas` in one cluster."""
    if template is None or template.get("kind") != "Deployment" or replicas <= 0:
        return 0
    strategy = (template.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(replicas * Fraction(value[:-1]) / 100)
    return _nonneg(value)


def claims(template: Mapping[str, Any] | None) -> Usage:
    """What one replica's claims cost (a StatefulSet's `volumeClaimTemplates`)."""
    if template is None or template.get("kind") != "StatefulSet":
        return {}
    out: Usage = {}
    for entry in (template.get("spec") or {}).get("volumeClaimTemplates") or []:
        spec = entry.get("spec") or {}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        one: Usage = {"persistentvolumeclaims": Fraction(1)}
        one["count/persistentvolumeclaims"] = Fraction(1)
        one["requests.storage"] = max(Fraction(0), quantity(storage)) if storage else Fraction(0)
        storage_class = spec.get("storageClassName")
        if storage_class:
            one[STORAGE_CLASS.format(storage_class, "persistentvolumeclaims")] = Fraction(1)
            one[STORAGE_CLASS.format(storage_class, "requests.storage")] = one["requests.storage"]
        out = _plus(out, one)
    return out


@dataclass(frozen=True)
class _Replica:
    usage: Usage
    best_effort: bool
    priority: str


def _replica(
    requirements: Mapping[str, Any] | None, template: Mapping[str, Any] | None
) -> _Replica:
    """One replica: `pods`, `count/pods`, its requests (the larger of the binding's and the
    template pod's), the pod's limits, its claims."""
    requests = {
        r: max(Fraction(0), quantity(v))
        for r, v in ((requirements or {}).get("resourceRequest") or {}).items()
    }
    limits: Usage = {}
    pod = _pod_template(template) if template is not None else None
    if pod is not None:
        requests = _greater(requests, pod_charge(pod, "requests"))
        limits = pod_charge(pod, "limits")
    usage: Usage = {"pods": Fraction(1), "count/pods": Fraction(1)}
    for r, q in requests.items():
        usage[f"requests.{r}"] = q
        if r in BARE:
            usage[r] = q
    for r, q in limits.items():
        usage[f"limits.{r}"] = q
    usage = _plus(usage, claims(template))
    best_effort = not any(d.get(r) for d in (requests, limits) for r in ("cpu", "memory"))
    return _Replica(usage, best_effort, (requirements or {}).get("priorityClassName") or "")


# --- where Karmada renders the binding --------------------------------------------------------


def rendered(spec: Mapping[str, Any]) -> dict[str, int]:
    """Cluster -> replicas of every Work Karmada's binding controller renders (docs' cluster
    table)."""
    scheduled: dict[str, int] = {}
    for entry in spec.get("clusters") or []:
        scheduled[entry["name"]] = scheduled.get(entry["name"], 0) + _nonneg(entry.get("replicas"))
    required: dict[str, int] = {}
    for snapshot in spec.get("requiredBy") or []:
        for entry in snapshot.get("clusters") or []:
            required.setdefault(entry["name"], _nonneg(entry.get("replicas")))
    targets = {**{k: v for k, v in required.items() if k not in scheduled}, **scheduled}
    kept: dict[str, int] = {}
    for task in spec.get("gracefulEvictionTasks") or []:
        if task.get("purgeMode") in NOT_RENDERED:
            continue
        n = task.get("replicas")
        kept.setdefault(task["fromCluster"], _nonneg(spec.get("replicas") if n is None else n))
    return {**{k: v for k, v in kept.items() if k not in targets}, **targets}


def _queued(binding: Mapping[str, Any]) -> bool:
    spec = binding["spec"]
    annotations = binding["metadata"].get("annotations") or {}
    anywhere = spec.get("clusters") or spec.get("gracefulEvictionTasks") or spec.get("requiredBy")
    suspended = (spec.get("suspension") or {}).get("scheduling") is True
    return bool(annotations.get("quota.karmada.io/queued-by")) and suspended and not anywhere


def charge(binding: Mapping[str, Any], template: Mapping[str, Any] | None = None) -> Charged:
    """The binding's charge by docs/charging.md, with its resource template (the object its
    `spec.resource` names) when one is given; ValueError on an unreadable quantity."""
    spec = binding["spec"]
    resource = spec["resource"]
    kind, group = resource["kind"], _group(resource["apiVersion"])
    if not resource.get("resourceVersion"):
        template = None  # a binding made by hand is charged from its own fields
    objects = object_names(resource["apiVersion"], kind)
    if _queued(binding):
        return Charged({}, False, False, "")
    if (group, kind) not in RUN_REPLICAS:
        return Charged(objects, False, False, "", uncounted=(group, kind) not in RUN_NO_PODS)
    components = spec.get("components") or []
    clusters = rendered(spec)
    if len(components) > 1:
        copy: Usage = {}
        some, best_effort = False, True
        priority = (spec.get("replicaRequirements") or {}).get("priorityClassName") or ""
        for comp in components:
            n = _nonneg(comp.get("replicas"))
            one = _replica(comp.get("replicaRequirements"), None)
            copy = _plus(copy, _times(one.usage, n))
            if n:
                some, best_effort = True, best_effort and one.best_effort
            priority = priority or one.priority
        copies = max(1, len(spec.get("clusters") or []) + len(set(clusters) - _scheduled(spec)))
        return Charged(_plus(objects, _times(copy, copies)), some, some and best_effort, priority)
    own = components[0] if components else spec
    replicas = _nonneg(own.get("replicas"))
    if template is not None and replicas == 0 and _template_replicas(template):
        # Karmada does not revise a member's replicas: each runs the template's own (once
        # before it is placed anywhere)
        clusters = dict.fromkeys(clusters or [""], _template_replicas(template))
    one = _replica(own.get("replicaRequirements"), template)
    everywhere = sum(n + _surge(template, n) for n in clusters.values())
    r = max(replicas + _surge(template, replicas), everywhere)
    total = _plus(objects, _times(one.usage, r)) if r else objects
    return Charged(total, r > 0, r > 0 and one.best_effort, one.priority)


def _scheduled(spec: Mapping[str, Any]) -> set[str]:
    return {entry["name"] for entry in spec.get("clusters") or []}


def matches(quota_spec: Mapping[str, Any], c: Charged) -> bool:
    """Whether the quota's scopes (`scopes`, `scopeSelector`) select the binding."""
    exprs = [{"scopeName": s, "operator": "Exists"} for s in quota_spec.get("scopes") or []]
    exprs += (quota_spec.get("scopeSelector") or {}).get("matchExpressions") or []
    if not exprs:
        return True
    if not c.has_replicas:
        return False
    for e in exprs:
        scope, op, values = e["scopeName"], e["operator"], e.get("values") or []
        if scope == "BestEffort":
            ok = c.best_effort
        elif scope == "NotBestEffort":
            ok = not c.best_effort
        elif op == "Exists":
            ok = c.priority_class != ""
        elif op == "DoesNotExist":
            ok = c.priority_class == ""
        else:
            ok = (c.priority_class in values) == (op == "In")
        if not ok:
            return False
    return True


def charges(
    bindings: Iterable[Mapping[str, Any]],
    templates: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
) -> list[Charged]:
    """The charge of each binding, with its template from `templates` by (kind, namespace,
    name) when there; an unreadable one is charged as zero (the controller counts a binding it
    cannot read as nothing, and says so in the quota's status)."""
    out = []
    for b in bindings:
        r = b["spec"]["resource"]
        template = (templates or {}).get((r["kind"], r.get("namespace", ""), r["name"]))
        try:
            out.append(charge(b, template))
        except ValueError:
            continue
    return out


def total(quota_spec: Mapping[str, Any], charged: Sequence[Charged], resource: str) -> Fraction:
    """Σ `resource` over the charges the quota's scopes select."""
    return sum(
        (c.total.get(resource, Fraction(0)) for c in charged if matches(quota_spec, c)),
        Fraction(0),
    )
