"""Which member clusters' evicted replicas a quota stops charging: those Karmada reports not Ready.

A cluster failover (Karmada's `Failover` gate, NoExecute taint eviction, application failover)
moves a cluster's replicas into a graceful eviction task of the binding. Karmada keeps the
cluster's Work until the task ends — when the new placement is healthy, or after
`--graceful-eviction-timeout` (10 minutes) — so the task's replicas are charged
(karmadaquota.charge). In a full quota the new placement is then refused, it never becomes
healthy, and a cluster outage becomes a ten-minute application outage.

So a quota with `spec.failover.evictedReplicas: Release` (the default) stops charging a task's
replicas once Karmada's Cluster object says the cluster is not Ready — its `Ready` condition
False or Unknown — and has said so for `grace` seconds (`--evicted-cluster-grace`, 0 by
default: Karmada only marks a cluster not Ready after its own `--cluster-failure-threshold` /
`--cluster-monitor-grace-period`), counted from the condition's lastTransitionTime. This is
Kubernetes' rule for a lost node's pods (its quota stops counting a pod whose deletion grace
period has passed): a partitioned cluster may still run them meanwhile, and none of them is in
a cluster Karmada reports Ready. A cluster that turns Ready again is charged its tasks again at
once. A cluster not seen (the store not listed yet, a Cluster deleted) is never released: the
webhook and the controller each fail closed on their own view. `Hold` keeps the task charged
until it ends.

The table is fed by an informer on `CLUSTERS_PATH` (the webhook's) or by the controller's kopf
Cluster events; the decision is `released(now)`, pure over what was seen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from karmadaquota.api import ResourceBinding
from karmadaquota.times import parse_time

log = logging.getLogger("karmadaquota.evictions")

CLUSTERS_PATH = "/apis/cluster.karmada.io/v1alpha1/clusters"


@dataclass(frozen=True, slots=True)
class NotReady:
    """A cluster Karmada reports not Ready, and since when (seconds since the epoch)."""

    status: str  # False or Unknown
    since: float
    reason: str = ""


def not_ready(obj: Mapping[str, Any]) -> NotReady | None:
    """The cluster's `Ready` condition when it is False or Unknown; None when it is True, or
    when there is none yet (a cluster just joined: nothing of it was evicted)."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if not isinstance(c, Mapping) or c.get("type") != "Ready":
            continue
        status = str(c.get("status", ""))
        if status == "True":
            return None
        when = parse_time(str(c.get("lastTransitionTime") or ""))
        # an unreadable transition time: no grace can be counted from it, never released
        return NotReady(
            status, when.timestamp() if when else float("inf"), str(c.get("reason") or "")
        )
    return None


# Karmada's --graceful-eviction-timeout default: a task without gracePeriodSeconds ends by then
GRACEFUL_EVICTION_TIMEOUT = 600.0


def task_ends(binding: ResourceBinding) -> dict[str, float | None]:
    """Per evicted cluster, when its graceful eviction task ends at the latest (seconds since
    the epoch): its creationTimestamp + gracePeriodSeconds or Karmada's default timeout; None
    while Karmada has not stamped it yet."""
    out: dict[str, float | None] = {}
    for task in binding.spec.gracefulEvictionTasks:
        created = parse_time(task.creationTimestamp) if task.creationTimestamp else None
        timeout = (
            task.gracePeriodSeconds
            if task.gracePeriodSeconds is not None
            else GRACEFUL_EVICTION_TIMEOUT
        )
        out[task.fromCluster] = created.timestamp() + timeout if created else None
    return out


def describe(
    clusters: Iterable[str], ends: Mapping[str, float | None], readiness: Readiness, now: float
) -> str:
    """Why each cluster's evicted replicas are charged and for how long, for a refusal's message
    (Karmada's scheduler reports it in its events on the binding and its template)."""
    not_ready_now = readiness.clusters_not_ready()
    releasing = readiness.releasing(now)
    parts = []
    for name in clusters:
        if name in releasing:
            parts.append(f"{name} is not Ready, released in {releasing[name] - now:.0f}s")
        elif name in not_ready_now:
            parts.append(f"{name} is not Ready (released where the quota does not hold it)")
        else:
            end = ends.get(name)
            left = f", at most {max(0.0, end - now):.0f}s more" if end is not None else ""
            parts.append(f"{name} is Ready: charged until Karmada's eviction ends{left}")
    return "replicas evicted from " + "; ".join(parts) + " (docs/charging.md, Failover)"


class Readiness:
    """Member clusters not Ready, as the Cluster objects say (an informer's handler)."""

    def __init__(self, grace: float = 0.0, on_change: Callable[[], None] | None = None) -> None:
        self.grace = grace
        self._not_ready: dict[str, NotReady] = {}
        self._on_change = on_change or (lambda: None)

    def released(self, now: float) -> frozenset[str]:
        """The clusters whose evicted replicas a releasing quota no longer charges at `now`."""
        return frozenset(n for n, r in self._not_ready.items() if now >= r.since + self.grace)

    def releasing(self, now: float) -> dict[str, float]:
        """The clusters not Ready still within the grace, and when each is released."""
        return {
            n: r.since + self.grace
            for n, r in self._not_ready.items()
            if now < r.since + self.grace
        }

    def next_release(self, now: float) -> float | None:
        """When the next not-Ready cluster's grace ends (None: none is waiting for it)."""
        return min(self.releasing(now).values(), default=None)

    def clusters_not_ready(self) -> Mapping[str, NotReady]:
        return self._not_ready

    # ---- feeding (informer.Handler, or the controller's Cluster events) ---------------------

    def observe(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        now = not_ready(obj)
        before = self._not_ready.get(name)
        if now is None:
            self._not_ready.pop(name, None)
        else:
            self._not_ready[name] = now
        if now != before:
            log.info(
                "member cluster readiness",
                extra={"cluster": name, "ready": now is None, "reason": now.reason if now else ""},
            )
            self._on_change()

    def forget(self, name: str) -> None:
        if self._not_ready.pop(name, None) is not None:
            self._on_change()

    def added(self, obj: Mapping[str, Any]) -> None:
        self.observe(obj)

    def modified(self, obj: Mapping[str, Any]) -> None:
        self.observe(obj)

    def deleted(self, obj: Mapping[str, Any]) -> None:
        self.forget(str((obj.get("metadata") or {}).get("name") or ""))

    def relisted(self, resource_version: int) -> None:
        pass
