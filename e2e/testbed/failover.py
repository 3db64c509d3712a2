"""Karmada's cluster failover on the bed, and its clock.

Turning it on takes three things, all opt-in (a bed started with them, as e2e/test_failover.py
does): the ``Failover`` feature gate on karmada-controller-manager (``GracefulEviction`` is on by
default), ``--enable-no-execute-taint-eviction`` there, and ``--allow-no-execute-taint-policy``
on karmada-webhook so that a ClusterTaintPolicy may add a NoExecute taint. `taint_policy` is that
policy: a member whose ``Ready`` condition is False or Unknown is tainted
``cluster.karmada.io/not-ready:NoExecute``, and every binding without a toleration is evicted
from it at once (Karmada v1.16+ adds no default tolerations). They are not on for every bed:
with them, the fault suites' member outages would move their workloads.

A member is taken away by killing its kube-apiserver (its etcd, controller manager, scheduler
and kwok keep running, so its pods are still in etcd when the API server is started again).

What runs is read from the members (pods Running and Ready as kwok reports them), and which
members count from Karmada's Cluster ``Ready`` condition: a member that cannot be read keeps
the pods last read from it (nothing can change them while its API server is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from e2e.testbed import TestBed
from e2e.testbed.aio import eventually
from karmadaquota.kube.client import KubeClient, KubeError, NotFound

FEATURE_GATES = ("Failover=true",)
CONTROLLER_MANAGER_ARGS = (
    "--enable-no-execute-taint-eviction=true",
    # A failed health check turns Ready False after 5 s (default 30 s), a passing one turns
    # it True again after 5 s (default 30 s): a bed's failover in seconds, not a minute.
    "--cluster-failure-threshold=5s",
    "--cluster-success-threshold=5s",
)
WEBHOOK_ARGS = ("--allow-no-execute-taint-policy=true",)
TAINT_POLICY = "e2e-not-ready-no-execute"
NOT_READY_TAINT = "cluster.karmada.io/not-ready"
READ_TIMEOUT_S = 3.0
CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters"


def taint_policy(name: str = TAINT_POLICY) -> dict[str, Any]:
    """Taint any member NoExecute while it is not Ready; lift the taint once it is Ready."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "ClusterTaintPolicy",
        "metadata": {"name": name},
        "spec": {
            "addOnConditions": [
                {"conditionType": "Ready", "operator": "In", "statusValues": ["False", "Unknown"]}
            ],
            "removeOnConditions": [
                {"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}
            ],
            "taints": [{"key": NOT_READY_TAINT, "effect": "NoExecute"}],
        },
    }


def apiserver(member: str) -> str:
    return f"{member}-kube-apiserver"


def take_away(bed: TestBed, member: str) -> float:
    """Kill `member`'s kube-apiserver (SIGKILL: a machine gone, not a clean shutdown); returns
    the monotonic time it died, the start of a failover's clock."""
    bed.kill(apiserver(member), signal.SIGKILL)
    return time.monotonic()


def bring_back(bed: TestBed, member: str, timeout: float = 120) -> float:
    """Start `member`'s kube-apiserver again (same flags, data: its old pods are there); returns
    the seconds until the bed is healthy again (every Cluster Ready)."""
    return bed.restart(apiserver(member), signal.SIGKILL, timeout)


