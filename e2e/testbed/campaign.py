"""Adversarial campaigns against the real bed, and the quota invariant checked from the API alone.

A campaign is a seeded sequence of ResourceBinding creates, updates and deletes, run with bounded
concurrency against a namespace holding several KarmadaQuotas (with and without scopes). The
bindings use every quantity form ("1500m", "2Gi", "1e3", ints, decimals), zero, negative and huge
values, components, Duplicated and Divided placement (spec.clusters), priority classes and
graceful eviction tasks. Any outcome of a single request is acceptable (admitted, refused,
conflict, API unavailable during a fault); what must hold afterwards is the invariant:

* for every quota and resource it tracks, Σ charges of the live bindings it matches ≤ hard
  (charges computed by the test bed's reference charge, `e2e/testbed/reference.py`, written
  from docs/charging.md: never by the product's own `karmadaquota.charge`);
* `status.used` equals that sum once the controller converged;
* no reservation is left once the reservation TTL passed;
* for the guarded quota (`memberEnforcement: ResourceQuota`), Σ over members of what its guard
  ResourceQuotas may hold ≤ its hard, at every poll (e2e/testbed/guards.py).

A tenant (`tenant_writes`: a user holding exactly edit + karmada-edit, impersonated) mixes its
own writes into the history: patches of the bindings' spec (requiredBy with a second cluster,
lowered requests, graceful eviction tasks, the queue annotation with a suspension, more
replicas), bindings made by hand and OverridePolicies of replicas. Every one must be refused; the
invariant above then holds whatever else the tenant tried.

A ClusterKarmadaQuota (`cluster_quota`) may span the campaign's namespace and a sibling running a
smaller storm of its own at the same time: the same invariant holds for it over both namespaces
(`cluster_verdict`: Σ charges of the live bindings of every namespace it selects, read in one
list, so that a binding deleted here and one created there are never both counted).

Out-of-band pods (`direct_pods`) can be created in a member meanwhile: they count in the guarded
quota's usage, so they are deleted before `used` is compared with the bindings' charges.

Shared by e2e/test_campaign.py and e2e/test_faults.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import string
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import aiohttp

from e2e.testbed import TestBed, product, reference
from e2e.testbed import guards as gi
from e2e.testbed.aio import InvariantViolation
from karmadaquota.api import ClusterKarmadaQuota, KarmadaQuota
from karmadaquota.kube.client import JSON, MERGE_PATCH, Conflict, KubeClient, KubeError, NotFound

RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTA_PATH = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
ALL_RB_PATH = "/apis/work.karmada.io/v1alpha2/resourcebindings"
CKQ_PATH = "/apis/quota.karmada.io/v1alpha1/clusterkarmadaquotas"

# (value, weight): mostly ordinary values, some zero, negative and huge ones.
CPU = [
    ("100m", 6), ("250m", 6), ("1500m", 3), ("1", 4), (1, 3), (2, 2), ("0.5", 3), ("0.1", 2),
    ("0", 2), (0, 1), ("1e3", 1), ("1E", 1), ("-1", 1), ("-500m", 1),
]  # fmt: skip
MEMORY = [
    ("128Mi", 6), ("512Mi", 4), ("1Gi", 4), ("2Gi", 2), ("1e9", 2), ("512M", 2),
    (268435456, 2), ("0", 1), ("1Ei", 1), ("-1Gi", 1),
]  # fmt: skip
REPLICAS = [(0, 2), (1, 8), (2, 6), (3, 4), (5, 2), (2147483647, 1), (-1, 1)]
PRIORITY = [("", 6), ("high", 3), ("low", 2)]
POD_CPU = ["100m", "250m", "500m", "1", "2"]
POD_MEMORY = ["64Mi", "256Mi", "1Gi"]

GUARDED = "guarded"  # the quota with member guards
GUARDED_HARD = {
    "pods": "80",
    "requests.cpu": "30",
    "requests.memory": "48Gi",
    "count/deployments.apps": "50",  # not guarded: admission only
}


def quotas(namespace: str, on_exceed: str | None = None) -> list[JSON]:
    """Overlapping quotas: plain, PriorityClass-scoped, BestEffort and NotBestEffort; with
    `on_exceed` ("Queue"), every one says so (what does not fit is queued, not refused)."""
    mode = {"onExceed": on_exceed} if on_exceed else {}

    def q(name: str, hard: dict[str, str], **spec: Any) -> JSON:
        return {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard, **spec, **mode},
        }

    in_high = {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
    high = {"matchExpressions": [in_high]}
    return [
        q("all", {"requests.cpu": "40", "pods": "120", "count/deployments.apps": "60"}),
        q("memory", {"requests.memory": "60Gi"}),
        q("high", {"pods": "20", "requests.cpu": "10"}, scopeSelector=high),
        q("best-effort", {"pods": "10"}, scopes=["BestEffort"]),
        q("not-best-effort", {"cpu": "30"}, scopes=["NotBestEffort"]),
        # guards in every member for pods, cpu and memory (not for the count, which only
        # admission holds), rebalanced on every placement the storm makes
        q(GUARDED, GUARDED_HARD, memberEnforcement="ResourceQuota"),
    ]


def guard_invariant(members: dict[str, KubeClient], namespace: str) -> gi.GuardInvariant:
    """The Σ-of-guards check for every guarded quota of `quotas(namespace)` (guarded unless
    it says memberEnforcement None: the default)."""
    return gi.GuardInvariant(
        members,
        namespace,
        [
            gi.guarded(q["metadata"]["name"], q["spec"]["hard"], q["spec"].get("clusterHard"))
            for q in quotas(namespace)
            if q["spec"].get("memberEnforcement", "ResourceQuota") == "ResourceQuota"
        ],
    )


# The cluster quota over the campaign's namespace and its sibling: tighter than the namespaced
# quotas (requests.cpu 16 against 40, pods 40 against 120), so that it is what refuses once the
# two storms together fill it. It selects the namespaces carrying CLUSTER_LABEL=<its name>.
CLUSTER_LABEL = "e2e.quota.karmada.io/campaign"
CLUSTER_HARD = {
    "pods": "40",
    "requests.cpu": "16",
    "requests.memory": "32Gi",
    "count/deployments.apps": "64",
}


def budget_name() -> str:
    """A fresh cluster quota name, letters only: refusals are counted by their shape
    (`Stats.messages`, digits dropped), so the name must survive that to be found in them."""
    return "campaign-" + "".join(random.SystemRandom().choices(string.ascii_lowercase, k=8))


def cluster_quota(name: str, hard: dict[str, str] | None = None) -> JSON:
    """A ClusterKarmadaQuota selecting the namespaces labelled CLUSTER_LABEL=`name`."""
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "ClusterKarmadaQuota",
        "metadata": {"name": name},
        "spec": {
            "hard": dict(hard or CLUSTER_HARD),
            "namespaceSelector": {"matchLabels": {CLUSTER_LABEL: name}},
        },
    }


def _pick(rng: random.Random, table: Sequence[tuple[Any, int]]) -> Any:
    values, weights = zip(*table, strict=True)
    return rng.choices(values, weights)[0]


def _requests(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # a request missing for a tracked resource is refused (as for pods): keep that rare
    if rng.random() < 0.92:
        out["cpu"] = _pick(rng, CPU)
    if rng.random() < 0.85:
        out["memory"] = _pick(rng, MEMORY)
    return out


def generate_spec(rng: random.Random, namespace: str, name: str, members: Sequence[str]) -> JSON:
    """A binding spec with every feature the charge depends on, drawn from `rng`."""
    replicas = _pick(rng, REPLICAS)
    requirements: dict[str, Any] = {"resourceRequest": _requests(rng)}
    priority = _pick(rng, PRIORITY)
    if priority:
        requirements["priorityClassName"] = priority
    spec: dict[str, Any] = {
        "resource": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
            "namespace": namespace,
        },
        "replicas": replicas,
        "replicaRequirements": requirements,
    }
    if rng.random() < 0.2:  # a multi-component workload
        spec["components"] = [
            {
                "name": f"c{i}",
                "replicas": _pick(rng, REPLICAS[:5]),
                "replicaRequirements": {"resourceRequest": _requests(rng)},
            }
            for i in range(rng.choice((1, 2, 3)))
        ]
    placement = rng.random()
    n = max(0, min(replicas, 10))
    if placement < 0.3:  # Divided
        first = rng.randint(0, n)
        spec["clusters"] = [
            {"name": members[0], "replicas": first},
            {"name": members[-1], "replicas": n - first},
        ]
    elif placement < 0.45:  # Duplicated
        spec["clusters"] = [{"name": m, "replicas": n} for m in members]
    if spec.get("clusters") and rng.random() < 0.3:
        spec["gracefulEvictionTasks"] = [
            {
                "fromCluster": members[0],
                "replicas": rng.randint(0, 3),
                "reason": "TaintUntolerated",
                "producer": "TaintManager",
            }
        ]
    return spec


@dataclass
class Stats:
    outcomes: Counter[str] = field(default_factory=Counter)
    messages: Counter[str] = field(default_factory=Counter)

    def record(self, op: str, outcome: str, message: str = "") -> None:
        self.outcomes[f"{op}:{outcome}"] += 1
        if message:
            self.messages[_shape(message)] += 1

    def summary(self) -> str:
        top = ", ".join(f"{m!r}×{n}" for m, n in self.messages.most_common(8))
        return f"{dict(sorted(self.outcomes.items()))}; top refusals: {top}"


def _shape(message: str) -> str:
    """A message without the API server's prefix and the figures, to count refusals by kind."""
    message = message.split(" denied the request: ", 1)[-1]
    return "".join(c for c in message if not c.isdigit())[:160]


