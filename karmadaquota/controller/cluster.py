"""A ClusterKarmadaQuota's desired status (pure): a quota's recompute over many namespaces.

The namespaces its selector picks now (`selectors.selected` over the namespace table) are one
namespace's worth of bindings to `recompute.recompute`: `used` = Σ over them of the charges of
the bindings its scopes match, the per-member breakdown over them, pending charges observed or
expired dropped in the same write. Membership is read at each recompute, so a namespace
relabelled in brings its usage and one relabelled out takes it away (nothing is evicted: a
total over `hard` shows, and refuses new charges). Bindings are keyed by uid, so a namespace
deleted and recreated under the same name counts only the bindings that exist.

`namespaces[]` keeps the object small when hundreds of namespaces match: only namespaces with
non-zero usage, sorted; `selectedNamespaces` counts all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from karmadaquota import resources, scopes, selectors, validation
from karmadaquota.api import (
    API_VERSION,
    APPLIED_KIND,
    CLUSTER_KIND,
    CLUSTER_QUOTA_LABEL,
    ClusterKarmadaQuota,
    ClusterKarmadaQuotaStatus,
    KarmadaQuotaStatus,
    NamespaceUsage,
)
from karmadaquota.controller.index import BindingIndex, IndexedBinding, Sums, add, aggregate
from karmadaquota.controller.pods import Observed
from karmadaquota.controller.recompute import (
    MemberView,
    NamespaceSnapshot,
    Outcome,
    _quantities,
    recompute,
)
from karmadaquota.pending import EntryKey
from karmadaquota.scopes import Expression


class NamespaceSums:
    """Each namespace's `aggregate` for a cluster quota's names and scopes, kept until the
    namespace's bindings change (`BindingIndex.version`): a cluster quota's recompute then
    re-sums only the namespaces that changed, not the hundreds it selects."""

    def __init__(self, index: BindingIndex) -> None:
        self.index = index
        # (namespace, names, scopes, released clusters) -> (version, sums)
        self._held: dict[
            tuple[str, frozenset[str], tuple[Expression, ...], frozenset[str]], tuple[int, Sums]
        ] = {}

    def of(
        self,
        namespace: str,
        names: Collection[str],
        exprs: tuple[Expression, ...],
        away: frozenset[str] = frozenset(),
    ) -> Sums:
        key = (namespace, frozenset(names), exprs, away)
        version = self.index.version(namespace)
        held = self._held.get(key)
        if held is not None and held[0] == version:
            return held[1]
        sums = aggregate(self.index.bindings(namespace).values(), names, exprs, away)
        self._held[key] = (version, sums)
        return sums

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the sums of namespaces `keep` says no cluster quota selects any more."""
        self._held = {k: v for k, v in self._held.items() if keep(k[0])}


def _fresh(bindings: Callable[[str], Mapping[str, IndexedBinding]]) -> Callable[..., Sums]:
    """Per-namespace sums taken afresh (no cache: the pure recompute's default)."""

    def of(
        namespace: str,
        names: Collection[str],
        exprs: tuple[Expression, ...],
        away: frozenset[str] = frozenset(),
    ) -> Sums:
        return aggregate(bindings(namespace).values(), names, exprs, away)

    return of


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a cluster quota's recompute reads, as one snapshot."""

    selected: Sequence[str]  # the namespaces the selector picks, sorted
    bindings: Callable[[str], Mapping[str, IndexedBinding]]  # a namespace's, by uid
    deleted: Callable[[str], bool] = lambda uid: False
    members: Sequence[MemberView] = ()
    member_watch: bool = True
    # every selected namespace carries the enforcement label (None: not known here)
    enforced: bool | None = None
    # entries of its pending charges the orphan audit disproved (recompute.NamespaceSnapshot)
    disproved: Mapping[EntryKey, int] = field(default_factory=dict)
    # a namespace's sums for (names, scopes, released clusters) (None: aggregated afresh;
    # `NamespaceSums`)
    sums: Callable[[str, Collection[str], tuple[Expression, ...], frozenset[str]], Sums] | None = (
        None
    )
    # member clusters' readiness and a namespace's bindings with eviction tasks
    # (recompute.NamespaceSnapshot)
    released: frozenset[str] = frozenset()
    releasing: Mapping[str, float] = field(default_factory=dict)
    evicting: Callable[[str], Sequence[IndexedBinding]] = lambda namespace: ()


