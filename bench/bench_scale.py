"""Scale benchmark on a real API server: many quotas and cluster quotas, many bindings placed on
many member clusters, one very large namespace.

Objects are created first (Cluster objects besides the bed's real members, namespaces, a
KarmadaQuota each, ClusterKarmadaQuotas each selecting a block of those namespaces by label,
bindings placed round-robin on every cluster), with karmadaquota not running; then:

* controller cold start: process start until every quota and cluster quota reports
  `Ready=True` with usage counting exactly its bindings (followed by a watch, not by polling
  lists: a list of 5,000 statuses every half second would load the API server it measures);
  `--profile DIR` records the controller's CPU through the cold start with py-spy;
* webhook cache sync: process start until `/readyz` answers 200;
* admission latency of sequential binding creates (client side, through the API server) in a
  small namespace, the big one and one whose only quota matches nothing (`floor`: the webhook
  call alone), each create followed by the same create in a namespace the webhook skips (the
  limit: Karmada with no webhook of ours, on the same store, under the same load); the
  webhook's own review time (server side histograms); the controller's CPU per binding event
  in each namespace (proportional to the namespace, not to the store);
* release after a delete: a binding deleted until its quota's and its cluster quota's `used`
  drop by it;
* relabelling: a namespace moved from one cluster quota's selector to another's, until both
  quotas' `used` and `selectedNamespaces` say so (and back);
* RSS (and peak RSS) of both processes, right after the cold start and at the end.

The Cluster objects beyond the bed's real members are `syncMode: Pull` with no credentials:
bindings are placed on them and charged per cluster, but no pods are observed there and no
guards kept (their quotas' `MemberObserved` condition names them).

    python -m bench.bench_scale                  # small: 50 namespaces, 3,000 bindings
    python -m bench.bench_scale --namespaces 1000 --per-namespace 20 --big 10000   # design size
    python -m bench.bench_scale --target         # issue 37: 100 clusters, 100,000 bindings, ...

Run it through `flock /tmp/kq-e2e.lock` when the bed is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import orjson

from bench.bench_admission import cpu_seconds, histogram, quantile
from bench.harness import NO_WEBHOOK_LABEL
from e2e.testbed import TestBed, product
from e2e.testbed.storm import binding
from karmadaquota.kube.client import JSON, KubeClient, KubeError, NotFound
from karmadaquota.quantity import Quantity

RB = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
ALL_QUOTAS = "/apis/quota.karmada.io/v1alpha1/karmadaquotas"
CLUSTER_QUOTAS = "/apis/quota.karmada.io/v1alpha1/clusterkarmadaquotas"
CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters"
BIG = "scale-big"
SKIP = "scale-skip"  # outside the webhook registration: the limit latencies are compared with
# reviewed by the webhook, whose only quota matches no binding (scoped to an unused priority
# class): the price of the webhook call alone, nothing charged or written
FLOOR = "scale-floor"
UNUSED_SCOPE = {
    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["unused"]}]
}
TEAM = "bench.karmadaquota.io/team"

# issue 37: 100 clusters (3 real), 5,000 namespaces × 18 bindings + 10,000 in one: 100,000
# bindings, 5,001 quotas, 50 cluster quotas × 100 namespaces
TARGET = {
    "members": 3,
    "clusters": 100,
    "namespaces": 5000,
    "per_namespace": 18,
    "big": 10000,
    "cluster_quotas": 50,
    "per_cluster_quota": 100,
    "probes": 100,
    "ready_timeout": 600.0,
}


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of a process, MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def bounded(
    api: KubeClient, posts: Iterable[tuple[str, JSON]], limit: int = 16, tries: int = 5
) -> None:
    """POST each object, `limit` at a time; a server error (a timed-out webhook of Karmada's
    on a loaded machine) is retried, an object that already exists counts as created."""
    gate = asyncio.Semaphore(limit)

    async def one(path: str, body: JSON) -> None:
        async with gate:
            for attempt in range(tries):
                try:
                    await api.post(path, body)
                    return
                except KubeError as e:
                    if e.status == 409:
                        return
                    if e.status < 500 or attempt == tries - 1:
                        raise

    await asyncio.gather(*(one(p, b) for p, b in posts))


@dataclass
class Size:
    """What is created, and who selects what."""

    members: list[str]  # the bed's real members (Clusters the bed joined)
    fake_clusters: list[str]  # Cluster objects with nothing behind them
    namespaces: list[str]  # each with a KarmadaQuota and `per_namespace` bindings
    per_namespace: int
    big: int  # bindings of BIG (a KarmadaQuota, no cluster quota)
    teams: dict[str, list[str]]  # cluster quota name -> the namespaces it selects
    counts: dict[str, int] = field(init=False)  # bindings per namespace

    def __post_init__(self) -> None:
        self.counts = {ns: self.per_namespace for ns in self.namespaces} | {BIG: self.big}
        self.counts[SKIP] = self.per_namespace
        self.counts[FLOOR] = 0

    @property
    def clusters(self) -> list[str]:
        return [*self.members, *self.fake_clusters]

    @property
    def probed(self) -> list[tuple[str, str, int]]:
        """The namespaces admission latency is measured in: label, name, bindings there."""
        return [
            ("small", self.namespaces[0], self.per_namespace),
            ("big", BIG, self.big),
            ("floor", FLOOR, 0),
        ]

    @property
    def bindings(self) -> int:
        return sum(self.counts.values())

    def team_of(self, ns: str) -> str | None:
        return next((t for t, names in self.teams.items() if ns in names), None)


def size_of(args: argparse.Namespace) -> Size:
    namespaces = [f"scale-{i:04d}" for i in range(args.namespaces)]
    members = [f"member{i + 1}" for i in range(args.members)]
    fakes = [f"scale-c{i:03d}" for i in range(max(0, args.clusters - len(members)))]
    per = args.per_cluster_quota
    teams = {
        f"team-{t:02d}": namespaces[t * per : (t + 1) * per] for t in range(args.cluster_quotas)
    }
    if any(len(names) < per for names in teams.values()):
        raise SystemExit("--cluster-quotas × --per-cluster-quota exceeds --namespaces")
    return Size(members, fakes, namespaces, args.per_namespace, args.big, teams)


def placed(ns: str, name: str, cluster: str) -> JSON:
    """A binding the scheduler placed on one cluster (1 replica, 100m)."""
    rb = binding(ns, name)
    rb["spec"]["clusters"] = [{"name": cluster, "replicas": 1}]
    return rb


def cpu_m(n: int) -> str:
    return f"{n * 100}m"


async def populate(api: KubeClient, size: Size) -> None:
    """Clusters, namespaces, quotas (room for everything), bindings; karmadaquota not running."""
    await bounded(
        api,
        (
            (
                CLUSTERS,
                {
                    "apiVersion": "cluster.karmada.io/v1alpha1",
                    "kind": "Cluster",
                    "metadata": {"name": c},
                    "spec": {"syncMode": "Pull", "apiEndpoint": "https://127.0.0.1:9"},
                },
            )
            for c in size.fake_clusters
        ),
    )

    def ns_obj(ns: str) -> JSON:
        team = size.team_of(ns)
        labels = {TEAM: team} if team else {}
        if ns == SKIP:
            labels[NO_WEBHOOK_LABEL] = "true"
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}

    await bounded(api, (("/api/v1/namespaces", ns_obj(ns)) for ns in size.counts))
    room = {"requests.cpu": "100000", "pods": "1000000"}
    await bounded(
        api,
        (
            (
                QUOTAS.format(ns=ns),
                product.quota(ns, "q", room, scopeSelector=UNUSED_SCOPE)
                if ns == FLOOR
                else product.quota(ns, "q", room),
            )
            for ns in size.counts
            if ns != SKIP
        ),
    )
    await bounded(
        api,
        (
            (
                CLUSTER_QUOTAS,
                {
                    "apiVersion": "quota.karmada.io/v1alpha1",
                    "kind": "ClusterKarmadaQuota",
                    "metadata": {"name": team},
                    "spec": {"hard": room, "namespaceSelector": {"matchLabels": {TEAM: team}}},
                },
            )
            for team in size.teams
        ),
    )
    clusters = size.clusters

    def bindings() -> Iterable[tuple[str, JSON]]:
        k = 0
        for ns, n in size.counts.items():
            for i in range(n):
                yield RB.format(ns=ns), placed(ns, f"b-{i:05d}", clusters[k % len(clusters)])
                k += 1

    await bounded(api, bindings())


def pods_used(obj: JSON) -> int | None:
    pods = (obj.get("status") or {}).get("used", {}).get("pods")
    # compared as a quantity: 10000 is written in canonical form, "10k"
    return None if pods is None else int(Quantity.parse(pods).nanos // 10**9)


def is_ready(obj: JSON) -> bool:
    conditions = (obj.get("status") or {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Readiness:
    """Which quotas and cluster quotas are Ready with exact usage, kept from a list and a watch
    of each kind (one event per status write)."""

    def __init__(self, api: KubeClient, size: Size) -> None:
        self.api = api
        self.size = size
        self.pending = {("q", ns) for ns in size.counts if ns != SKIP} | {
            ("c", t) for t in size.teams
        }
        self.left = {"q": len(size.counts) - 1, "c": len(size.teams)}  # not Ready, by kind
        self.ready_at: dict[str, float] = {}  # when the last of a kind became Ready
        self.done = asyncio.Event()
        self.total = len(self.pending)
        self.climb: list[float] = []  # [k]: when k + 1 were Ready at once for the first time
        self.writes: list[float] = []  # when each status write's watch event arrived

    def expect(self, ns: str) -> None:
        """The bench changed `ns`'s bindings: its quota (and its cluster quota) are pending
        until a status with the new count is seen."""
        team = self.size.team_of(ns)
        for key in (("q", ns), *((("c", team),) if team else ())):
            if key not in self.pending:
                self.pending.add(key)
                self.left[key[0]] += 1
        self.done.clear()

    def ready(self, ns: str) -> bool:
        return ("q", ns) not in self.pending

    def want(self, kind: str, obj: JSON) -> int:
        meta = obj["metadata"]
        if kind == "q":  # FLOOR's quota counts nothing (its scope matches no binding)
            ns = meta["namespace"]
            return 0 if ns == FLOOR else self.size.counts.get(ns, -1)
        return sum(self.size.counts[ns] for ns in self.size.teams.get(meta["name"], []))

    def see(self, kind: str, obj: JSON) -> None:
        meta = obj["metadata"]
        key = (kind, meta["namespace"] if kind == "q" else meta["name"])
        if is_ready(obj) and pods_used(obj) == self.want(kind, obj):
            if key in self.pending:
                self.pending.discard(key)
                self.left[kind] -= 1
                if not self.left[kind]:
                    self.ready_at[kind] = time.perf_counter()
                if self.total - len(self.pending) > len(self.climb):
                    self.climb.append(time.perf_counter())
        elif key not in self.pending:
            self.pending.add(key)
            self.left[kind] += 1
        if not self.pending:
            self.done.set()

    async def follow(self, kind: str, path: str) -> None:
        listed = await self.api.get(path)
        for obj in listed.get("items", []):
            self.see(kind, obj)
        rv = listed["metadata"]["resourceVersion"]
        while True:
            try:
                async for event, obj in self.api.watch(path, rv):
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event in ("ADDED", "MODIFIED"):
                        self.see(kind, obj)
                    if event == "MODIFIED":
                        self.writes.append(time.perf_counter())
            except KubeError:
                return await self.follow(kind, path)  # compacted: list again

    async def wait(self, timeout: float) -> int:
        """Wait until all are Ready or `timeout`; how many are not."""
        tasks = [
            asyncio.create_task(self.follow("q", ALL_QUOTAS)),
            asyncio.create_task(self.follow("c", CLUSTER_QUOTAS)),
        ]
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return len(self.pending)


class Profiler:
    """py-spy recording one process's CPU (raw collapsed stacks) until stopped."""

    def __init__(self, pid: int, out: Path) -> None:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.out = out
        self.popen = subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
             "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(60)
        except subprocess.TimeoutExpired:
            self.popen.kill()


