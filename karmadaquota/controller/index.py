"""The controller's in-memory index of ResourceBindings: namespace -> uid -> compact usage.

Each binding is charged ONCE per event with the shared engine (`charge.charge`) and stored in a
compact form: the resource names as one interned tuple, the usage as exact nano-unit integers
aligned to those names (total and per target cluster), the scope traits, the generation (for
reservation pruning) and the resourceVersion (a queued binding's admission precondition).
Recomputing a quota then only adds integers; see `aggregate`.

Version order is the informer's job (`kube.informer`: one ordering rule for every kind); the
index stores what it is given. A deletion leaves a tombstone, so that a pending charge whose
binding was seen deleted is released at once (`deleted`); tombstones older than a relist are
forgotten (so memory is bounded by the deletions seen between two relists).

A binding with a deletionTimestamp keeps its charge until it is gone: its workloads still run
while Karmada removes them (an unreachable member keeps them, and the binding's finalizer, as
long as it stays away). Once the binding is gone, the member pods still terminating are counted
from the members (`pods`, `recompute._beyond`). A deleting binding is never admitted from a
queue.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from karmadaquota import queued, queueing, scopes
from karmadaquota.api import BindingResource, ResourceBinding, describe
from karmadaquota.charge import Charge, full_charge, queued_charge
from karmadaquota.evictions import task_ends
from karmadaquota.kinds import BUILTIN, Kinds
from karmadaquota.kube.versions import parse_rv
from karmadaquota.pod_template import PodCharge, TemplateKey
from karmadaquota.quantity import QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import BindingTraits, Expression

log = logging.getLogger("karmadaquota.controller.index")

Nanos = tuple[int, ...]
_MAX_INTERNED = 200_000


@dataclass(frozen=True, slots=True)
class CompactUsage:
    """A binding's charge as integers aligned to a shared tuple of resource names."""

    names: tuple[str, ...]
    total: Nanos
    clusters: tuple[tuple[str, Nanos], ...]
    traits: BindingTraits
    # per cluster rendered only by a graceful eviction task: the total without that task
    # (charge.Charge.evicted; `aggregate` charges it where the cluster is released)
    evicted: tuple[tuple[str, Nanos], ...] = ()


@dataclass(frozen=True, slots=True)
class IndexedBinding:
    """One indexed binding."""

    name: str
    generation: int
    rv: int
    usage: CompactUsage
    # Why part or all of the binding is charged as zero (negative or unreadable values).
    invalid: tuple[str, ...] = ()
    # queued by a quota (charged nothing meanwhile): what the queue needs to admit it
    queue: queueing.QueueEntry | None = None
    # carries queued.ANNOTATION: a metadata change that moves no generation must be re-read
    marked: bool = False
    # its graceful eviction tasks: (cluster, when the task ends at the latest, seconds since
    # the epoch; None: not known yet) — what a quota's EvictionCharged condition tells
    evictions: tuple[tuple[str, float | None], ...] = ()


class Interner:
    """Shares equal immutable values (name tuples, traits, numbers) between bindings.

    Bounded: past `limit` distinct values, new ones are kept as they are (correct, larger).
    """

    def __init__(self, limit: int = _MAX_INTERNED) -> None:
        self._values: dict[Any, Any] = {}
        self._limit = limit

    def __call__(self, value: Any) -> Any:
        got = self._values.get(value)
        if got is not None:
            return got
        if len(self._values) < self._limit:
            self._values[value] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


def compact(c: Charge, intern: Interner) -> CompactUsage:
    """The compact form of a charge (every name of the total and of each cluster kept)."""
    names_set = set(c.total)
    for rl in (*c.per_cluster.values(), *c.evicted.values()):
        names_set.update(rl)
    names: tuple[str, ...] = intern(tuple(sorted(names_set)))

    def nanos(rl: ResourceList) -> Nanos:
        return intern(tuple(intern(rl[n].nanos) if n in rl else 0 for n in names))  # type: ignore[no-any-return]

    clusters = tuple((intern(name), nanos(rl)) for name, rl in sorted(c.per_cluster.items()))
    # bindings of one workload shape share one usage object (30,000 bindings, a few shapes)
    evicted = tuple((intern(name), nanos(rl)) for name, rl in sorted(c.evicted.items()))
    usage: CompactUsage = intern(
        CompactUsage(names, nanos(c.total), clusters, intern(c.traits), evicted)
    )
    return usage


