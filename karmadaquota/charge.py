"""What one ResourceBinding costs (docs/charging.md): the contract of webhook and controller.

R = max(spec.replicas, Σ spec.clusters[].replicas): the intent before scheduling and the real
footprint after it (Duplicated placement lists `replicas` in every cluster). The clusters are
every one Karmada's binding controller renders a Work into: `spec.clusters`, then the clusters
of `spec.requiredBy` not among them (with their replicas), then those under a graceful
eviction task that are in neither (their Work keeps running until the task ends: the task's
replicas, or `spec.replicas` when it names none), except a task purged `Directly` (Karmada
deletes its Work at once and renders the binding's new placement only once it is gone). What the
binding costs without each such evicted cluster is kept beside (`Charge.evicted`): a quota that
releases a cluster Karmada reports not Ready (karmadaquota.evictions) charges that
(`released`). A binding with more than one component charges
Σ component replicas × component requests once per target cluster (Karmada places a
multi-component workload whole); a single component is charged like the legacy fields it
replaces.

A Deployment's member runs up to `maxSurge` more pods during a rollout (`pod_template.surge`):
each cluster's replicas are charged with them, as R is. One replica costs what the binding's
`replicaRequirements` say, or more where the resource template's pod (`pod_template.PodCharge`,
given by the caller that read the template) costs more as Kubernetes charges a pod: sidecars,
pod overhead, pod-level resources; its limits are charged as limits.cpu/memory/ephemeral-storage,
and a StatefulSet's claim templates as the claims each replica's member creates.
The scoped quotas it is charged in are those of its own priority class and QoS and those of each
template version's pod (`PodCharge.scopes`: a template edit that moves its pods to another class
or QoS is charged there until the binding moves too; `BindingTraits.others`).
A template never lowers a charge: a binding whose template is unknown or unreadable is charged
from its own fields, and a quota that limits a resource then refuses it
(`Charge.missing_limits`), as it refuses a pod without that limit.

Which kinds are charged pods is an allow-list (`karmadaquota.kinds`): a kind known to run no
pods is charged its own object and never replicas, wherever Karmada renders it (a dependency
binding's `requiredBy` carries its owner's replicas); a kind whose pods no charge counts (a
DaemonSet, a ReplicationController, an undeclared custom resource) is named in
`Charge.uncounted` (evaluate refuses it against a quota tracking pods or compute that the
members do not enforce), and so is a pod-running binding whose rendered resources stay in the
members after it is deleted (`preserveResourcesOnDeletion`).

A binding with no replicas of its own (`spec.replicas` 0) is one whose replicas Karmada's
binding controller does not revise: Karmada v1.16 revises a member's replicas only when the
binding has some, v1.17 also when it carries `replicaRequirements` or components. It then
renders the resource template's own replicas into every target cluster (`unrevised`), so a
template scaled up from zero is charged that way until its binding carries the replicas.

Negative requests and replica counts would *lower* usage if charged as they are, so a hostile
value could buy room for others (a binding with `cpu: -4` followed by one with `cpu: 3` against a
quota of 2). Each is charged as zero instead and named in `Charge.invalid` in Kubernetes' own
validation wording: admission refuses such a binding, and the controller, which must still count
bindings created before the webhook was installed, charges the rest of it and reports it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from karmadaquota import pod_template, queued, resources
from karmadaquota.api import GracefulEvictionTask, ResourceBinding, ResourceBindingSpec
from karmadaquota.kinds import BUILTIN, Kinds, Runs
from karmadaquota.pod_template import PodCharge
from karmadaquota.quantity import Quantity
from karmadaquota.resources import ResourceList, count_name
from karmadaquota.scopes import BindingTraits

# Bare resource names whose request a quota tracking them requires (as Kubernetes for pods).
REQUIRED_REQUESTS = ("cpu", "memory")

# Core kinds that Kubernetes also counts under a legacy quota name.
_LEGACY_COUNTS = {
    "Service": "services",
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ReplicationController": "replicationcontrollers",
    "ResourceQuota": "resourcequotas",
}

_ONE = Quantity.from_int(1)
_ZERO = Quantity.zero()


@dataclass(frozen=True, slots=True)
class Charge:
    """The usage of one binding, in every quota resource name it can be charged under."""

    total: ResourceList
    per_cluster: Mapping[str, ResourceList]
    traits: BindingTraits
    # Bare names (cpu, memory) that a replica-carrying part of the binding does not request.
    missing_requests: frozenset[str] = field(default_factory=frozenset)
    # Field errors for values charged as zero because they were negative, e.g.
    # 'spec.replicas: Invalid value: -1: must be greater than or equal to 0'.
    invalid: tuple[str, ...] = ()
    # What Karmada may run that this charge does not count, each a field error, e.g.
    # 'spec.resource: DaemonSet.apps: Karmada cannot count its replicas'.
    uncounted: tuple[str, ...] = ()
    # Limited names (cpu, memory, ephemeral-storage) a replica states no limit for, or all of
    # them when the pod template is unknown: a quota tracking limits.<name> refuses it.
    missing_limits: frozenset[str] = field(default_factory=frozenset)
    # cluster -> the total without its graceful eviction task, for each cluster the binding is
    # rendered into only by such a task (`released`)
    evicted: Mapping[str, ResourceList] = field(default_factory=dict)
    # the charge for a quota that releases evicted replicas (api.KarmadaQuotaSpec.
    # releases_evicted), where some cluster of `evicted` is released now (`with_released`)
    if_released: Charge | None = None


def with_released(c: Charge, clusters: Collection[str]) -> Charge:
    """`c` knowing which clusters' evicted replicas are released now (the webhook's view)."""
    r = released(c, clusters)
    return c if r is c else replace(c, if_released=r)


def released(c: Charge, clusters: Collection[str]) -> Charge:
    """The charge when the eviction tasks of `clusters` are not charged
    (karmadaquota.evictions): for one such cluster its total without that task; for several,
    the least of those totals per name — at least the exact figure (each task dropped alone
    lowers no more than all of them together), so stricter, never looser."""
    hit = sorted(name for name in c.evicted if name in clusters)
    if not hit:
        return c
    names = set().union(*(c.evicted[name] for name in hit))
    total = {
        n: min((c.evicted[name].get(n, _ZERO) for name in hit), key=lambda q: q.nanos)
        for n in names
    }
    per_cluster = {k: v for k, v in c.per_cluster.items() if k not in hit}
    return replace(c, total=total, per_cluster=per_cluster, evicted={}, if_released=None)


def _per_replica(requests: Mapping[str, Quantity], replicas: int) -> ResourceList:
    """requests × replicas under every quota name they can be charged as, plus pods."""
    out: ResourceList = {}
    if replicas <= 0:
        return out
    # a "pods" request is no chargeable request (to_quota_names drops it): pods counts replicas,
    # and so does count/pods (Kubernetes' pod evaluator charges both, one per pod)
    for name, q in resources.to_quota_names(requests, None).items():
        out[name] = q * replicas
    out[resources.PODS] = out[resources.COUNT_PODS] = Quantity.from_int(replicas)
    return out


_NON_NEGATIVE = "must be greater than or equal to 0"


def _requests(
    raw: Mapping[str, str | int] | None, field_path: str, invalid: list[str]
) -> ResourceList:
    """Parsed requests; a negative one is charged as zero and reported in `invalid`."""
    parsed = resources.parse_resource_list(raw or {}, field_path)
    for name, q in parsed.items():
        if q.sign < 0:
            invalid.append(f'{field_path}[{name}]: Invalid value: "{q}": {_NON_NEGATIVE}')
            parsed[name] = _ZERO
    return parsed


def _replicas(value: int, field_path: str, invalid: list[str]) -> int:
    """A replica count; a negative one is charged as zero and reported in `invalid`."""
    if value < 0:
        invalid.append(f"{field_path}: Invalid value: {value}: {_NON_NEGATIVE}")
        return 0
    return value


def _missing(requests: Mapping[str, Quantity]) -> set[str]:
    # A "requests.cpu" key is charged as cpu (resources.to_quota_names), so it specifies cpu.
    given = {name.removeprefix(resources.REQUESTS_PREFIX) for name in requests}
    return {r for r in REQUIRED_REQUESTS if r not in given}


def charge(
    binding: ResourceBinding, pod: PodCharge | None = None, kinds: Kinds = BUILTIN
) -> Charge:
    """The binding's charge; `pod`: one replica of its resource template as Kubernetes charges
    it (karmadaquota.pod_template), None when unknown; `kinds`: the declared kinds besides the
    built-in ones (karmadaquota.kinds). Raises QuantityError naming the field on a bad quantity.

    A binding queued by a quota (`queued.queued_by`) is charged nothing: it keeps its traits
    (scopes), its missing requests and its invalid values (refused all the same), so that the
    update that admits it is charged in full by `evaluate`.
    """
    full = full_charge(binding, pod, kinds)
    return queued_charge(full) if queued.queued_by(binding) else full


def queued_charge(full: Charge) -> Charge:
    """What a queued binding is charged: nothing, with everything else of its charge kept."""
    return replace(full, total={}, per_cluster={}, evicted={}, if_released=None)


def full_charge(
    binding: ResourceBinding, pod: PodCharge | None = None, kinds: Kinds = BUILTIN
) -> Charge:
    """What the binding costs once admitted, queued or not (the queue's fit checks)."""
    found = _full(binding, pod, kinds)
    evicted = _evicted_only(binding.spec)
    if not evicted:
        return found
    return replace(
        found,
        evicted={name: _full(_without_task(binding, name), pod, kinds).total for name in evicted},
    )


def _evicted_only(spec: ResourceBindingSpec) -> list[str]:
    """The clusters the binding is rendered into only by a graceful eviction task."""
    placed = {c.name for c in spec.clusters}
    placed.update(c.name for s in spec.requiredBy for c in s.clusters)
    return sorted({t.fromCluster for t in spec.gracefulEvictionTasks if _rendered(t)} - placed)


def _without_task(binding: ResourceBinding, cluster: str) -> ResourceBinding:
    spec = binding.spec
    tasks = [t for t in spec.gracefulEvictionTasks if t.fromCluster != cluster]
    return binding.model_copy(
        update={"spec": spec.model_copy(update={"gracefulEvictionTasks": tasks})}
    )


# Karmada renders no Work for a task purged so (`ObtainBindingSpecExistingClusters`): it deletes
# the evicted cluster's Work and renders the new placement once that Work is gone
_UNRENDERED_PURGE_MODES = frozenset({"Directly", "Immediately"})


def _rendered(task: GracefulEvictionTask) -> bool:
    return task.purgeMode not in _UNRENDERED_PURGE_MODES


def _full(binding: ResourceBinding, pod: PodCharge | None, kinds: Kinds) -> Charge:
    runs = kinds.runs(binding.spec.resource.apiVersion, binding.spec.resource.kind)
    if runs is Runs.NOTHING:
        binding, pod = without_replicas(binding), None
    elif pod is not None and pod.replicas:
        binding = unrevised(binding, pod.replicas)
    spec = binding.spec
    objects: ResourceList = {count_name(spec.resource.apiVersion, spec.resource.kind): _ONE}
    # a propagated Pod is counted where it runs, per replica, as pods are (`_per_replica`)
    objects.pop(resources.COUNT_PODS, None)
    legacy = _LEGACY_COUNTS.get(spec.resource.kind)
    if legacy and spec.resource.apiVersion == "v1":
        objects[legacy] = _ONE
    found = (
        _multi_component(spec, objects) if len(spec.components) > 1 else _single(spec, objects, pod)
    )
    uncounted = _uncounted(spec, kinds, runs)
    if pod is not None and pod.retained:
        uncounted += (
            f"metadata.labels: {pod_template.RETAIN_REPLICAS}: Karmada keeps the members' own "
            "replicas (a member's HorizontalPodAutoscaler)",
        )
    return replace(found, uncounted=uncounted) if uncounted else found


def _uncounted(spec: ResourceBindingSpec, kinds: Kinds, runs: Runs) -> tuple[str, ...]:
    out: list[str] = []
    if runs is Runs.UNKNOWN:  # off the allow-list (looked up once, by full_charge)
        out.append(kinds.uncounted(spec.resource.apiVersion, spec.resource.kind))
    # what a kind that runs no pods leaves behind runs nothing either
    if spec.preserveResourcesOnDeletion and runs is not Runs.NOTHING:
        out.append(
            "spec.preserveResourcesOnDeletion: true: what it runs stays in the members after "
            "the binding is deleted"
        )
    return tuple(out)


def _placed(spec: ResourceBindingSpec, invalid: list[str]) -> dict[str, int]:
    """Replicas per cluster Karmada renders the binding into (the module docstring): a
    cluster listed twice in `spec.clusters` counts twice, as its sum."""
    out: dict[str, int] = {}
    for i, c in enumerate(spec.clusters):
        out[c.name] = out.get(c.name, 0) + _replicas(
            c.replicas, f"spec.clusters[{i}].replicas", invalid
        )
    scheduled = set(out)
    for i, snapshot in enumerate(spec.requiredBy):
        for j, c in enumerate(snapshot.clusters):
            if c.name not in scheduled and c.name not in out:
                out[c.name] = _replicas(
                    c.replicas, f"spec.requiredBy[{i}].clusters[{j}].replicas", invalid
                )
    for i, task in enumerate(spec.gracefulEvictionTasks):
        if task.fromCluster in out or not _rendered(task):
            continue  # rendered again for its place in spec.clusters / requiredBy
        kept = task.replicas if task.replicas is not None else spec.replicas
        out[task.fromCluster] = _replicas(
            kept, f"spec.gracefulEvictionTasks[{i}].replicas", invalid
        )
    return out


def _single(spec: ResourceBindingSpec, objects: ResourceList, pod: PodCharge | None) -> Charge:
    invalid: list[str] = []
    if spec.components:
        comp = spec.components[0]
        reqs_model = comp.replicaRequirements
        path = "spec.components[0]"
        replicas = _replicas(comp.replicas, f"{path}.replicas", invalid)
    else:
        reqs_model = spec.replicaRequirements
        path = "spec"
        replicas = _replicas(spec.replicas, "spec.replicas", invalid)
    requests = _requests(
        reqs_model.resourceRequest if reqs_model else None,
        f"{path}.replicaRequirements.resourceRequest",
        invalid,
    )
    limits: ResourceList = {}
    claims: ResourceList = {}
    if pod is not None:
        # never less than the binding says; as Kubernetes charges the pod when it is more
        bare = {n.removeprefix(resources.REQUESTS_PREFIX): q for n, q in requests.items()}
        requests = resources.maximum(bare, pod.requests)
        limits = pod_template.limit_names(pod.limits)
        claims = pod.claims
    surges = pod.surges if pod is not None else frozenset()

    def pods(n: int) -> int:
        """A member's replicas and the pods its rollouts may add (pod_template.surge)."""
        return n + pod_template.surge(surges, n)

    placed = {name: pods(n) for name, n in _placed(spec, invalid).items()}
    total_replicas = max(pods(replicas), sum(placed.values()))

    def usage(n: int) -> ResourceList:
        per_replica = resources.add(limits, claims)
        return resources.add(
            objects,
            resources.add(
                _per_replica(requests, n), resources.multiply(per_replica, n) if n > 0 else {}
            ),
        )

    total = usage(total_replicas)
    per_cluster = {name: usage(n) for name, n in placed.items()}
    has_replicas = total_replicas > 0
    best_effort = pod_template.requests_nothing(requests) and not any(
        n in limits for n in ("limits.cpu", "limits.memory")
    )
    own = (reqs_model.priorityClassName if reqs_model else "", has_replicas and best_effort)
    traits = BindingTraits(
        has_replicas=has_replicas,
        best_effort=own[1],
        priority_class=own[0],
        # the template's pods fall in the scoped quotas of their own class and QoS, whatever
        # the binding says (Karmada renders the template as it is now): charged there too
        others=pod.scopes - {own} if pod is not None and has_replicas else frozenset(),
    )
    missing = frozenset(_missing(requests)) if has_replicas else frozenset()
    unlimited = pod.unlimited if pod is not None else frozenset(pod_template.LIMITED)
    return Charge(
        total,
        per_cluster,
        traits,
        missing,
        tuple(invalid),
        missing_limits=unlimited if has_replicas else frozenset(),
    )


def _multi_component(spec: ResourceBindingSpec, objects: ResourceList) -> Charge:
    invalid: list[str] = []
    one_copy: ResourceList = {}
    missing: set[str] = set()
    best_effort = True
    has_replicas = False
    priority = spec.replicaRequirements.priorityClassName if spec.replicaRequirements else ""
    _replicas(spec.replicas, "spec.replicas", invalid)  # not charged here, but still refused
    for i, comp in enumerate(spec.components):
        path = f"spec.components[{i}]"
        reqs_model = comp.replicaRequirements
        replicas = _replicas(comp.replicas, f"{path}.replicas", invalid)
        requests = _requests(
            reqs_model.resourceRequest if reqs_model else None,
            f"{path}.replicaRequirements.resourceRequest",
            invalid,
        )
        one_copy = resources.add(one_copy, _per_replica(requests, replicas))
        if replicas > 0:
            has_replicas = True
            missing |= _missing(requests)
            best_effort = best_effort and pod_template.requests_nothing(requests)
        if not priority and reqs_model is not None:
            priority = reqs_model.priorityClassName
    placed = _placed(spec, invalid)
    # a cluster listed twice in spec.clusters is charged twice
    copies = max(1, len(spec.clusters) + len(set(placed) - {c.name for c in spec.clusters}))
    total = resources.add(objects, resources.multiply(one_copy, copies))
    per_cluster = {name: resources.add(objects, one_copy) for name in placed}
    traits = BindingTraits(
        has_replicas=has_replicas,
        best_effort=has_replicas and best_effort,
        priority_class=priority,
    )
    return Charge(
        total,
        per_cluster,
        traits,
        frozenset(missing) if has_replicas else frozenset(),
        tuple(invalid),
        missing_limits=frozenset(pod_template.LIMITED) if has_replicas else frozenset(),
    )


def unrevised(binding: ResourceBinding, replicas: int) -> ResourceBinding:
    """The binding as Karmada renders it into the members while its `spec.replicas` is 0 and
    its template asks for `replicas`: every target cluster runs the template's replicas (v1.17
    revises them to the cluster's, 0, when the binding carries replicaRequirements; v1.16
    never does, so this is the most either renders)."""
    if binding.spec.replicas != 0 or replicas <= 0:
        return binding
    spec = binding.spec.model_copy(
        update={"replicas": replicas, **_in_every_cluster(binding.spec, replicas)}
    )
    return binding.model_copy(update={"spec": spec})


@dataclass(frozen=True)
class TemplateChange:
    """What a resource template's write costs against its binding (the template gate)."""

    # while the binding has no replicas, Karmada renders the template's own in every member
    revised: bool
    new: Charge  # the binding as Karmada renders it once this template version is among its
    old: Charge  # the binding as it is charged now


def template_change(
    binding: ResourceBinding,
    charged: PodCharge | None,
    written: PodCharge | None,
    replicas: int,
    old_replicas: int,
    kinds: Kinds = BUILTIN,
) -> TemplateChange:
    """The charge of `binding` before and after a template write: `charged` is one replica as
    it is charged now (the most of the template versions from the one it names on), `written`
    the written version's (None: a scale, no pod), `replicas` what the template asks for now
    and `old_replicas` before the write (at least what it may run now: a scale the watch has
    not delivered yet)."""
    rendered = unrevised(binding, replicas)
    new = charge(rendered, pod_template.most([charged, written]), kinds)
    if charged is not None and old_replicas > charged.replicas:
        charged = replace(charged, replicas=old_replicas)
    return TemplateChange(rendered is not binding, new, charge(binding, charged, kinds))


def _in_every_cluster(spec: ResourceBindingSpec, replicas: int) -> dict[str, Any]:
    """`spec.clusters` and `spec.requiredBy` with `replicas` in each of their clusters."""
    return {
        "clusters": [c.model_copy(update={"replicas": replicas}) for c in spec.clusters],
        "requiredBy": [
            s.model_copy(
                update={
                    "clusters": [c.model_copy(update={"replicas": replicas}) for c in s.clusters]
                }
            )
            for s in spec.requiredBy
        ],
    }


def without_replicas(binding: ResourceBinding) -> ResourceBinding:
    """The binding of a kind that runs no pods as what it runs: its object in every cluster
    Karmada renders it into, no replicas there whatever its fields (or its `requiredBy`,
    which carries its owner's) say."""
    spec = binding.spec
    update = {
        "replicas": 0,
        "replicaRequirements": None,
        "components": [],
        **_in_every_cluster(spec, 0),
        "gracefulEvictionTasks": [
            t.model_copy(update={"replicas": 0}) for t in spec.gracefulEvictionTasks
        ],
    }
    return binding.model_copy(update={"spec": spec.model_copy(update=update)})
