"""What one replica of a resource template runs, as Kubernetes charges a pod (pure).

A ResourceBinding's `replicaRequirements` is Karmada's estimate of one replica: the containers'
requests summed, the init containers' maximum beside them. Kubernetes charges a pod more
(`PodRequests`, k8s.io/component-helpers/resource): restartable init containers (sidecars) run
beside the containers and add to them, an init container must fit beside the sidecars started
before it, the pod overhead (RuntimeClass) is added, and pod-level `spec.resources` (KEP-2837)
set the pod's total. A Deployment's rollout also runs up to `maxSurge` pods per member beyond its
replicas until the new ones are ready (`surge`), which Kubernetes' quota would refuse when they
are created; they are charged up front. A StatefulSet's member also creates claims for each
replica from its `volumeClaimTemplates` (`claims`), charged as Kubernetes charges a claim.
Limits follow the same rules (`PodLimits`; the overhead is added only to a limit that is set),
and a binding does not carry them at all. So
what a replica costs is read from the pod template Karmada renders into every member: this
module finds it in the kinds Karmada's default interpreter knows and computes its requests and
limits.

A container's request defaults to its limit when it states none, as the API server defaults a
pod (Karmada copies limits into requests the same way). Pod-level values are taken as a
maximum with the containers' aggregate (the API server requires them to be at least that), so
a pod-level resource Kubernetes does not honour yet is never charged below its containers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from karmadaquota import resources
from karmadaquota.quantity import Quantity
from karmadaquota.resources import ResourceList

# (group, kind) -> the path of the pod spec in the template. DaemonSets and CronJobs are not
# here: Karmada cannot count their replicas (kinds.UNCOUNTABLE). A kind the platform team
# declared (kinds.Declared) gives its own paths.
POD_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("", "Pod"): ("spec",),
    ("", "ReplicationController"): ("spec", "template", "spec"),
}
# Resources a quota may limit (Kubernetes: limits.cpu, limits.memory, limits.ephemeral-storage).
LIMITED = ("cpu", "memory", "ephemeral-storage")
LIMITS_PREFIX = "limits."
RETAIN_REPLICAS = "resourcetemplate.karmada.io/retain-replicas"
DEFAULT_MAX_SURGE = "25%"  # a Deployment's spec.strategy.rollingUpdate.maxSurge by default
# a template: (group, kind, namespace, name)
TemplateKey = tuple[str, str, str, str]
_ZERO = Quantity.zero()


@dataclass(frozen=True, slots=True)
class PodCharge:
    """One replica of a template: its requests and limits (bare names), and the limited
    resources some container states no limit for (a quota limiting them refuses the pod)."""

    requests: ResourceList
    limits: ResourceList
    unlimited: frozenset[str]
    # a Deployment's maxSurge values (an int or "N%"; the set of several versions): a rollout
    # runs that many pods per member beyond its replicas until the new ones are ready
    surges: frozenset[str] = frozenset()
    # the template's own replicas (`replicas_of`), which Karmada renders into every member
    # while the binding has none (charge.unrevised); not part of what one replica costs
    replicas: int = field(default=0, compare=False)
    # labelled `resourcetemplate.karmada.io/retain-replicas: "true"`: Karmada keeps each
    # member's own replicas (a member HPA's), which no charge counts (charge.uncounted)
    retained: bool = False
    # the claims a StatefulSet's member creates for each replica from its volumeClaimTemplates,
    # under the quota names Kubernetes charges a claim (`claims`)
    claims: ResourceList = field(default_factory=dict)
    # (priority class, best effort) of the pod (the set of several versions): which scoped
    # quotas Kubernetes charges it in. A template edit that changes them moves its pods into
    # other quotas, so it is charged there (`grows`), and the binding matches each
    # (scopes.BindingTraits.others)
    scopes: frozenset[tuple[str, bool]] = frozenset()


# Kinds whose replicas their `scale` subresource sets: (group, plural) -> kind
SCALED: dict[tuple[str, str], str] = {
    ("apps", "deployments"): "Deployment",
    ("apps", "statefulsets"): "StatefulSet",
    ("apps", "replicasets"): "ReplicaSet",
    ("", "replicationcontrollers"): "ReplicationController",
}


def replicas_of(obj: Mapping[str, Any], path: tuple[str, ...] | None = None) -> int | None:
    """The replicas a template asks for, as Karmada's interpreter reads them: `spec.replicas`
    of a Deployment, StatefulSet or ReplicaSet (1 when absent: the API server's default) or of
    their `autoscaling/v1` Scale (0 when absent: omitted when zero), a Job's
    `spec.parallelism` (default 1), a declared kind's at its `path` (0 when absent); None for a
    kind without replicas or a value that is not a count."""
    kind = str(obj.get("kind") or "")
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if path is not None:
        value = _at(obj, path)
        value = 0 if value is None else value
    elif kind in SCALED.values():
        value = spec.get("replicas", 1)
    elif kind == "Scale":
        value = spec.get("replicas", 0)
    elif kind == "Job":
        value = spec.get("parallelism", 1)
    else:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pod_spec(
    template: Mapping[str, Any], path: tuple[str, ...] | None = None
) -> Mapping[str, Any] | None:
    """The pod spec of a template whose kind has one (at `path` for a declared kind); None
    otherwise."""
    group = str(template.get("apiVersion") or "").rpartition("/")[0]
    path = path or POD_SPEC_PATHS.get((group, str(template.get("kind") or "")))
    if path is None:
        return None
    node = _at(template, path)
    return node if isinstance(node, Mapping) else None


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _own(container: Mapping[str, Any], part: str, where: str) -> ResourceList:
    res = container.get("resources") or {}
    raw = dict(res.get(part) or {})
    if part == "requests":
        # a request defaults to the limit (the API server's defaulting of a pod)
        for name, value in (res.get("limits") or {}).items():
            raw.setdefault(name, value)
    return resources.parse_resource_list(raw, f"{where}.resources.{part}")


def _aggregate(spec: Mapping[str, Any], part: str) -> ResourceList:
    """Kubernetes' AggregateContainerRequests / AggregateContainerLimits."""
    total: ResourceList = {}
    for i, c in enumerate(spec.get("containers") or []):
        total = resources.add(total, _own(c, part, f"spec.containers[{i}]"))
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        own = _own(c, part, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            total = resources.add(total, own)
            sidecars = resources.add(sidecars, own)
            need = sidecars
        else:
            need = resources.add(own, sidecars)
        init_max = resources.maximum(init_max, need)
    return resources.maximum(total, init_max)


def pod_requests(spec: Mapping[str, Any]) -> ResourceList:
    """Kubernetes' PodRequests. Raises QuantityError naming the field on a bad quantity."""
    reqs = resources.maximum(_aggregate(spec, "requests"), _own(spec, "requests", "spec"))
    overhead = resources.parse_resource_list(spec.get("overhead") or {}, "spec.overhead")
    return resources.add(reqs, overhead)


def pod_limits(spec: Mapping[str, Any]) -> ResourceList:
    """Kubernetes' PodLimits: the overhead is added to the limits that are set."""
    limits = resources.maximum(_aggregate(spec, "limits"), _own(spec, "limits", "spec"))
    overhead = resources.parse_resource_list(spec.get("overhead") or {}, "spec.overhead")
    return {name: q + overhead[name] if name in overhead else q for name, q in limits.items()}


def _unlimited(spec: Mapping[str, Any]) -> frozenset[str]:
    pod_level = (spec.get("resources") or {}).get("limits") or {}
    missing: set[str] = set()
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            stated = (c.get("resources") or {}).get("limits") or {}
            missing |= {r for r in LIMITED if r not in stated}
    return frozenset(r for r in missing if r not in pod_level)


def of_spec(spec: Mapping[str, Any]) -> PodCharge:
    """One pod's charge. Raises QuantityError naming the field on a bad quantity."""
    requests, limits = pod_requests(spec), pod_limits(spec)
    priority = spec.get("priorityClassName")
    scope = (priority if isinstance(priority, str) else "", best_effort(requests, limits))
    return PodCharge(requests, limits, _unlimited(spec), scopes=frozenset({scope}))


def requests_nothing(requests: Mapping[str, Quantity]) -> bool:
    """No request but `pods`: the requests side of BestEffort, for a pod and a binding alike."""
    return all(q.is_zero for name, q in requests.items() if name != "pods")


def best_effort(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]) -> bool:
    """Whether a pod is BestEffort as a binding's charge judges it (`charge._single`): no
    request but pods, no cpu or memory limit."""
    return requests_nothing(requests) and not any(n in limits for n in ("cpu", "memory"))


def of_template(
    template: Mapping[str, Any],
    paths: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
) -> PodCharge | None:
    """One replica of a template; None when its kind has no pod template this module knows;
    `paths`: a declared kind's (pod spec, replicas) paths (kinds.Kinds.pod_paths). Raises
    QuantityError naming the field on a bad quantity."""
    spec = pod_spec(template, paths[0] if paths else None)
    if spec is None:
        return None
    return replace(
        of_spec(spec),
        surges=_surges(template),
        replicas=replicas_of(template, paths[1] if paths else None) or 0,
        retained=retains_replicas(template),
        claims=claims(template),
    )


PVCS = "persistentvolumeclaims"
COUNT_PVCS = "count/persistentvolumeclaims"
REQUESTS_STORAGE = "requests.storage"
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
CLAIM_NAMES = frozenset({PVCS, COUNT_PVCS, REQUESTS_STORAGE})


def is_claim_name(name: str) -> bool:
    """A quota name a PersistentVolumeClaim is charged under (Kubernetes' claim evaluator)."""
    return name in CLAIM_NAMES or (
        STORAGE_CLASS_SUFFIX in name and name.rpartition("/")[2] in (PVCS, REQUESTS_STORAGE)
    )


def claims(template: Mapping[str, Any]) -> ResourceList:
    """What the claims of one replica of a StatefulSet cost, as Kubernetes charges a claim:
    one `persistentvolumeclaims` and `count/persistentvolumeclaims` each, its
    `requests.storage`, and both again under `<class>.storageclass.storage.k8s.io/` when the
    template names its class (one a member's default class gives it is the member's to count:
    its guard). Raises QuantityError naming the field on a bad quantity."""
    if template.get("kind") != "StatefulSet":
        return {}
    out: ResourceList = {}
    one = Quantity.from_int(1)
    entries = (template.get("spec") or {}).get("volumeClaimTemplates") or []
    for i, claim in enumerate(entries if isinstance(entries, list) else []):
        spec = claim.get("spec") if isinstance(claim, Mapping) else None
        spec = spec if isinstance(spec, Mapping) else {}
        where = f"spec.volumeClaimTemplates[{i}].spec.resources.requests"
        requests = resources.parse_resource_list(
            ((spec.get("resources") or {}).get("requests") or {}), where
        )
        storage = requests.get("storage", _ZERO)
        cost: ResourceList = {PVCS: one, COUNT_PVCS: one, REQUESTS_STORAGE: storage}
        klass = spec.get("storageClassName")
        if isinstance(klass, str) and klass:
            prefix = klass + STORAGE_CLASS_SUFFIX
            cost |= {prefix + PVCS: one, prefix + REQUESTS_STORAGE: storage}
        out = resources.add(out, cost)
    return out


def retains_replicas(obj: Mapping[str, Any]) -> bool:
    """Whether Karmada keeps the members' own replicas of this workload (its
    `resourcetemplate.karmada.io/retain-replicas` label is "true")."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(RETAIN_REPLICAS) == "true"


def _surges(template: Mapping[str, Any]) -> frozenset[str]:
    """A Deployment's maxSurge (Kubernetes' default 25%), none with the Recreate strategy; other
    kinds never run a pod beyond their replicas."""
    if template.get("kind") != "Deployment":
        return frozenset()
    strategy = (template.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return frozenset()
    value = (strategy.get("rollingUpdate") or {}).get("maxSurge", DEFAULT_MAX_SURGE)
    return frozenset({str(value)})


def surge(values: frozenset[str], replicas: int) -> int:
    """The most pods a rollout of `replicas` adds (Kubernetes resolves a percentage of the
    replicas rounded up); a value that is not a count or a percentage counts as 100%."""
    most = 0
    for v in values:
        try:
            n = -(-int(v[:-1]) * replicas // 100) if v.endswith("%") else int(v)
        except ValueError:
            n = replicas
        most = max(most, n)
    return most if replicas > 0 else 0


def most(pods: Iterable[PodCharge | None]) -> PodCharge | None:
    """The most of several versions of one replica: each request and limit at its largest, a
    limit missing from any of them missing (None when none is known)."""
    known = [p for p in pods if p is not None]
    if not known:
        return None
    requests: ResourceList = {}
    limits: ResourceList = {}
    claimed: ResourceList = {}
    for p in known:
        requests = resources.maximum(requests, p.requests)
        limits = resources.maximum(limits, p.limits)
        claimed = resources.maximum(claimed, p.claims)
    return PodCharge(
        requests,
        limits,
        frozenset().union(*(p.unlimited for p in known)),
        frozenset().union(*(p.surges for p in known)),
        max(p.replicas for p in known),
        any(p.retained for p in known),
        claimed,
        frozenset().union(*(p.scopes for p in known)),
    )


def limit_names(limits: Mapping[str, Any]) -> ResourceList:
    """Per-replica limits (bare names) -> the quota names they are charged under."""
    return {LIMITS_PREFIX + n: q for n, q in limits.items() if n in LIMITED}


def grows(new: PodCharge, old: PodCharge) -> bool:
    """Whether `new` requests or limits more of anything than `old`, limits less of it, may
    surge otherwise in a rollout, has its members' replicas kept by Karmada, or runs pods of
    another priority class or QoS (they fall under other scoped quotas, charged in full)."""
    return (
        not new.scopes <= old.scopes
        or _more(new.requests, old.requests)
        or _more(new.limits, old.limits)
        or _more(new.claims, old.claims)
        or not new.unlimited <= old.unlimited
        or not new.surges <= old.surges
        or (new.retained and not old.retained)
    )


def _more(new: ResourceList, old: ResourceList) -> bool:
    return any(q > old.get(name, _ZERO) for name, q in new.items())