async def run(
    client: KubeClient,
    namespace: str,
    members: Sequence[str],
    seed: int,
    ops: int,
    concurrency: int = 16,
    names: int = 60,
    deadline: float = 300.0,
) -> Stats:
    """`ops` seeded operations over `names` binding names, at most `concurrency` at once.

    Per name, operations run in order (each name is one lane); lanes run concurrently. Errors of
    single requests (refusals, conflicts, the API server being away) are counted, not raised.
    """
    rng = random.Random(seed)
    path = RB_PATH.format(ns=namespace)
    lanes: dict[str, list[tuple[str, JSON]]] = {}
    for _ in range(ops):
        name = f"rb-{rng.randrange(names):03d}"
        kind = rng.choices(("create", "update", "delete"), (5, 4, 2))[0]
        lanes.setdefault(name, []).append((kind, generate_spec(rng, namespace, name, members)))
    stats = Stats()
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str, kind: str, spec: JSON) -> None:
        try:
            if kind == "delete":
                await client.request("DELETE", f"{path}/{name}")
            elif kind == "create":
                body = {
                    "apiVersion": "work.karmada.io/v1alpha2",
                    "kind": "ResourceBinding",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": spec,
                }
                await client.post(path, body)
            else:
                current = await client.get(f"{path}/{name}")
                current["spec"] = spec
                await client.put(f"{path}/{name}", current)
        except NotFound:
            stats.record(kind, "notfound")
        except Conflict as e:
            stats.record(kind, "conflict", e.message)
        except KubeError as e:
            stats.record(kind, "refused", e.message)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            stats.record(kind, "unavailable", type(e).__name__)
        else:
            stats.record(kind, "ok")

    async def lane(name: str, steps: list[tuple[str, JSON]]) -> None:
        for kind, spec in steps:
            async with gate:
                await one(name, kind, spec)

    async with asyncio.timeout(deadline):
        await asyncio.gather(*(lane(n, s) for n, s in lanes.items()))
    return stats