async def probe(
    api: KubeClient, ns: str, count: int, tag: str, cluster: str
) -> dict[str, tuple[list[float], int]]:
    """Sequential creates alternating between `ns` and SKIP: client-side latency of each answer
    (seconds) and how many were refused, per namespace."""
    out: dict[str, tuple[list[float], int]] = {}
    for i in range(count):
        for where in (ns, SKIP):
            xs, refused = out.get(where, ([], 0))
            t0 = time.perf_counter()
            try:
                await api.post(RB.format(ns=where), placed(where, f"{tag}-{i:04d}", cluster))
            except KubeError:
                refused += 1
            xs.append(time.perf_counter() - t0)
            out[where] = (xs, refused)
    return out


async def stopwatch(
    api: KubeClient, paths: dict[str, int], deadline: float = 60, poll: float = 0.005
) -> float:
    """Seconds until every object at `paths` reports `used.pods` equal to its value (polled
    back to back, each path in parallel)."""
    t0 = time.perf_counter()

    async def one(path: str, pods: int) -> None:
        while pods_used(await api.get(path)) != pods:
            if time.perf_counter() - t0 > deadline:
                raise TimeoutError(f"{path}: used.pods never reached {pods}")
            await asyncio.sleep(poll)  # polling with a deadline

    await asyncio.gather(*(one(p, n) for p, n in paths.items()))
    return time.perf_counter() - t0