def cluster_ready(cluster: Mapping[str, Any]) -> bool:
    """Whether Karmada reports the Cluster Ready."""
    conditions = (cluster.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _tainted(cluster: Mapping[str, Any]) -> bool:
    taints = (cluster.get("spec") or {}).get("taints") or []
    return any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoExecute" for t in taints)


@dataclass(frozen=True)
class Poll:
    """One look at the namespace: seconds since the clock started, each member's Ready (as
    Karmada says), live pods (not Succeeded/Failed), pods Running and Ready, Deployments, and
    the UIDs of the live pods."""

    at: float
    ready: Mapping[str, bool]
    tainted: Mapping[str, bool]
    pods: Mapping[str, int]
    running: Mapping[str, int]
    deployments: Mapping[str, int]
    uids: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def pods_on_ready(self) -> int:
        """Σ live pods over the members Karmada calls Ready: what a quota can see running."""
        return sum(n for m, n in self.pods.items() if self.ready.get(m))

    def running_except(self, away: str) -> int:
        return sum(n for m, n in self.running.items() if m != away)


@dataclass
class Watch:
    """Reads `namespace`'s pods from every member and the Clusters from Karmada."""

    karmada: KubeClient
    members: Mapping[str, KubeClient]
    namespace: str
    started: float = field(default_factory=time.monotonic)
    last: dict[str, tuple[int, int, int, frozenset[str]]] = field(default_factory=dict)
    polls: list[Poll] = field(default_factory=list)

    async def _member(self, name: str) -> tuple[int, int, int, frozenset[str]]:
        client, ns = self.members[name], self.namespace
        try:
            pods, deployments = await asyncio.wait_for(
                asyncio.gather(
                    client.get(f"/api/v1/namespaces/{ns}/pods"),
                    client.get(f"/apis/apps/v1/namespaces/{ns}/deployments"),
                ),
                READ_TIMEOUT_S,
            )
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
            # down: nothing there can change meanwhile (poll once before taking it away)
            return self.last.get(name, (0, 0, 0, frozenset()))
        live = running = 0
        uids: set[str] = set()
        for p in pods.get("items", []):
            status = p.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                continue
            live += 1
            uids.add(p["metadata"]["uid"])
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            if (
                status.get("phase") == "Running"
                and ready
                and not p["metadata"].get("deletionTimestamp")
            ):
                running += 1
        self.last[name] = (live, running, len(deployments.get("items", [])), frozenset(uids))
        return self.last[name]

    async def poll(self) -> Poll:
        clusters = {
            c["metadata"]["name"]: c for c in (await self.karmada.get(CLUSTERS)).get("items", [])
        }
        names = list(self.members)
        counts = await asyncio.gather(*(self._member(m) for m in names))
        p = Poll(
            at=time.monotonic() - self.started,
            ready={m: cluster_ready(clusters.get(m, {})) for m in names},
            tainted={m: _tainted(clusters.get(m, {})) for m in names},
            pods={m: c[0] for m, c in zip(names, counts, strict=True)},
            running={m: c[1] for m, c in zip(names, counts, strict=True)},
            deployments={m: c[2] for m, c in zip(names, counts, strict=True)},
            uids={m: c[3] for m, c in zip(names, counts, strict=True)},
        )
        self.polls.append(p)
        return p


OnPoll = Callable[[Poll], None]


def nothing(_p: Poll) -> None:
    return None


async def time_until_running_elsewhere(
    watch: Watch, away: str, replicas: int, timeout: float, on_poll: OnPoll = nothing
) -> float:
    """Seconds from `watch.started` (set it to `take_away`'s time) until `replicas` pods run
    Ready on the members other than `away`; `on_poll` judges every poll (raise
    `InvariantViolation` for what must hold throughout)."""

    async def moved() -> float | None:
        p = await watch.poll()
        on_poll(p)
        return p.at if p.running_except(away) >= replicas else None

    remaining = max(timeout - (time.monotonic() - watch.started), 1.0)
    result: float = await eventually(
        moved, remaining, f"{replicas} pods Ready outside {away}", interval=0.2
    )
    return result


@dataclass(frozen=True)
class Return:
    """A member brought back with its old pods: seconds from the restart until Karmada calls
    it Ready, until Karmada has deleted the evicted Deployment there, until its pods are gone
    (the member's garbage collector: None when they outlived the `linger` watched), how long Σ
    pods on Ready members was over `hard` (from the first poll over to the first poll back at
    or under it; to the last poll while they remain), and the most Σ pods on Ready members,
    less the member's old pods (by the UIDs it ran before its outage) still there, ever was
    over `hard`: 0 when only the old pods made the excess — a new pod in the member counts."""

    ready_s: float
    undeployed_s: float
    cleaned_s: float | None
    over_hard_s: float
    excess_besides_old_pods: int

    @property
    def cleanup_after_ready_s(self) -> float | None:
        """How long the evicted Work's pods outlived the member's return to Ready."""
        return None if self.cleaned_s is None else self.cleaned_s - self.ready_s


async def watch_return(
    bed: TestBed,
    watch: Watch,
    member: str,
    hard: int,
    old_uids: frozenset[str],
    timeout: float = 180,
    linger: float = 30,
) -> Return:
    """Bring `member` back and poll until it is Ready with the evicted Deployment deleted
    there (Karmada's part), then up to `linger` seconds more until its pods are gone too (the
    member's garbage collector, which on the bed may wait for its next resync: 3–90 s
    measured); `watch.polls` keeps every poll (for an invariant over them). `old_uids`: the
    member's pods before it was taken away (`Poll.uids`), the only ones whose excess is
    forgiven."""
    watch.started = time.monotonic()
    watch.polls.clear()
    restart = asyncio.create_task(asyncio.to_thread(bring_back, bed, member, timeout))
    ready_at: list[float] = []

    async def looked() -> Poll:
        if restart.done():
            restart.result()  # a failed restart fails here, not at the deadline
        p = await watch.poll()
        if p.ready[member] and not ready_at:
            ready_at.append(p.at)
        return p

    async def undeployed() -> float | None:
        p = await looked()
        return p.at if ready_at and p.deployments[member] == 0 else None

    async def cleaned() -> float | None:
        p = await looked()
        return p.at if p.pods[member] == 0 else None

    try:
        undeployed_at: float = await eventually(
            undeployed, timeout, f"{member} Ready with the evicted Deployment deleted", 0.2
        )
        cleaned_at: float | None
        try:
            cleaned_at = await eventually(cleaned, linger, f"{member}'s old pods gone", 0.2)
        except AssertionError:
            cleaned_at = None  # the member's garbage collector has not resynced yet
    finally:
        await restart
    excess = max((excess_over(p, member, old_uids, hard) for p in watch.polls), default=0)
    return Return(
        ready_at[0], undeployed_at, cleaned_at, over_hard_window(watch.polls, hard), max(excess, 0)
    )


def excess_over(p: Poll, member: str, old_uids: frozenset[str], hard: int) -> int:
    """How far Σ pods on Ready members is over `hard` at `p`, not counting `member`'s old pods
    (those of `old_uids` it still runs, while it is Ready: counted in Σ only then)."""
    old = len(p.uids.get(member, frozenset()) & old_uids) if p.ready.get(member) else 0
    return p.pods_on_ready() - old - hard


def over_hard_window(polls: list[Poll], hard: int) -> float:
    """Seconds from the first poll with Σ pods on Ready members over `hard` to the first poll
    after the last such poll (0 when never over): the window a quota could see it over."""
    over = [p.at for p in polls if p.pods_on_ready() > hard]
    if not over:
        return 0.0
    after = [p.at for p in polls if p.at > over[-1]]
    return (after[0] if after else over[-1]) - over[0]


# Application failover (``PropagationPolicy.spec.failover.application``) needs no gate: Karmada's
# applicationFailover controller evicts a cluster where the workload's health (its resource
# interpreter: a Deployment with fewer updated or available replicas than it asks) has been
# Unhealthy for `tolerationSeconds`. The member stays Ready throughout.
NO_PODS = "e2e-no-pods"


def application_failover(purge_mode: str, toleration_s: int = 3) -> dict[str, Any]:
    """The `failover` of a PropagationPolicy's spec: evict an unhealthy cluster after
    `toleration_s`, its old Work purged `Directly` (deleted before the new placement is
    rendered) or `Gracefully` (kept until the new placement is healthy, 600 s at most)."""
    behaviour: dict[str, Any] = {
        "decisionConditions": {"tolerationSeconds": toleration_s},
        "purgeMode": purge_mode,
    }
    if purge_mode == "Gracefully":
        behaviour["gracePeriodSeconds"] = 600
    return {"application": behaviour}


async def make_unhealthy(member: KubeClient, namespace: str) -> float:
    """Break the workload in `member` while the member stays Ready: a ResourceQuota of no pods
    there, then its pods deleted, so that its ReplicaSets cannot make them again and its
    Deployments report no updated replicas. Returns the monotonic time the last pod went, the
    start of an application failover's clock.

    The member's quota admission reads quotas from its own informer (and caches a live lookup
    that found none for 30 s): a ReplicaSet may still make a pod just after the quota is
    created. Such pods are deleted again until none is left."""
    await member.post(
        f"/api/v1/namespaces/{namespace}/resourcequotas",
        {"metadata": {"name": NO_PODS}, "spec": {"hard": {"pods": "0"}}},
    )
    path = f"/api/v1/namespaces/{namespace}/pods"
    now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

    async def gone() -> float | None:
        pods = (await member.get(path)).get("items", [])
        for pod in pods:
            with contextlib.suppress(NotFound):
                await member.request("DELETE", f"{path}/{pod['metadata']['name']}", now)
        return None if pods else time.monotonic()

    return await eventually(gone, timeout=60, what=f"no pod left in {namespace}")


def p50(figures: list[float]) -> float:
    return float(statistics.median(figures))
