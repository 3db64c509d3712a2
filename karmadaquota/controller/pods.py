"""Observed usage: what the pods of a member cluster actually request (pure).

A pod counts as Kubernetes' quota counts it (QuotaV1Pod): while its phase is neither Succeeded
nor Failed, and, once it is being deleted, until its deletion grace has passed
(deletionTimestamp + deletionGracePeriodSeconds) — a terminating pod still runs, so it holds quota
until it is gone, while a pod stuck terminating on a lost node stops counting once its grace is
over. Such a pod is *terminating*: the recompute adds it to `used` on top of every binding's
charge (a binding's charge bounds only the pods that are not terminating: a scale-down, a
rollout's old pods and a deleted workload's pods all run past it). The member watch also asks
the API server to filter out terminal pods (`status.phase!=Succeeded,status.phase!=Failed`);
this check is the client-side guard. The grace is read against this process's clock when a
recompute reads the table: a pod whose grace ends later stops counting at the namespace's next
recompute (any event, or the periodic resync) — stricter meanwhile, never looser.

A pod's requests and limits follow Kubernetes' resource helpers (PodRequests, PodLimits:
`karmadaquota.pod_template`, which admission charges too): containers add up, sidecars (init
containers with restartPolicy Always) add to them, every other init container must fit on its
own next to the sidecars started before it (the maximum is taken), pod-level resources set the
total, and the pod overhead is added. Requests are then charged under quota names as
Kubernetes' pod evaluator does: cpu, memory, ephemeral-storage and hugepages-* under the bare
and the requests.* name, extended resources as requests.<name>, limits as limits.cpu,
limits.memory and limits.ephemeral-storage, plus `pods` and `count/pods` (1 each).

Scopes apply to pods as to bindings: PriorityClass reads spec.priorityClassName, BestEffort is
the BestEffort QoS class (no cpu/memory request or limit in any container).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from karmadaquota import resources, scopes
from karmadaquota.pod_template import LIMITS_PREFIX, limit_names, pod_limits, pod_requests
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.scopes import BindingTraits, Expression

U = TypeVar("U")

log = logging.getLogger("karmadaquota.controller.pods")

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
NON_TERMINAL_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
_ONE = Quantity.from_int(1)
_QOS_RESOURCES = ("cpu", "memory")
# Quota names a pod can say something about (others, e.g. count/deployments.apps, cannot).
_POD_COUNTS = frozenset({resources.PODS, resources.count_name("v1", "Pod")})


def is_pod_observable(name: str) -> bool:
    """Whether member pods can show usage of quota resource `name`."""
    return (
        name in _POD_COUNTS
        or name in resources.REQUEST_ALIASES
        or name.startswith((resources.REQUESTS_PREFIX, resources.HUGEPAGES_PREFIX, LIMITS_PREFIX))
    )


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One counted pod: its scope traits, its usage under every quota name, and, when it is
    being deleted, the time (seconds since the epoch) its deletion grace ends."""

    traits: BindingTraits
    usage: ResourceList
    grace_ends: float | None = None  # terminating: counted until then

    @property
    def terminating(self) -> bool:
        return self.grace_ends is not None

    def counts(self, now: float) -> bool:
        """Still counted at `now`: not terminating, or its grace not over yet."""
        return self.grace_ends is None or self.grace_ends > now


def grace_ends(meta: Mapping[str, Any]) -> float | None:
    """When a pod being deleted stops counting (Kubernetes' QuotaV1Pod): deletionTimestamp +
    deletionGracePeriodSeconds; None when it is not being deleted. A timestamp that cannot be
    read counts without end (stricter)."""
    stamp = meta.get("deletionTimestamp")
    if not stamp:
        return None
    try:
        at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")
    grace = meta.get("deletionGracePeriodSeconds")
    return at + grace if isinstance(grace, int) and not isinstance(grace, bool) else float("inf")