class Union(Mapping[str, IndexedBinding]):
    """Several namespaces' bindings (by uid: uids are unique across namespaces) as one, read
    in place: no copy of hundreds of namespaces' tables per recompute."""

    def __init__(self, parts: Sequence[Mapping[str, IndexedBinding]]) -> None:
        self._parts = [p for p in parts if p]

    def __getitem__(self, uid: str) -> IndexedBinding:
        for part in self._parts:
            found = part.get(uid)
            if found is not None:
                return found
        raise KeyError(uid)

    def __iter__(self) -> Iterator[str]:
        for part in self._parts:
            yield from part

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts)

    def values(self) -> Iterator[IndexedBinding]:  # type: ignore[override]
        """Every part's bindings, read in place (what `aggregate` sums)."""
        for part in self._parts:
            yield from part.values()


@dataclass(frozen=True)
class _Across:
    """A member's observed usage summed over the selected namespaces."""

    member: MemberView
    namespaces: Sequence[str]

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def synced(self) -> bool:
        return self.member.synced

    @property
    def error(self) -> str:
        return self.member.error

    def observed(
        self, namespace: str, names: Collection[str], exprs: tuple[Expression, ...], now: float
    ) -> Observed:
        parts = [self.member.observed(ns, names, exprs, now) for ns in self.namespaces]
        return Observed.total(parts)


def recompute_cluster(
    quota: ClusterKarmadaQuota, inputs: ClusterSnapshot, now: datetime
) -> Outcome:
    """The status the cluster quota should have now (see the module docstring)."""
    per_ns = {ns: inputs.bindings(ns) for ns in inputs.selected}
    # pending charges are looked up where their bindings are, selected or not any more
    pending_ns = {r.reservedBy.namespace for r in quota.status.reservations}
    lookup = Union([inputs.bindings(ns) for ns in sorted(set(per_ns) | pending_ns)])
    of = inputs.sums or _fresh(inputs.bindings)
    parts: dict[str, Sums] = {}  # per selected namespace, as the recompute summed them

    def sums(names: Collection[str], exprs: tuple[Expression, ...], away: frozenset[str]) -> Sums:
        got = {ns: of(ns, names, exprs, away) for ns in per_ns}
        if not parts:  # the first call is the quota's own (a second: every eviction charged)
            parts.update(got)
        return add(got.values(), names)

    snapshot = NamespaceSnapshot(
        bindings=Union(list(per_ns.values())),
        lookup=lookup,
        deleted=inputs.deleted,
        members=[_Across(m, inputs.selected) for m in inputs.members],
        member_watch=inputs.member_watch,
        enforced=inputs.enforced if inputs.selected else None,
        disproved=lambda _: inputs.disproved,
        sums=sums,
        released=inputs.released,
        releasing=inputs.releasing,
        evicting=[b for ns in per_ns for b in inputs.evicting(ns)],
    )
    outcome = recompute(quota, snapshot, now)
    usage: list[NamespaceUsage] = []
    if outcome.hard:
        exprs = scopes.expressions(quota.spec)
        away = inputs.released if quota.spec.releases_evicted else frozenset()
        for ns in per_ns:
            totals = parts.get(ns) or of(ns, outcome.hard.keys(), exprs, away)
            if any(totals.used.values()):
                used = _quantities(totals.used, outcome.hard)
                usage.append(
                    NamespaceUsage(namespace=ns, used=resources.format_resource_list(used))
                )
    fields = {k: getattr(outcome.status, k) for k in KarmadaQuotaStatus.model_fields}
    status = ClusterKarmadaQuotaStatus.model_construct(
        **fields, namespaces=usage, selectedNamespaces=len(inputs.selected)
    )
    return replace(outcome, status=status)