def _version(obj: JSON | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


def _tenant_patch(rng: random.Random, namespace: str, members: Sequence[str]) -> JSON:
    """One of the binding writes issue 29 found a namespace editor could make."""
    route = rng.randrange(5)
    if route == 0:
        clusters = [{"name": members[-1], "replicas": rng.randint(1, 50)}]
        return {
            "spec": {"requiredBy": [{"namespace": namespace, "name": "x", "clusters": clusters}]}
        }
    if route == 1:
        return {"spec": {"replicaRequirements": {"resourceRequest": {"cpu": "1m", "memory": "1"}}}}
    if route == 2:
        task = {"fromCluster": members[0], "reason": "x", "producer": "x", "suppressDeletion": True}
        return {"spec": {"gracefulEvictionTasks": [task]}}
    if route == 3:
        return {
            "metadata": {"annotations": {"quota.karmada.io/queued-by": "q-all"}},
            "spec": {"suspension": {"scheduling": True}},
        }
    return {"spec": {"replicas": rng.randint(1, 1000)}}


async def tenant_writes(
    tenant: KubeClient, namespace: str, members: Sequence[str], seed: int, ops: int, names: int
) -> Stats:
    """`ops` seeded writes as the tenant (`e2e/testbed/tenant.py`), one at a time, over the
    campaign's binding names: each must be refused (403), find nothing (404), or change
    nothing (a patch whose values the binding already had: the API server writes nothing)."""
    rng = random.Random(seed ^ 0x7E4A47)
    path = RB_PATH.format(ns=namespace)
    stats = Stats()
    for _ in range(ops):
        name = f"rb-{rng.randrange(names):03d}"
        kind = rng.choices(("patch", "create", "override"), (6, 2, 1))[0]
        try:
            if kind == "patch":
                # a binding that exists now, when there is one (the tenant may list them)
                listed = {b["metadata"]["name"]: b for b in (await tenant.get(path))["items"]}
                name = rng.choice(sorted(listed)) if listed else name
                got = await tenant.merge_patch(
                    f"{path}/{name}", _tenant_patch(rng, namespace, members)
                )
                if _version(got) == _version(listed.get(name)):
                    # the patch changed nothing (a value drawn equal to the binding's own):
                    # the API server wrote nothing, there was nothing to refuse
                    stats.record("tenant-patch", "unchanged")
                    continue
            elif kind == "create":
                body = {
                    "apiVersion": "work.karmada.io/v1alpha2",
                    "kind": "ResourceBinding",
                    "metadata": {"name": f"tenant-{name}", "namespace": namespace},
                    "spec": generate_spec(rng, namespace, name, members),
                }
                await tenant.post(path, body)
            else:
                plaintext = [{"path": "/spec/replicas", "operator": "replace", "value": 50}]
                await tenant.post(
                    f"/apis/policy.karmada.io/v1alpha1/namespaces/{namespace}/overridepolicies",
                    {
                        "apiVersion": "policy.karmada.io/v1alpha1",
                        "kind": "OverridePolicy",
                        "metadata": {"generateName": "tenant-", "namespace": namespace},
                        "spec": {
                            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                            "overrideRules": [{"overriders": {"plaintext": plaintext}}],
                        },
                    },
                )
        except NotFound:
            stats.record(f"tenant-{kind}", "notfound")
        except KubeError as e:
            stats.record(
                f"tenant-{kind}", "refused" if e.status == 403 else str(e.status), e.message
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            stats.record(f"tenant-{kind}", "unavailable", type(e).__name__)
        else:
            stats.record(f"tenant-{kind}", "ok")
    return stats


@dataclass
class Verdict:
    """The invariant's state at one instant, for one namespace."""

    over: list[str] = field(default_factory=list)  # Σ > hard
    drift: list[str] = field(default_factory=list)  # used != Σ
    reservations: list[str] = field(default_factory=list)
    guards_over: list[str] = field(default_factory=list)  # Σ over members of guards > hard
    fill: dict[str, float] = field(default_factory=dict)  # Σ / hard, by "<quota>/<resource>"

    @property
    def safe(self) -> bool:
        return not self.over and not self.guards_over

    @property
    def converged(self) -> bool:
        return self.safe and not self.drift and not self.reservations

    def __str__(self) -> str:
        return json.dumps(
            {
                "over_hard": self.over,
                "used_drift": self.drift,
                "reservations": self.reservations,
                "guards_over_hard": self.guards_over,
            },
            indent=1,
        )


# What pods made around Karmada hold now, by quota resource (`pods_around`).
Around = Callable[[], Awaitable[dict[str, Fraction]]]


def _judge(
    v: Verdict,
    q: KarmadaQuota,
    charges: Sequence[reference.Charged],
    around: Mapping[str, Fraction] | None = None,
) -> None:
    """Add to `v` what quota `q` (namespaced or cluster) shows against the reference charges
    of the live bindings it may count: Σ of those its scopes match > hard, `used` != Σ,
    pending left. `around`: what pods made around Karmada hold of each resource; it counts in
    the fill only (the quota counts them, admission never saw them)."""
    name = q.metadata.name
    spec = q.spec.model_dump(mode="json")
    for resource, hard_raw in q.spec.hard.items():
        total = reference.total(spec, charges, resource)
        hard = reference.quantity(hard_raw)
        used = reference.quantity(q.status.used.get(resource, "0"))
        if hard > 0:
            v.fill[f"{name}/{resource}"] = float((total + (around or {}).get(resource, 0)) / hard)
        if total > hard:
            v.over.append(f"{name}/{resource}: Σ charges {float(total):g} > hard {hard_raw}")
        if used != total:
            v.drift.append(
                f"{name}/{resource}: used {q.status.used.get(resource, 0)} != Σ charges "
                f"{float(total):g}"
            )
    if q.status.reservations:
        v.reservations.append(f"{name}: {len(q.status.reservations)} reservations")


async def verdict(
    client: KubeClient, namespace: str, guards: gi.GuardInvariant | None = None
) -> Verdict:
    """Compare every quota of the namespace with the charges of the live bindings; with
    `guards`, poll the member guards too (Σ over members ≤ hard)."""
    charges = reference.charges((await client.get(RB_PATH.format(ns=namespace)))["items"])
    v = Verdict()
    for raw in (await client.get(QUOTA_PATH.format(ns=namespace)))["items"]:
        _judge(v, KarmadaQuota.model_validate(raw), charges)
    if guards is not None:
        v.guards_over = await guards.poll()
    return v


async def cluster_verdict(
    client: KubeClient, name: str, namespaces: Sequence[str], around: Around | None = None
) -> Verdict:
    """Compare the cluster quota `name` with the charges of the live bindings of `namespaces`
    (the ones the test labelled for it). The bindings are read in one list over all namespaces:
    one consistent snapshot (two lists, one per namespace, could count a binding deleted in the
    first after it was listed and one admitted in its room in the second, which never coexisted).
    The quota must select exactly those namespaces. `around`: the pods made around Karmada in
    them, read at each poll for the fill (`_judge`)."""
    listed = (await client.get(ALL_RB_PATH))["items"]
    mine = set(namespaces)
    charges = reference.charges(b for b in listed if b["metadata"].get("namespace") in mine)
    q = ClusterKarmadaQuota.model_validate(await client.get(f"{CKQ_PATH}/{name}"))
    v = Verdict()
    _judge(v, q, charges, await around() if around else None)
    if q.status.selectedNamespaces != len(mine):
        v.drift.append(f"{name}: selects {q.status.selectedNamespaces} namespaces, not {len(mine)}")
    return v


async def converge(
    client: KubeClient,
    namespace: str,
    timeout: float,
    guards: gi.GuardInvariant | None = None,
) -> tuple[Verdict, float]:
    """Poll until the invariant holds fully; (verdict, seconds it took). Σ ≤ hard (and, with
    `guards`, Σ of the member guards ≤ hard) must hold at every poll; convergence (used == Σ,
    no reservation) within `timeout`."""
    return await _converge(lambda: verdict(client, namespace, guards), namespace, timeout)


async def converge_cluster(
    client: KubeClient, name: str, namespaces: Sequence[str], timeout: float
) -> tuple[Verdict, float]:
    """`converge` for the cluster quota `name` over `namespaces` (`cluster_verdict`)."""
    return await _converge(
        lambda: cluster_verdict(client, name, namespaces), f"cluster quota {name}", timeout
    )


async def _converge(
    judge: Callable[[], Awaitable[Verdict]], what: str, timeout: float
) -> tuple[Verdict, float]:
    started = time.monotonic()
    while True:
        try:
            v = await judge()
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
            v = None  # the API server is still coming back
        if v is not None:
            if not v.safe:
                raise InvariantViolation(f"over-admitted in {what}:\n{v}")
            if v.converged:
                return v, time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not converged within {timeout}s in {what}:\n{v}")
        await asyncio.sleep(0.5)  # polling interval


@dataclass
class StormInvariant:
    """Σ charges of the live bindings ≤ hard (`verdict(...).safe`), polled while a storm runs
    (not only once it is over: the storm deletes bindings, which would hide an over-admission
    from a check made afterwards). `peak`: the largest Σ / hard seen, by quota and resource."""

    judge: Callable[[], Awaitable[Verdict]]
    what: str
    polls: int = 0
    unreadable: int = 0
    violations: list[str] = field(default_factory=list)
    peak: dict[str, float] = field(default_factory=dict)

    async def run(self, period: float = 0.1) -> None:
        while True:
            try:
                v = await self.judge()
            except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
                self.unreadable += 1  # the API server is away (a fault): not judged
            else:
                self.polls += 1
                if not v.safe:
                    self.violations.append(str(v))
                for key, fill in v.fill.items():
                    self.peak[key] = max(fill, self.peak.get(key, 0.0))
            await asyncio.sleep(period)  # the poll period of the invariant check


@contextlib.asynccontextmanager
async def invariant_during(
    client: KubeClient, namespace: str, period: float = 0.1
) -> AsyncIterator[StormInvariant]:
    """Poll Σ ≤ hard in the background for the duration of the block; afterwards polls were
    judged and none found an over-admission."""
    async with _polled(lambda: verdict(client, namespace), namespace, period) as inv:
        yield inv


@contextlib.asynccontextmanager
async def cluster_invariant_during(
    client: KubeClient,
    name: str,
    namespaces: Sequence[str],
    period: float = 0.1,
    around: Around | None = None,
) -> AsyncIterator[StormInvariant]:
    """`invariant_during` for the cluster quota `name` over `namespaces` (`cluster_verdict`)."""
    async with _polled(
        lambda: cluster_verdict(client, name, namespaces, around), f"cluster quota {name}", period
    ) as inv:
        yield inv


@contextlib.asynccontextmanager
async def _polled(
    judge: Callable[[], Awaitable[Verdict]], what: str, period: float
) -> AsyncIterator[StormInvariant]:
    inv = StormInvariant(judge, what)
    task = asyncio.create_task(inv.run(period))
    try:
        yield inv
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    print(f"\nin-storm invariant in {what}: {inv.polls} polls, {inv.unreadable} unreadable")
    assert inv.polls > 0, f"the invariant was never polled during the storm in {what}"
    if inv.violations:
        raise InvariantViolation(f"over-admitted during the storm in {what}:\n{inv.violations[0]}")


@dataclass
class Stack:
    """karmadaquota on a bed as a cluster runs it: controllers sharing one Lease (one leads),
    two webhook replicas behind one address (a Service), registered in karmada-apiserver."""

    bed: TestBed
    lease: str
    ttl: str
    controllers: list[product.Proc] = field(default_factory=list)
    webhooks: list[product.WebhookProc] = field(default_factory=list)

    def start_controller(self) -> product.Proc:
        proc, _ = product.start_controller(
            self.bed,
            f"{self.lease}-{len(self.controllers)}",
            env={"KARMADAQUOTA_LEASE_NAME": self.lease},
        )
        self.controllers.append(proc)
        return proc

    async def restart_webhook(
        self, i: int, env: dict[str, str] | None = None
    ) -> product.WebhookProc:
        """Start replica `i` again on its port (after it was killed), with the stack's TTL
        (as it is now) and `env` added to its environment."""
        old = self.webhooks[i]
        old.proc.stop()
        hook = await product.start_webhook(
            self.bed, old.proc.name, self.ttl, False, port=old.port, env=env
        )
        self.webhooks[i] = hook
        return hook

    def leader(self) -> product.Proc | None:
        """The controller holding the Lease (its identity is host_pid)."""
        lease = self.bed.get("lease", self.lease, namespace="karmada-system") or {}
        holder = str(lease.get("spec", {}).get("holderIdentity", ""))
        for c in self.controllers:
            if c.popen.poll() is None and holder.endswith(f"_{c.popen.pid}"):
                return c
        return None


@contextlib.asynccontextmanager
async def stack(bed: TestBed, controllers: int = 1, ttl: str = "20s") -> AsyncIterator[Stack]:
    await asyncio.to_thread(product.install_crd, bed)
    s = Stack(bed, f"kq-campaign-{secrets.token_hex(3)}", ttl)
    try:
        for _ in range(controllers):
            s.start_controller()
        for name in ("webhook-r0", "webhook-r1"):
            s.webhooks.append(await product.start_webhook(bed, f"{name}-{s.lease}", ttl))
        with product.round_robin_proxy(bed, [w.port for w in s.webhooks]) as port:
            base = f"https://127.0.0.1:{port}"
            await asyncio.to_thread(product.register, bed, base, s.webhooks[0].ca_bundle)
            try:
                yield s
            finally:
                await asyncio.to_thread(product.unregister, bed)
    finally:
        for w in s.webhooks:
            w.proc.stop()
        for c in s.controllers:
            c.stop()


async def create_quotas(
    client: KubeClient, namespace: str, timeout: float = 60, on_exceed: str | None = None
) -> None:
    """The campaign's quotas, once the controller initialised every one's status.used."""
    path = QUOTA_PATH.format(ns=namespace)
    wanted = quotas(namespace, on_exceed)
    for q in wanted:
        await client.post(path, q)
    deadline = time.monotonic() + timeout
    while True:
        items = (await client.get(path))["items"]
        ready = [
            q for q in items if set(q["spec"]["hard"]) <= set(q.get("status", {}).get("used", {}))
        ]
        if len(ready) == len(wanted):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"quotas in {namespace} not initialised: {items}")
        await asyncio.sleep(0.2)  # polling interval


async def create_cluster_quota(
    client: KubeClient,
    name: str,
    namespaces: Sequence[str],
    hard: dict[str, str] | None = None,
    timeout: float = 60,
) -> None:
    """Label `namespaces` for the cluster quota `name` and create it; return once the
    controller initialised its `used`, counts every one of them selected and enforced them
    (labelled for the webhook: a namespace with no KarmadaQuota is enforced by this one)."""
    for ns in namespaces:
        await client.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}",
            {"metadata": {"labels": {CLUSTER_LABEL: name}}},
            content_type=MERGE_PATCH,
        )
    body = cluster_quota(name, hard)
    await client.post(CKQ_PATH, body)
    deadline = time.monotonic() + timeout
    while True:
        status = (await client.get(f"{CKQ_PATH}/{name}")).get("status") or {}
        enforced = any(
            c.get("type") == "Enforced" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if (
            set(body["spec"]["hard"]) <= set(status.get("used", {}))
            and status.get("selectedNamespaces") == len(namespaces)
            and enforced
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"cluster quota {name} not initialised: {status}")
        await asyncio.sleep(0.2)  # polling interval


async def delete_cluster_quota(client: KubeClient, name: str) -> None:
    """The cluster quota goes (it is cluster-scoped: a namespace's deletion does not take it)."""
    with contextlib.suppress(NotFound):
        await client.request("DELETE", f"{CKQ_PATH}/{name}")


DIRECT_PREFIX = "direct-"  # the names of the pods `direct_pods` makes


def pods_around(member: KubeClient, namespace: str) -> Around:
    """What the pods `direct_pods` made in `member` hold now, as quota resources (pods,
    requests.cpu, requests.memory): read from the member, the pods it runs."""

    async def read() -> dict[str, Fraction]:
        held = dict.fromkeys(("pods", "requests.cpu", "requests.memory"), Fraction(0))
        for pod in (await member.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]:
            if not pod["metadata"]["name"].startswith(DIRECT_PREFIX):
                continue
            held["pods"] += 1
            for c in pod["spec"]["containers"]:
                for resource, value in c.get("resources", {}).get("requests", {}).items():
                    held[f"requests.{resource}"] += reference.quantity(value)
        return held

    return read


def _pod(name: str, rng: random.Random) -> JSON:
    requests = {"cpu": rng.choice(POD_CPU), "memory": rng.choice(POD_MEMORY)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "nginx", "resources": {"requests": requests}}]
        },
    }