class TemplatePods(Protocol):
    """Where a binding's template's pod is found (kube.templates.TemplateStore)."""

    # the kinds a binding is charged pods for (the built-in and declared ones)
    kinds: Kinds

    def resolve(self, ref: BindingResource, namespace: str) -> PodCharge | TemplateKey | None:
        """The pod; the template's key while its version has not arrived; None: unknown."""
        ...

    def key_of(self, ref: BindingResource, namespace: str) -> TemplateKey | None:
        """The template a binding with a version of it is charged with; None: none."""
        ...


@dataclass(frozen=True, slots=True)
class BindingState:
    """What one binding object tells the index: an entry, or None when it is being deleted."""

    namespace: str
    uid: str
    rv: int
    entry: IndexedBinding | None
    # the template whose pod the binding is charged with (observed again when it changes)
    template: TemplateKey | None = None
    # its version has not arrived yet: charged from the binding's own fields meanwhile, at
    # generation 0 (its pending charge holds)
    waiting: bool = False


def observe(
    obj: Mapping[str, Any], intern: Interner, templates: TemplatePods | None = None
) -> BindingState:
    """Charge one ResourceBinding object with its template's pod (`templates`: None charges
    the binding's own fields). Raises ValueError (pydantic/quantity) when malformed."""
    meta = obj.get("metadata") or {}
    ns, uid, rv = (
        str(meta.get("namespace", "")),
        str(meta.get("uid", "")),
        parse_rv(meta.get("resourceVersion")),
    )
    try:
        binding = ResourceBinding.model_validate(obj)
        found = templates.resolve(binding.spec.resource, ns) if templates is not None else None
        waiting = isinstance(found, tuple)
        pod = found if isinstance(found, PodCharge) else None
        template = templates.key_of(binding.spec.resource, ns) if templates is not None else None
        full = full_charge(binding, pod, templates.kinds if templates is not None else BUILTIN)
    except (ValidationError, QuantityError) as e:
        # Indexed with zero usage rather than skipped, so that the quota can say so and a
        # reservation for it is not held until expiry.
        problem = f"invalid ResourceBinding: {describe(e) if isinstance(e, ValidationError) else e}"
        return BindingState(ns, uid, rv, _uncharged(meta, rv, problem, intern))
    quota = queued.queued_by(binding)
    c = queued_charge(full) if quota else full
    usage = compact(c, intern)
    name = intern(binding.metadata.name)
    generation = 0 if waiting else binding.metadata.generation
    if c.invalid:
        _log_invalid(ns, name, uid, c.invalid)
    deleting = bool(meta.get("deletionTimestamp"))
    entry = queueing.QueueEntry.of(binding, quota, full) if quota and not deleting else None
    return BindingState(
        ns,
        uid,
        rv,
        IndexedBinding(
            name,
            generation,
            rv,
            usage,
            c.invalid,
            entry,
            queued.marked(obj),
            _evictions(binding, c, intern),
        ),
        template,
        waiting,
    )


def _evictions(
    binding: ResourceBinding, c: Charge, intern: Interner
) -> tuple[tuple[str, float | None], ...]:
    ends = task_ends(binding)
    return tuple((intern(name), ends.get(name)) for name in sorted(c.evicted))


_NOTHING = CompactUsage(
    (), (), (), BindingTraits(has_replicas=False, best_effort=False, priority_class="")
)


def _uncharged(meta: Mapping[str, Any], rv: int, problem: str, intern: Interner) -> IndexedBinding:
    name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
    generation = meta.get("generation", 0)
    _log_invalid(str(meta.get("namespace", "")), name, uid, (problem,))
    return IndexedBinding(
        intern(name), generation if isinstance(generation, int) else 0, rv, _NOTHING, (problem,)
    )


def _log_invalid(namespace: str, name: str, uid: str, problems: tuple[str, ...]) -> None:
    log.warning(
        "ResourceBinding charged as zero where invalid",
        extra={"namespace": namespace, "binding": name, "uid": uid, "error": "; ".join(problems)},
    )