def expected(size: Size, team: str) -> int:
    """Pods a cluster quota counts now (its namespaces' bindings as `size.counts` tracks them)."""
    return sum(size.counts[ns] for ns in size.teams[team])


async def gone(api: KubeClient, path: str, deadline: float = 120) -> float:
    """Seconds until the object at `path` is gone (Karmada's finalizer on a binding removed)."""
    t0 = time.perf_counter()
    while True:
        try:
            await api.get(path)
        except NotFound:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > deadline:
            raise TimeoutError(f"{path} still there after {deadline} s")
        await asyncio.sleep(0.005)  # polling with a deadline


async def releases(api: KubeClient, size: Size, trials: int) -> tuple[list[float], list[float]]:
    """Delete populate's bindings one at a time in a namespace a cluster quota selects (no
    probe went there): until its quota's and its cluster quota's `used` drop by one, and
    until the binding is gone (karmada-controller-manager removes its finalizer first)."""
    team, names = next(iter(size.teams.items()), ("", size.namespaces))
    ns = names[1] if len(names) > 1 else names[0]
    q = f"{QUOTAS.format(ns=ns)}/q"
    released, removed = [], []
    for i in range(min(trials, size.per_namespace)):
        path = f"{RB.format(ns=ns)}/b-{i:05d}"
        await api.request("DELETE", path)
        size.counts[ns] -= 1
        want = {q: size.counts[ns]}
        if team:
            want[f"{CLUSTER_QUOTAS}/{team}"] = expected(size, team)
        took, away = await asyncio.gather(stopwatch(api, want, 120), gone(api, path))
        released.append(took)
        removed.append(away)
    return released, removed


def spare(size: Size) -> list[str]:
    """Namespaces no probe, release or relabel touches (the cold start's and the restart's
    deletes go there), in a cluster quota or not."""
    used = {size.namespaces[0], size.namespaces[1] if len(size.namespaces) > 1 else ""}
    used |= {names[-1] for names in size.teams.values() if names}
    return [ns for ns in reversed(size.namespaces[2:]) if ns not in used]