class Selection:
    """Which namespaces each cluster quota selects, as of its last recompute, and back: what
    a namespace's change marks (every cluster quota selecting it) and what a relabelling
    moves. Pure: the namespace labels and the cluster quotas are passed in."""

    def __init__(self) -> None:
        self._chosen: dict[str, frozenset[str]] = {}  # cluster quota -> namespaces
        self._by_namespace: dict[str, set[str]] = {}  # namespace -> cluster quotas
        # cluster quota -> ((uid, generation, label table version), the sorted selection)
        self._taken: dict[str, tuple[tuple[str, int, int], list[str]]] = {}

    def of(self, name: str) -> frozenset[str]:
        """The namespaces the cluster quota selected at its last recompute."""
        return self._chosen.get(name, frozenset())

    def selecting(self, namespace: str) -> Collection[str]:
        """The cluster quotas that selected the namespace at their last recompute."""
        return self._by_namespace.get(namespace, ())

    def choose(
        self,
        name: str,
        quota: ClusterKarmadaQuota | None,
        table: Mapping[str, Mapping[str, str]],
        version: int | None = None,
    ) -> list[str]:
        """The namespaces (of `table`: namespace -> labels) the cluster quota selects now,
        none while its spec is invalid; remembered (`of`, `selecting`). With the table's
        `version`, the last selection is reused while neither the table nor the quota's spec
        moved: a binding event's recompute never walks every namespace."""
        basis = None
        if quota is not None and version is not None:
            basis = (quota.metadata.uid, quota.metadata.generation, version)
            taken = self._taken.get(name)
            if taken is not None and taken[0] == basis:
                return list(taken[1])
        valid = quota is not None and not validation.validate_spec(quota.spec)
        chosen = (
            selectors.selected(quota.spec.namespaceSelector, table)
            if valid and quota is not None
            else []
        )
        self.set(name, frozenset(chosen))
        if basis is not None:
            self._taken[name] = (basis, list(chosen))
        return chosen

    def set(self, name: str, chosen: frozenset[str]) -> None:
        self._taken.pop(name, None)
        before = self._chosen.pop(name, frozenset())
        for ns in before - chosen:
            names = self._by_namespace.get(ns)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_namespace[ns]
        for ns in chosen:
            self._by_namespace.setdefault(ns, set()).add(name)
        if chosen:
            self._chosen[name] = chosen

    def moved(
        self,
        namespace: str,
        labels: Mapping[str, str] | None,
        quotas: Iterable[tuple[str, object]],
    ) -> list[str]:
        """The cluster quotas (name, object) whose selection of the namespace changes with
        its labels now (None: the namespace is gone): each is recomputed, its usage moves."""
        return [
            name for name, quota in quotas if _picks(quota, labels) != (namespace in self.of(name))
        ]


def selects_any(labels: Mapping[str, str] | None, quotas: Iterable[object]) -> bool:
    """Some cluster quota selects a namespace with these labels now (read from the labels as
    seen, not from a recompute's selection)."""
    return any(_picks(q, labels) for q in quotas)


def _picks(quota: object, labels: Mapping[str, str] | None) -> bool:
    return (
        labels is not None
        and isinstance(quota, ClusterKarmadaQuota)
        and selectors.matches(quota.spec.namespaceSelector, labels)
    )


def view(quota: ClusterKarmadaQuota, namespace: str) -> dict[str, Any]:
    """The AppliedClusterKarmadaQuota the namespace's tenants read (as written: owned by the
    cluster quota, so the garbage collector removes it with it): the totals and this
    namespace's usage, nothing of the other namespaces but how many they are."""
    status = quota.status
    hard = dict(status.hard)
    mine = next((dict(u.used) for u in status.namespaces if u.namespace == namespace), {})
    here = {n: mine.get(n, "0") for n in sorted(hard)}
    return {
        "apiVersion": API_VERSION,
        "kind": APPLIED_KIND,
        "metadata": {
            "name": quota.metadata.name,
            "namespace": namespace,
            "labels": {CLUSTER_QUOTA_LABEL: quota.metadata.name},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": CLUSTER_KIND,
                    "name": quota.metadata.name,
                    "uid": quota.metadata.uid,
                }
            ],
        },
        "status": {
            "clusterQuota": quota.metadata.name,
            "hard": hard,
            "used": dict(status.used),
            "namespaceUsed": here,
            "summary": status.summary,
            "namespaceSummary": ", ".join(f"{n}: {v}" for n, v in here.items()),
            "selectedNamespaces": status.selectedNamespaces,
        },
    }