def _track(sets: dict[str, set[str]], namespace: str, uid: str, member: bool) -> None:
    """Keep `uid` in the namespace's set when `member`, out of it (and no empty set) if not."""
    if member:
        sets.setdefault(namespace, set()).add(uid)
        return
    uids = sets.get(namespace)
    if uids is not None:
        uids.discard(uid)
        if not uids:
            del sets[namespace]


class BindingIndex:
    """namespace -> uid -> IndexedBinding, with the event/relist ordering rules described above."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, IndexedBinding]] = {}
        self._tombstones: dict[str, tuple[str, int]] = {}  # uid -> (namespace, rv)
        self.intern = Interner()
        self._count = 0
        self._queued: dict[str, set[str]] = {}  # namespace -> uids of queued bindings
        # namespace -> uids of bindings with a graceful eviction task charged
        self._evicting: dict[str, set[str]] = {}
        # namespace -> how many times its bindings changed (what a cached sum was taken at)
        self._versions: dict[str, int] = {}

    def __len__(self) -> int:
        return self._count

    def namespaces(self) -> list[str]:
        return sorted(self._by_ns)

    def bindings(self, namespace: str) -> Mapping[str, IndexedBinding]:
        return self._by_ns.get(namespace, {})

    def version(self, namespace: str) -> int:
        """Changes to the namespace's bindings so far: a sum over them taken at this version
        holds until it moves (`cluster.NamespaceSums`)."""
        return self._versions.get(namespace, 0)

    def get(self, namespace: str, uid: str) -> IndexedBinding | None:
        return self._by_ns.get(namespace, {}).get(uid)

    def queued(self, namespace: str) -> list[queueing.QueueEntry]:
        """The namespace's bindings queued by a quota (charged nothing), in no order."""
        bucket = self._by_ns.get(namespace, {})
        out = []
        for uid in self._queued.get(namespace, ()):
            q = bucket[uid].queue
            if q is not None:
                out.append(q)
        return out

    def evicting(self, namespace: str) -> list[IndexedBinding]:
        """The namespace's bindings charging a graceful eviction task, in no order."""
        bucket = self._by_ns.get(namespace, {})
        return [bucket[uid] for uid in self._evicting.get(namespace, ())]

    def evicting_namespaces(self) -> list[str]:
        """Where a cluster's readiness moves what is charged (karmadaquota.evictions)."""
        return sorted(self._evicting)

    def has_queued(self, namespace: str) -> bool:
        return bool(self._queued.get(namespace))

    def queued_namespaces(self) -> list[str]:
        return sorted(self._queued)

    def _track_queue(self, namespace: str, uid: str, entry: IndexedBinding | None) -> None:
        _track(self._queued, namespace, uid, entry is not None and entry.queue is not None)
        _track(self._evicting, namespace, uid, entry is not None and bool(entry.evictions))

    def deleted(self, uid: str) -> bool:
        """True when the index saw this binding deleted (and has not forgotten it yet)."""
        return uid in self._tombstones

    def mark_absent(self, namespace: str, uid: str) -> None:
        """Record that the API server holds no binding with this uid (a create that failed
        after admission); it is forgotten at the next relist like any tombstone."""
        self._tombstones.setdefault(uid, (namespace, 0))

    # ---- mutations -------------------------------------------------------------------------

    def upsert(self, namespace: str, uid: str, entry: IndexedBinding) -> bool:
        """Store `entry` (the informer delivers versions in order); True if changed."""
        bucket = self._by_ns.setdefault(namespace, {})
        current = bucket.get(uid)
        bucket[uid] = entry
        self._track_queue(namespace, uid, entry)
        if current is None:
            self._count += 1
        elif current == entry:
            return False
        self._versions[namespace] = self._versions.get(namespace, 0) + 1
        return True

    def remove(self, namespace: str, uid: str, rv: int) -> bool:
        """Forget a binding deleted at `rv` (tombstoned); True if it was indexed."""
        tomb = self._tombstones.get(uid)
        if tomb is None or rv > tomb[1]:
            self._tombstones[uid] = (namespace, rv)
        bucket = self._by_ns.get(namespace)
        if bucket is None or bucket.pop(uid, None) is None:
            return False
        self._versions[namespace] = self._versions.get(namespace, 0) + 1
        self._track_queue(namespace, uid, None)
        self._count -= 1
        if not bucket:
            del self._by_ns[namespace]
        return True

    def apply(self, seen: BindingState) -> bool:
        """Fold in one observed object (an event or a listed item); True if the index changed."""
        if seen.entry is None:
            return self.remove(seen.namespace, seen.uid, seen.rv)
        return self.upsert(seen.namespace, seen.uid, seen.entry)

    def forget_deletions_before(self, list_rv: int) -> None:
        """A list taken at `list_rv` reflects earlier deletions: forget their tombstones (the
        rest, and the list's own, are kept a while)."""
        self._tombstones = {
            uid: t for uid, t in self._tombstones.items() if not list_rv or t[1] >= list_rv
        }