async def direct_pods(
    member: KubeClient, namespace: str, seed: int, ops: int, pace: float = 0.15
) -> tuple[Stats, list[str]]:
    """Pods created (and some deleted) directly in a member, around Karmada: `ops` seeded
    operations, one at a time, spread over `ops × pace / 2` seconds on average so that they
    land while the storm runs. (Stats, names of the pods left)."""
    rng = random.Random(seed ^ 0x5EED)
    path = f"/api/v1/namespaces/{namespace}/pods"
    stats, live = Stats(), list[str]()
    for i in range(ops):
        try:
            if live and rng.random() < 0.25:
                name = live.pop(rng.randrange(len(live)))
                await member.request("DELETE", f"{path}/{name}", _NOW)
                stats.record("pod-delete", "ok")
            else:
                name = f"{DIRECT_PREFIX}{i:03d}"
                await member.post(path, _pod(name, rng))
                live.append(name)
                stats.record("pod-create", "ok")
        except KubeError as e:  # past the member's guard: exceeded quota
            stats.record("pod", "refused", e.message)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            stats.record("pod", "unavailable", type(e).__name__)
        await asyncio.sleep(rng.uniform(0, pace))  # spreads the pods over the storm (pacing)
    return stats, live


_NOW = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}


async def delete_pods(member: KubeClient, namespace: str, names: Sequence[str]) -> None:
    """Delete the direct pods (at once: they run nowhere), so that the guarded quota's usage
    is the bindings' charges again."""
    for name in names:
        with contextlib.suppress(NotFound):
            await member.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", _NOW)


def seed_from_env() -> int:
    """KARMADAQUOTA_SEED replays a run; otherwise a fresh seed (printed by the tests)."""
    raw = os.environ.get("KARMADAQUOTA_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(2**32)


def long_run() -> bool:
    """KARMADAQUOTA_LONG=1: the local, larger campaign sizes."""
    return os.environ.get("KARMADAQUOTA_LONG", "") not in ("", "0")