async def release_one(
    api: KubeClient,
    size: Size,
    ns: str,
    readiness: Readiness | None = None,
    deadline: float = 150,
    poll: float = 0.005,
) -> float:
    """Delete the last of `ns`'s populated bindings; seconds until its quota's `used` (and its
    cluster quota's) drop by it."""
    n = size.counts[ns]
    # counted (and expected) before the delete: a status written before the DELETE answers
    # would otherwise be judged against the old count and stay pending for good
    size.counts[ns] -= 1
    if readiness is not None:
        readiness.expect(ns)
    await api.request("DELETE", f"{RB.format(ns=ns)}/b-{n - 1:05d}")
    want = {f"{QUOTAS.format(ns=ns)}/q": size.counts[ns]}
    team = size.team_of(ns)
    if team:
        want[f"{CLUSTER_QUOTAS}/{team}"] = expected(size, team)
    return await stopwatch(api, want, deadline, poll)


async def cold_releases(
    api: KubeClient, size: Size, readiness: Readiness, into: list[float], every: float = 5.0
) -> None:
    """Through the cold start (until cancelled): one delete at a time, in a namespace whose
    quota (and cluster quota) is Ready with exact usage already, timed until both say so —
    a release must not wait for the rest of the cold start."""
    left = spare(size)
    while left:
        await asyncio.sleep(every)  # pacing the deletes, not synchronising
        ready = [
            ns
            for ns in left
            if readiness.ready(ns)
            and (size.team_of(ns) is None or ("c", size.team_of(ns)) not in readiness.pending)
        ]
        if not ready:
            continue
        ns = ready[0]
        left.remove(ns)
        with contextlib.suppress(TimeoutError):
            # polled every 50 ms: the cold start's API server is what is measured
            into.append(await release_one(api, size, ns, readiness, poll=0.05))
            continue
        into.append(float("inf"))


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest window with no status write between the first write and `end`, and when it
    began (s from `start`)."""
    xs = sorted(t for t in times if start <= t <= end)
    if not xs:
        return (end - start, 0.0)
    best = (0.0, xs[0] - start)
    for a, b in zip(xs, [*xs[1:], end], strict=True):
        if b - a > best[0]:
            best = (b - a, a - start)
    return best


async def restarted(
    bed: TestBed,
    api: KubeClient,
    size: Size,
    old: product.Proc,
    extra: list[str],
    name: str,
    standby: bool,
) -> tuple[dict[str, float], product.Proc]:
    """The leader replaced, every status already written. `standby`: another replica is started
    and listed first (a follower), then the leader stops (SIGTERM: it gives the Lease up), as
    when the leader moves; else the leader stops, then a new one starts (one replica). Seconds
    from then until the new one is synced and leading, and until a delete made then is
    released (it enforces again); the status writes it made meanwhile, and how many quotas were
    not Ready with exact usage then."""
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    if standby:
        proc, port = product.start_controller(bed, name, *extra)
        while True:
            with contextlib.suppress(OSError, asyncio.TimeoutError, aiohttp.ClientError):
                m = await product.controller_metrics(port, timeout=5)
                if m.get("karmadaquota_controller_synced") == 1:
                    break
            await asyncio.sleep(0.5)  # polling the new process's /metrics
        out["standby synced"] = time.perf_counter() - t0
        await asyncio.to_thread(old.stop)
        t0 = time.perf_counter()
    else:
        await asyncio.to_thread(old.stop)
        t0 = time.perf_counter()
        proc, port = product.start_controller(bed, name, *extra)

    async def leading() -> None:
        while True:
            with contextlib.suppress(OSError, asyncio.TimeoutError, aiohttp.ClientError):
                m = await product.controller_metrics(port, timeout=5)
                if m.get("karmadaquota_controller_synced") == 1 and m.get("karmadaquota_leader"):
                    out["synced and leading"] = time.perf_counter() - t0
                    return
            await asyncio.sleep(0.2)  # polling the new process's /metrics

    ns = spare(size)[-1]
    try:
        took, _ = await asyncio.gather(release_one(api, size, ns, deadline=120), leading())
        out["release"] = took
    except TimeoutError:
        out["release"] = float("inf")
    counted = await product.controller_metrics(port)
    out["writes"] = counted.get('karmadaquota_status_writes_total{result="ok"}', 0.0)
    readiness = Readiness(api, size)
    for kind, path in (("q", ALL_QUOTAS), ("c", CLUSTER_QUOTAS)):
        for obj in (await api.get(path)).get("items", []):
            readiness.see(kind, obj)
    out["not ready"] = float(len(readiness.pending))
    return out, proc


async def relabels(api: KubeClient, size: Size, trials: int) -> list[float]:
    """Move a namespace from one cluster quota to the next and back, `trials` times each way:
    until both quotas' `used` say so."""
    if len(size.teams) < 2:
        return []
    (a, names), (b, _) = list(size.teams.items())[:2]
    ns = names[-1]  # no probe or release touches it
    out = []
    for _ in range(trials):
        for src, dst in ((a, b), (b, a)):
            await api.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {TEAM: dst}}})
            size.teams[src].remove(ns)
            size.teams[dst].append(ns)
            out.append(
                await stopwatch(api, {f"{CLUSTER_QUOTAS}/{t}": expected(size, t) for t in (a, b)})
            )
    return out