def _best_effort(spec: Mapping[str, Any]) -> bool:
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                if any(r in (res.get(part) or {}) for r in _QOS_RESOURCES):
                    return False
    return True


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage of one pod, or None when it is terminal (a terminating pod's grace is read
    when the table is: `PodTable.observed`)."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    spec = pod.get("spec") or {}
    try:
        requests = pod_requests(spec)
        limits = limit_names(pod_limits(spec))
    except QuantityError as e:  # the member's API server validated them: should not happen
        meta = pod.get("metadata") or {}
        log.warning(
            "pod requests unreadable; counting the pod only",
            extra={"namespace": meta.get("namespace"), "pod": meta.get("name"), "error": str(e)},
        )
        requests, limits = {}, {}
    usage = resources.to_quota_names(requests, None)  # never "pods": a pod counts once
    usage.update(limits)
    usage.update(dict.fromkeys(_POD_COUNTS, _ONE))
    traits = BindingTraits(
        has_replicas=True,
        best_effort=_best_effort(spec),
        priority_class=str(spec.get("priorityClassName") or ""),
    )
    return PodUsage(traits, usage, grace_ends(pod.get("metadata") or {}))


class UidTable(Generic[U]):
    """One member cluster's objects of one kind, by watch events: namespace -> uid -> what
    each uses (`usage`, None: not counted). The pod table and the claim table
    (`controller.claims`) are this with their own `usage` and sums."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, U]] = {}

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_ns.values())

    def namespaces(self) -> set[str]:
        return set(self._by_ns)

    def usage(self, obj: Mapping[str, Any]) -> U | None:
        raise NotImplementedError

    def put(self, namespace: str, uid: str, usage: U | None) -> bool:
        """Record (or, with None, forget) an object; True if the table changed."""
        bucket = self._by_ns.get(namespace)
        if usage is None:
            if bucket is None or uid not in bucket:
                return False
            del bucket[uid]
            if not bucket:
                del self._by_ns[namespace]
            return True
        if bucket is None:
            bucket = self._by_ns[namespace] = {}
        old = bucket.get(uid)
        bucket[uid] = usage
        return old != usage

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> str | None:
        """Fold in one watch event; the namespace when it changed the table."""
        meta = obj.get("metadata") or {}
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid", ""))
        usage = None if event_type == "DELETED" else self.usage(obj)
        return ns if self.put(ns, uid, usage) else None


class PodTable(UidTable[PodUsage]):
    """The counted pods of one member cluster: namespace -> uid -> PodUsage."""

    def usage(self, obj: Mapping[str, Any]) -> PodUsage | None:
        return pod_usage(obj)

    def observed(
        self,
        namespace: str,
        names: Collection[str],
        exprs: tuple[Expression, ...],
        now: float,
    ) -> Observed:
        """Σ usage of the namespace's counted pods matching `exprs`, masked to `names`: all
        of them, and the terminating ones alone.

        Zero for every pod-observable name, so a quiet namespace reads 0 rather than nothing.
        """
        running: ResourceList = {n: Quantity.zero() for n in names if is_pod_observable(n)}
        terminating = dict(running)
        for p in self._by_ns.get(namespace, {}).values():
            if not p.counts(now) or not scopes.matches(exprs, p.traits):
                continue
            for out in (running, terminating) if p.terminating else (running,):
                for name, q in p.usage.items():
                    have = out.get(name)
                    if have is not None:
                        out[name] = have + q
        return Observed(running, terminating)


@dataclass(frozen=True, slots=True)
class Observed:
    """What a member's pods use in one namespace: `running` counts every counted pod,
    `terminating` the part of it whose pods are being deleted (in no binding's charge)."""

    running: ResourceList
    terminating: ResourceList

    @staticmethod
    def total(parts: Sequence[Observed]) -> Observed:
        """Σ over namespaces (a cluster quota's)."""
        return Observed(
            resources.total(p.running for p in parts),
            resources.total(p.terminating for p in parts),
        )