# ---------------------------------------------------------------------------------------------
# aggregation


@dataclass(slots=True)
class Sums:
    """Sums in nano-units, masked to a quota's names: global and per target cluster."""

    used: dict[str, int]
    per_cluster: dict[str, dict[str, int]]


def aggregate(
    entries: Iterable[IndexedBinding],
    names: Collection[str],
    exprs: tuple[Expression, ...],
    released: frozenset[str] = frozenset(),
) -> Sums:
    """Σ usage of the bindings whose traits match `exprs`, masked to `names` (from scratch);
    the evicted replicas of `released` clusters are not charged (`charge.released`).

    Every name starts at zero, so a quota's status always carries each name it tracks.
    """
    keep = frozenset(names)
    used = dict.fromkeys(sorted(keep), 0)
    per_cluster: dict[str, dict[str, int]] = {}
    plans: dict[tuple[str, ...], tuple[tuple[int, str], ...]] = {}
    matched: dict[BindingTraits, bool] = {}
    for entry in entries:
        u = entry.usage
        ok = matched.get(u.traits)
        if ok is None:
            ok = matched[u.traits] = scopes.matches(exprs, u.traits)
        if not ok:
            continue
        plan = plans.get(u.names)
        if plan is None:
            plan = plans[u.names] = tuple((i, n) for i, n in enumerate(u.names) if n in keep)
        if not plan:
            continue
        total, clusters = u.total, u.clusters
        if released and u.evicted:
            total, clusters = _released(u, released)
        for i, n in plan:
            used[n] += total[i]
        for cluster, values in clusters:
            acc = per_cluster.get(cluster)
            if acc is None:
                acc = per_cluster[cluster] = dict.fromkeys(used, 0)
            for i, n in plan:
                acc[n] += values[i]
    return Sums(used, per_cluster)


def _released(
    u: CompactUsage, released: frozenset[str]
) -> tuple[Nanos, tuple[tuple[str, Nanos], ...]]:
    """`charge.released` on the compact form: the least total per name among the released
    clusters' (stricter, never looser, when several), their own entries dropped."""
    hit = [values for cluster, values in u.evicted if cluster in released]
    if not hit:
        return u.total, u.clusters
    gone = {cluster for cluster, _ in u.evicted if cluster in released}
    return tuple(map(min, zip(*hit, strict=True))), tuple(
        (c, v) for c, v in u.clusters if c not in gone
    )


def add(parts: Iterable[Sums], names: Collection[str]) -> Sums:
    """Σ of sums masked to the same `names` (what `aggregate` of their bindings gives)."""
    used = dict.fromkeys(sorted(frozenset(names)), 0)
    per_cluster: dict[str, dict[str, int]] = {}
    for part in parts:
        for n, v in part.used.items():
            used[n] += v
        for cluster, values in part.per_cluster.items():
            acc = per_cluster.get(cluster)
            if acc is None:
                acc = per_cluster[cluster] = dict.fromkeys(used, 0)
            for n, v in values.items():
                acc[n] += v
    return Sums(used, per_cluster)


def safe_observe(
    obj: Mapping[str, Any], intern: Interner, templates: TemplatePods | None = None
) -> BindingState | None:
    """`observe`, logging (and skipping) a binding that cannot be charged."""
    try:
        return observe(obj, intern, templates)
    except (ValidationError, QuantityError, ValueError) as e:
        meta = obj.get("metadata") or {}
        log.warning(
            "ResourceBinding cannot be charged; not counted",
            extra={
                "namespace": meta.get("namespace"),
                "binding": meta.get("name"),
                "uid": meta.get("uid"),
                "error": str(e),
            },
        )
        return None