@dataclass
class Figures:
    populate: float = 0.0
    cold_start: float = 0.0
    ready_at: dict[str, float] = field(default_factory=dict)  # the last quota, cluster quota
    not_ready: int = 0
    sync: float = 0.0
    rss_ready: dict[str, tuple[float, float]] = field(default_factory=dict)
    rss_end: dict[str, tuple[float, float]] = field(default_factory=dict)
    latency: dict[str, dict[str, tuple[list[float], int]]] = field(default_factory=dict)
    review: dict[str, tuple[float, float]] = field(default_factory=dict)
    own: dict[str, tuple[float, float]] = field(default_factory=dict)
    event_cpu: dict[str, float] = field(default_factory=dict)  # controller ms per create
    # during each probe set: the webhook's status writes, its lost compare-and-swaps, its write
    # p99 (bucket bound, s); the controller's status writes and lost compare-and-swaps
    contention: dict[str, tuple[float, float, float, float, float]] = field(default_factory=dict)
    release: list[float] = field(default_factory=list)
    gone: list[float] = field(default_factory=list)  # until the deleted binding is gone
    relabel: list[float] = field(default_factory=list)
    # releases timed through the cold start (a delete in a namespace already Ready)
    cold_release: list[float] = field(default_factory=list)
    # the longest window without a status write until every quota was Ready: (s, began at s)
    gap: tuple[float, float] = (0.0, 0.0)
    # the leader replaced with every status written (`restarted`): by a new process, and by a
    # standby replica (True)
    restart: dict[bool, dict[str, float]] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # 1-min load average before / after
    errors: list[str] = field(default_factory=list)
    writes: int = 0  # quota status writes by the controller until every quota was Ready
    cold_cpu: float = 0.0  # the controller's CPU seconds until then
    # the cold start's timeline, seconds from the controller's start: its lists' ends (from
    # its log), when the first, 10/50/90 % and all of the quotas were Ready
    timeline: dict[str, float] = field(default_factory=dict)
    write_rate: list[int] = field(default_factory=list)  # quota status events per 10 s
    write_time: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # p50/90/99 s, count
    rss_trace: list[tuple[float, float]] = field(default_factory=list)  # (s, MiB) cold start
    # after everything else: every binding listed by the bench, by page size (s, pages)
    list_pages: dict[int, tuple[float, int]] = field(default_factory=dict)


async def list_time(api: KubeClient, limit: int) -> tuple[float, int]:
    """Seconds to list every binding `limit` at a time (a consistent list, as the controller
    lists: resourceVersion unset), decoding each page and dropping it; and the pages."""
    t0, pages, params = time.perf_counter(), 0, {"limit": str(limit)}
    while True:
        doc = await api.get("/apis/work.karmada.io/v1alpha2/resourcebindings", params)
        pages += 1
        token = (doc.get("metadata") or {}).get("continue")
        if not token:
            return time.perf_counter() - t0, pages
        params = {"limit": str(limit), "continue": token}


async def sample_rss(pid: int, into: list[tuple[float, float]], every: float = 0.25) -> None:
    """The controller's RSS through its cold start (when its peak is reached, and at what)."""
    while True:
        with contextlib.suppress(OSError):
            into.append((time.perf_counter(), rss_mib(pid)[0]))
        await asyncio.sleep(every)  # sampling, not synchronising


def rss_at(trace: list[tuple[float, float]], at: float) -> float:
    """The last RSS sampled at or before `at` seconds (nan before the first sample)."""
    return max(((t, m) for t, m in trace if t <= at), default=(0.0, float("nan")))[1]


LISTED = re.compile(r"^ts=(\S+) .*msg=listed path=(\S+) objects=(\d+) seconds=([\d.]+)")


def lists_ended(log: Path, started: float) -> dict[str, float]:
    """Seconds from `started` (wall clock) to the end of the controller's first list of
    bindings and of quotas, from its log's `listed` lines (ms timestamps)."""
    out: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = LISTED.match(line)
        if not m:
            continue
        kind = m[2].rsplit("/", 1)[-1]  # an informer's name, or its path
        if kind not in ("resourcebindings", "karmadaquotas") or f"{kind} listed" in out:
            continue
        at = datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
        out[f"{kind} listed"] = at - started
        out[f"{kind} list took"] = float(m[4])
    return out


def climb(readiness: Readiness, t0: float) -> dict[str, float]:
    """When the first quota was Ready and when 10/50/90/100 % were at once (s from `t0`)."""
    out: dict[str, float] = {}
    for label, share in (("first", 0.0), ("10 %", 0.1), ("50 %", 0.5), ("90 %", 0.9)):
        k = max(1, math.ceil(share * readiness.total))
        if len(readiness.climb) >= k:
            out[f"{label} Ready"] = readiness.climb[k - 1] - t0
    if len(readiness.climb) == readiness.total:
        out["100 % Ready"] = readiness.climb[-1] - t0
    return out


def per_10s(times: list[float], t0: float, end: float) -> list[int]:
    counts = [0] * (int((end - t0) // 10) + 1)
    for t in times:
        if t0 <= t <= end:
            counts[int((t - t0) // 10)] += 1
    return counts


def bucketed(counted: dict[str, float], name: str) -> dict[float, float]:
    """A histogram's cumulative buckets from parsed metrics (`product.controller_metrics`)."""
    out: dict[float, float] = {}
    for key, value in counted.items():
        if key.startswith(f"{name}_bucket{{") and 'le="' in key:
            le = key.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + value
    return out


def writes_of(scraped: str) -> tuple[float, float, dict[float, float]]:
    """The webhook's status writes, its lost compare-and-swaps and its write-time histogram."""
    written = conflicts = 0.0
    for line in scraped.splitlines():
        if line.startswith('karmadaquota_status_writes_total{result="ok"}'):
            written = float(line.rsplit(" ", 1)[1])
        elif line.startswith("karmadaquota_status_write_conflicts_total "):
            conflicts = float(line.rsplit(" ", 1)[1])
    return written, conflicts, histogram(scraped, "karmadaquota_status_write_duration_seconds")


def controller_writes(counted: dict[str, float]) -> tuple[float, float]:
    """The controller's status writes and its lost compare-and-swaps."""
    writes = "karmadaquota_status_writes_total{result="
    return counted.get(f'{writes}"ok"}}', 0.0), counted.get(f'{writes}"conflict"}}', 0.0)


def note(text: str) -> None:
    """A figure as soon as it is measured (a later phase failing does not lose it)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


async def run(args: argparse.Namespace) -> str:
    size = size_of(args)
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-scale-"))
    bed = TestBed.start(home, size.members, ephemeral=True, quiet=True)
    procs: list[product.Proc] = []
    fig = Figures()
    fig.load = (loadavg(), 0.0)
    try:
        await asyncio.to_thread(product.install_crd, bed)
        api = await KubeClient.connect(str(bed.karmada_kubeconfig))
        t0 = time.perf_counter()
        await populate(api, size)
        fig.populate = time.perf_counter() - t0

        readiness = Readiness(api, size)
        t0, wall0 = time.perf_counter(), time.time()
        controller, port = product.start_controller(bed, "scale-controller", *args.controller_arg)
        procs.append(controller)
        pid = controller.popen.pid
        spy = Profiler(pid, Path(args.profile) / "controller-cold.txt") if args.profile else None
        sampler = asyncio.create_task(sample_rss(pid, fig.rss_trace))
        deletes = asyncio.create_task(cold_releases(api, size, readiness, fig.cold_release))
        fig.not_ready = await readiness.wait(args.ready_timeout)
        for task in (sampler, deletes):
            task.cancel()
        await asyncio.gather(sampler, deletes, return_exceptions=True)
        fig.rss_trace = [(at - t0, mib) for at, mib in fig.rss_trace]
        fig.cold_start = time.perf_counter() - t0
        fig.ready_at = {k: at - t0 for k, at in readiness.ready_at.items()}
        if spy is not None:
            spy.stop()
        note(
            f"populated in {fig.populate:.0f} s; cold start {fig.cold_start:.1f} s "
            f"(quotas {fig.ready_at.get('q', 0):.1f} s, cluster quotas "
            f"{fig.ready_at.get('c', 0):.1f} s)"
        )
        counted = await product.controller_metrics(port)
        fig.writes = int(counted.get('karmadaquota_status_writes_total{result="ok"}', 0))
        fig.cold_cpu = cpu_seconds(pid)
        fig.timeline = lists_ended(controller.log, wall0) | climb(readiness, t0)
        fig.write_rate = per_10s(readiness.writes, t0, t0 + fig.cold_start)
        fig.gap = longest_gap(readiness.writes, t0, t0 + fig.cold_start)
        note(f"longest window without a status write {fig.gap}; releases {fig.cold_release}")
        took = bucketed(counted, "karmadaquota_status_write_duration_seconds")
        if took:
            fig.write_time = (
                quantile({}, took, 0.5),
                quantile({}, took, 0.9),
                quantile({}, took, 0.99),
                took[float("inf")],
            )
        note(
            f"timeline {fig.timeline}; status events per 10 s {fig.write_rate}; rss (s, MiB) "
            f"{[(round(t), round(m)) for t, m in fig.rss_trace[::20]]}"
        )
        if args.profile:  # one quota and one cluster quota as written (docs: bytes per quota)
            for path, file in (
                (f"{QUOTAS.format(ns=size.namespaces[0])}/q", "quota.json"),
                (f"{CLUSTER_QUOTAS}/{next(iter(size.teams), '')}", "ckq.json"),
            ):
                with contextlib.suppress(KubeError):
                    (Path(args.profile) / file).write_bytes(orjson.dumps(await api.get(path)))
        await asyncio.sleep(5)  # the controller settles (its last writes, GC) before RSS is read
        fig.rss_ready["controller"] = rss_mib(pid)

        t0 = time.perf_counter()
        hook = await product.start_webhook(bed, "scale-webhook")
        procs.append(hook.proc)
        fig.sync = time.perf_counter() - t0
        fig.rss_ready["webhook"] = rss_mib(hook.proc.popen.pid)
        note(f"rss {fig.rss_ready}; webhook synced in {fig.sync:.1f} s")
        skip = {"key": NO_WEBHOOK_LABEL, "operator": "DoesNotExist"}
        await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle, [skip])

        own_name = "karmadaquota_admission_own_duration_seconds"
        whole = "karmadaquota_admission_duration_seconds"
        for label, ns, _ in size.probed:
            scraped = await hook.metrics()
            before, before_r = histogram(scraped, own_name), histogram(scraped, whole)
            writes0, ctl0 = (
                writes_of(scraped),
                controller_writes(await product.controller_metrics(port)),
            )
            cpu0 = cpu_seconds(pid)
            fig.latency[label] = await probe(
                api, ns, args.probes, f"probe-{label}", size.clusters[-1]
            )
            size.counts[ns] += args.probes - fig.latency[label][ns][1]  # admitted ones count
            fig.event_cpu[label] = (cpu_seconds(pid) - cpu0) / (2 * args.probes) * 1000
            scraped = await hook.metrics()
            after, after_r = histogram(scraped, own_name), histogram(scraped, whole)
            fig.own[label] = (quantile(before, after, 0.5), quantile(before, after, 0.99))
            fig.review[label] = (
                quantile(before_r, after_r, 0.5),
                quantile(before_r, after_r, 0.99),
            )
            writes1, ctl1 = (
                writes_of(scraped),
                controller_writes(await product.controller_metrics(port)),
            )
            fig.contention[label] = (
                writes1[0] - writes0[0],
                writes1[1] - writes0[1],
                quantile(writes0[2], writes1[2], 0.99),
                ctl1[0] - ctl0[0],
                ctl1[1] - ctl0[1],
            )
        note(
            f"latency done: review {fig.review}, own {fig.own}, cpu/event {fig.event_cpu}, "
            f"writes (webhook ok, conflicts, p99; controller ok, conflicts) {fig.contention}"
        )
        try:
            fig.release, fig.gone = await releases(api, size, args.trials)
            note(f"release {sorted(fig.release)}; binding gone {sorted(fig.gone)}")
            fig.relabel = await relabels(api, size, max(1, args.trials // 4))
            note(f"relabel {sorted(fig.relabel)}")
        except TimeoutError as e:  # reported with the figures measured before it
            fig.errors.append(str(e))
        fig.rss_end = {"controller": rss_mib(pid), "webhook": rss_mib(hook.proc.popen.pid)}
        leader = controller
        for standby in (False, True):
            try:
                fig.restart[standby], leader = await restarted(
                    bed, api, size, leader, args.controller_arg,
                    f"scale-controller-{'standby' if standby else 'restarted'}", standby,
                )  # fmt: skip
                procs.append(leader)
                note(f"restart (standby {standby}) {fig.restart[standby]}")
            except Exception as e:  # reported with the figures measured before it
                fig.errors.append(f"restart: {e!r}")
                break
        fig.load = (fig.load[0], loadavg())
        fig.list_pages = {page: await list_time(api, page) for page in (500, 2000, 5000)}
        note(f"binding list by the bench, by page size: {fig.list_pages}")
        await api.close()
        await asyncio.to_thread(product.unregister, bed)
        return report(args, size, fig)
    finally:
        for p in procs:
            p.stop()
        bed.stop()
        shutil.rmtree(home, ignore_errors=True)


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def report(args: argparse.Namespace, size: Size, fig: Figures) -> str:
    quotas = len(size.counts) - 1
    tl, nan = fig.timeline, float("nan")
    peak = max(fig.rss_trace, key=lambda tm: tm[1], default=(nan, nan))
    mib = {w: f"{r[0]:.0f} MiB" for w, r in fig.rss_ready.items()}
    end = {w: f"{r[0]:.0f} MiB (peak {r[1]:.0f} MiB)" for w, r in fig.rss_end.items()}
    ready = f"{fig.cold_start:.1f} s" + (
        f" (only {quotas + len(size.teams) - fig.not_ready} of {quotas + len(size.teams)} "
        "at the deadline)"
        if fig.not_ready
        else ""
    )
    lines = [
        f"{len(size.clusters)} clusters ({len(size.members)} real members), "
        f"{len(size.namespaces)} namespaces × (1 KarmadaQuota + {size.per_namespace} bindings) "
        f"+ one with {size.big} bindings + one the webhook skips with {size.per_namespace}: "
        f"{quotas} quotas, {len(size.teams)} ClusterKarmadaQuotas × "
        f"{args.per_cluster_quota} namespaces, {size.bindings} bindings placed on all clusters "
        f"(created in {fig.populate:.0f} s before karmadaquota started). Load average "
        f"{fig.load[0]:.1f} before, {fig.load[1]:.1f} after ({os.cpu_count()} CPUs).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| controller cold start until every quota Ready with exact usage | {ready} |",
        f"| — the last KarmadaQuota / the last ClusterKarmadaQuota Ready | "
        f"{fig.ready_at.get('q', float('nan')):.1f} s / "
        f"{fig.ready_at.get('c', float('nan')):.1f} s |",
        f"| controller CPU during the cold start / status writes | {fig.cold_cpu:.0f} s / "
        f"{fig.writes} |",
        f"| controller RSS after cold start / at the end (peak) | {mib['controller']} / "
        f"{end['controller']} |",
        f"| — the controller's lists ended: bindings / quotas (the binding list took) | "
        f"{tl.get('resourcebindings listed', nan):.1f} s / "
        f"{tl.get('karmadaquotas listed', nan):.1f} s "
        f"({tl.get('resourcebindings list took', nan):.1f} s) |",
        f"| — the first quota Ready / 10 % / 50 % / 90 % / 100 % (of {quotas + len(size.teams)}) | "
        + " / ".join(
            f"{tl.get(f'{k} Ready', nan):.1f} s" for k in ("first", "10 %", "50 %", "90 %", "100 %")
        )
        + " |",
        f"| — controller RSS when the bindings were listed / at its peak (at s) / when all "
        f"were Ready | {rss_at(fig.rss_trace, tl.get('resourcebindings listed', -1)):.0f} / "
        f"{peak[1]:.0f} ({peak[0]:.1f} s) / {rss_at(fig.rss_trace, fig.cold_start):.0f} MiB |",
        f"| — quota status events per 10 s through the cold start | "
        f"{', '.join(map(str, fig.write_rate))} |",
        f"| — controller status write time p50 / p90 / p99 (bucket bounds, retries included; "
        f"{fig.write_time[3]:.0f} writes) | ≤ {fig.write_time[0] * 1000:g} / "
        f"≤ {fig.write_time[1] * 1000:g} / ≤ {fig.write_time[2] * 1000:g} ms |",
        f"| — the longest window without a status write (from the first; began at) | "
        f"{fig.gap[0]:.1f} s (at {fig.gap[1]:.1f} s) |",
        f"| — release after delete through the cold start, p50 / p99 ({len(fig.cold_release)} "
        f"deletes in namespaces already Ready) | "
        f"{ms(statistics.median(fig.cold_release or [nan]))} / {ms(pct(fig.cold_release, 0.99))} |",
        *(
            f"| leader replaced by {'a standby replica (listed first in ' if standby else ''}"
            f"{format(r.get('standby synced', nan), '.1f') + ' s)' if standby else 'a new process'}"
            f", statuses written: synced and leading / a delete made then released / status "
            f"writes meanwhile / quotas not Ready then | "
            f"{r.get('synced and leading', nan):.1f} s / {r.get('release', nan):.1f} s / "
            f"{r.get('writes', nan):.0f} / {r.get('not ready', nan):.0f} |"
            for standby, r in fig.restart.items()
        ),
        f"| webhook start until cache synced (/readyz) | {fig.sync:.1f} s |",
        f"| webhook RSS after sync / at the end (peak) | {mib['webhook']} / {end['webhook']} |",
        *(f"| **not measured** | {e} |" for e in fig.errors),
        f"| release after delete, p50 / p99 ({len(fig.release)} deletes: quota and cluster "
        f"quota) | {ms(statistics.median(fig.release or [float('nan')]))} / "
        f"{ms(pct(fig.release, 0.99))} |",
        f"| the deleted binding gone (Karmada's finalizer), p50 / p99 | "
        f"{ms(statistics.median(fig.gone or [float('nan')]))} / {ms(pct(fig.gone, 0.99))} |",
        f"| namespace relabelled to another cluster quota, p50 / max ({len(fig.relabel)} "
        f"moves) | {ms(statistics.median(fig.relabel))} / {ms(max(fig.relabel))} |"
        if fig.relabel
        else "| relabel | no cluster quotas |",
        "| every binding listed by the bench at the end, 500 / 2,000 / 5,000 a page | "
        + " / ".join(f"{t:.1f} s ({n} pages)" for t, n in fig.list_pages.values())
        + " |",
        "",
        f"Admission latency, {args.probes} sequential binding creates per namespace, each "
        f"followed by one in `{SKIP}` (the webhook skips it):",
        "",
        "| namespace | bindings there | refused | client p50 | client p99 | skipped p50 "
        "| skipped p99 | webhook review p50 | review p99 | own p50 | own p99 "
        "| controller CPU per event |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, ns, n in size.probed:
        runs = fig.latency[label]
        xs, refused = runs[ns]
        ys, _ = runs[SKIP]
        lines.append(
            f"| {label} | {n} | {refused} | {ms(statistics.median(xs))} | {ms(pct(xs, 0.99))} | "
            f"{ms(statistics.median(ys))} | {ms(pct(ys, 0.99))} | "
            f"≤ {fig.review[label][0] * 1000:g} ms | ≤ {fig.review[label][1] * 1000:g} ms | "
            f"≤ {fig.own[label][0] * 1000:g} ms | ≤ {fig.own[label][1] * 1000:g} ms | "
            f"{fig.event_cpu[label]:.2f} ms |"
        )
    lines += [
        "",
        "Status writes during each probe set (webhook: writes, lost compare-and-swaps, write "
        "p99; controller: writes, lost compare-and-swaps):",
        "",
        "| namespace | webhook writes | webhook conflicts | webhook write p99 | controller "
        "writes | controller conflicts |",
        "|---|---|---|---|---|---|",
    ]
    for label, (w, c, p99, cw, cc) in fig.contention.items():
        lines.append(f"| {label} | {w:.0f} | {c:.0f} | ≤ {p99 * 1000:g} ms | {cw:.0f} | {cc:.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", action="store_true", help="issue 37's size (overrides the rest)")
    p.add_argument("--members", type=int, default=1, help="real member clusters of the bed")
    p.add_argument("--clusters", type=int, default=1, help="Clusters in all (real ones first)")
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--per-namespace", type=int, default=20)
    p.add_argument("--big", type=int, default=2000, help="bindings in the one big namespace")
    p.add_argument("--cluster-quotas", type=int, default=2)
    p.add_argument("--per-cluster-quota", type=int, default=10, help="namespaces each selects")
    p.add_argument("--probes", type=int, default=50, help="sequential creates per namespace")
    p.add_argument("--trials", type=int, default=20, help="deletes timed (relabels: a 1/4)")
    p.add_argument("--ready-timeout", type=float, default=300, help="bound on the cold start, s")
    p.add_argument("--profile", default="", help="directory for the py-spy cold start profile")
    p.add_argument(
        "--controller-arg",
        action="append",
        default=[],
        help="a flag for the controller (repeat), e.g. --controller-arg=--recompute-concurrency=32",
    )
    args = p.parse_args()
    if args.target:
        for k, v in TARGET.items():
            setattr(args, k, v)
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    print(asyncio.run(run(args)), flush=True)


if __name__ == "__main__":
    main()
