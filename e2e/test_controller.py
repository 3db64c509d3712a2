"""The aggregating controller end to end, on the real test bed (Karmada + kwok members).

Each test runs the controller as a subprocess (`python -m karmadaquota.cli controller`) against
karmada-apiserver, with a Lease name of its own so that tests never wait for each other's
leases; every process started here is stopped by a fixture finalizer (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest

from e2e.testbed import TestBed, product
from e2e.testbed.aio import InvariantViolation, eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient, NotFound
from karmadaquota.quantity import Quantity

pytestmark = pytest.mark.e2e

REQUESTS = {"cpu": "100m", "memory": "128Mi"}
LEASE_S = 10.0  # the controller's Lease duration (leader.LeaderElector default)
HARD = {
    "requests.cpu": "100",
    "requests.memory": "100Gi",
    "pods": "1000",
    "count/deployments.apps": "50",
}
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"


# ---------------------------------------------------------------------------------------------
# the controller as a process


class ControllerProcess:
    """A controller started by `testbed.product`, with what these tests read of it."""

    def __init__(self, testbed: TestBed, name: str, lease: str, extra: list[str]) -> None:
        self.lease = lease
        self.p, self.port = product.start_controller(
            testbed, name, *extra, env={"KARMADAQUOTA_LEASE_NAME": lease}
        )
        self.proc = self.p.popen
        self.log_path = self.p.log
        self.identity = f"{socket.gethostname()}_{self.proc.pid}"

    async def metrics(self, timeout: float = 30.0) -> dict[str, float]:
        return await product.controller_metrics(self.port, timeout)

    async def leads(self) -> bool:
        """For polls: a short deadline per read, `eventually` retries."""
        return (await self.metrics(timeout=5.0)).get("karmadaquota_leader") == 1

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.p.stop(signal.SIGKILL)

    def stop(self) -> None:
        self.p.stop(signal.SIGTERM, grace=15)

    def tail(self, n: int = 40) -> str:
        return self.p.tail(n)


Starter = Callable[..., ControllerProcess]


@pytest.fixture
def start_controller(testbed: TestBed) -> Iterator[Starter]:
    """start_controller(*flags) -> a running controller; all share this test's Lease."""
    started: list[ControllerProcess] = []
    lease = f"kq-e2e-{secrets.token_hex(4)}"

    def start(*extra: str) -> ControllerProcess:
        c = ControllerProcess(testbed, f"{lease}-controller-{len(started)}", lease, [*extra])
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()
        # captured by pytest: shown only when the test fails
        print(f"--- {c.log_path.name} (pid {c.proc.pid}) ---\n{c.tail()}")


@pytest.fixture(scope="session")
def crd(testbed: TestBed) -> None:
    product.install_crd(testbed)


@pytest.fixture
async def karmada(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    try:
        yield client
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------------
# workloads and expectations


def quota(namespace: str, name: str = "team", hard: Mapping[str, str] = HARD) -> dict[str, Any]:
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": dict(hard)},
    }


def usage(replicas: int, deployments: int) -> dict[str, str]:
    """What `deployments` Deployments with `replicas` replicas in total charge."""
    cpu = Quantity.parse(REQUESTS["cpu"]) * replicas
    mem = Quantity.parse(REQUESTS["memory"]) * replicas
    return {
        "count/deployments.apps": str(deployments),
        "pods": str(replicas),
        "requests.cpu": str(cpu),
        "requests.memory": str(Quantity(mem.nanos, Quantity.parse("1Gi").format)),
    }


def same(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Equal as quantities (1000m == 1), every name of either side."""
    names = set(a) | set(b)
    return all(
        Quantity.parse(str(a.get(n, "0"))) == Quantity.parse(str(b.get(n, "0"))) for n in names
    )


async def get_quota(client: KubeClient, namespace: str, name: str = "team") -> JSON:
    return await client.get(f"{QUOTAS.format(ns=namespace)}/{name}")


async def wait_used(
    client: KubeClient, namespace: str, want: Mapping[str, str], timeout: float = 30
) -> JSON:
    async def check() -> JSON | None:
        q = await get_quota(client, namespace)
        return q if same(q.get("status", {}).get("used", {}), want) else None

    return await eventually(check, timeout, f"status.used == {dict(want)}", interval=0.05)


async def scheduled(client: KubeClient, namespace: str, name: str, replicas: int) -> JSON:
    path = f"/apis/work.karmada.io/v1alpha2/namespaces/{namespace}/resourcebindings"

    async def check() -> JSON | None:
        try:
            rb = await client.get(f"{path}/{name}-deployment")
        except NotFound:
            return None
        placed = sum(c.get("replicas", 0) for c in rb["spec"].get("clusters") or [])
        return rb if placed == replicas and rb["spec"]["replicas"] == replicas else None

    return await eventually(check, 60, f"binding {name} scheduled with {replicas}")


async def scale(client: KubeClient, namespace: str, name: str, replicas: int) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
    body = await client.get(path)
    body["spec"]["replicas"] = replicas
    # unconditional, as `kubectl scale` is: Karmada keeps updating the Deployment's status, so a
    # resourceVersion read a moment ago may already be stale (409)
    body["metadata"].pop("resourceVersion", None)
    await client.put(path, body)


async def delete_deployment(client: KubeClient, namespace: str, name: str) -> None:
    await client.request(
        "DELETE",
        f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
    )


async def wait_gc_ready(testbed: TestBed, client: KubeClient, namespace: str) -> None:
    """Deleting a Deployment releases quota through its ResourceBinding, which the garbage
    collector of karmada-apiserver removes. On a freshly started bed that collector learns
    about Karmada's CRDs only at its next discovery resync (up to 30 s): wait for it here so
    that the latencies measured afterwards are the steady state's."""
    name = "gc-probe"
    await testbed.aapply(deployment(namespace, name, 1, REQUESTS))
    await scheduled(client, namespace, name, 1)
    await delete_deployment(client, namespace, name)
    path = f"/apis/work.karmada.io/v1alpha2/namespaces/{namespace}/resourcebindings"

    async def binding_gone() -> bool:
        try:
            rb = await client.get(f"{path}/{name}-deployment")
        except NotFound:
            return True
        return bool(rb["metadata"].get("deletionTimestamp"))

    await eventually(binding_gone, 120, "karmada-apiserver's garbage collector to delete a binding")


async def setup_workloads(
    testbed: TestBed, namespace: str, deployments: Mapping[str, int]
) -> list[str]:
    clusters = testbed.members[:2]
    await testbed.aapply(
        [divided_policy(namespace, "divided", clusters)]
        + [deployment(namespace, n, r, REQUESTS) for n, r in deployments.items()]
    )
    return clusters


def pods_usage(pods: list[JSON]) -> dict[str, str]:
    """Expected `observed` for the quota's names: non-terminal pods (those in their grace
    period too: Kubernetes counts them until it ends), their requests."""
    live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    cpu, mem = Quantity.zero(), Quantity.zero()
    for p in live:
        for c in p["spec"]["containers"]:
            req = c.get("resources", {}).get("requests", {})
            cpu = cpu + Quantity.parse(req.get("cpu", "0"))
            mem = mem + Quantity.parse(req.get("memory", "0"))
    return {"pods": str(len(live)), "requests.cpu": str(cpu), "requests.memory": str(mem)}


async def timed(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until `check` turns true (polled every 10 ms): a figure to print, not assert."""
    started = time.monotonic()
    await eventually(check, timeout, what, interval=0.01)
    return time.monotonic() - started


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------------------
# tests


async def test_quota_created_after_its_workloads_shows_usage_at_once(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    await setup_workloads(testbed, namespace, {"web": 4, "api": 2})
    await scheduled(karmada, namespace, "web", 4)
    await scheduled(karmada, namespace, "api", 2)
    ctl = start_controller()
    await eventually(ctl.leads, 30, "leadership")
    created = time.monotonic()
    await testbed.aapply(quota(namespace))
    q = await wait_used(karmada, namespace, usage(6, 2))
    took = time.monotonic() - created
    print(f"\nquota created after its workloads: status.used filled in {took * 1000:.0f} ms")
    status = q["status"]
    assert set(status["used"]) == set(HARD)  # every tracked name, none left unknown
    assert same(status["hard"], HARD)  # canonical quantities, as Kubernetes prints them
    assert status["summary"] == (
        "count/deployments.apps: 2/50, pods: 6/1k, requests.cpu: 600m/100, "
        "requests.memory: 768Mi/100Gi"
    )
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Valid"]["status"] == "True"
    assert status["observedGeneration"] == q["metadata"]["generation"]
    table = await testbed.akubectl("get", "kq", "-n", namespace)
    assert "pods: 6/1k" in table.stdout


async def test_per_cluster_used_follows_placement_and_observed_follows_member_pods(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    clusters = await setup_workloads(testbed, namespace, {"web": 4})
    rb = await scheduled(karmada, namespace, "web", 4)
    placement = {c["name"]: c["replicas"] for c in rb["spec"]["clusters"]}
    assert set(placement) == set(clusters)
    start_controller()
    await testbed.aapply(quota(namespace))
    await wait_used(karmada, namespace, usage(4, 1))

    async def member_pods(cluster: str) -> list[JSON]:
        pods = await testbed.aget("pods", cluster=cluster, namespace=namespace)
        return list((pods or {}).get("items", []))

    async def breakdown_matches() -> JSON | None:
        q = await get_quota(karmada, namespace)
        by = {c["clusterName"]: c for c in q["status"].get("aggregatedStatus", [])}
        for cluster in clusters:
            entry = by.get(cluster)
            if entry is None:
                return None
            want_used = usage(placement[cluster], 1)
            if not same(entry["used"], want_used):
                return None
            pods = await member_pods(cluster)
            if len(pods) != placement[cluster]:
                return None  # kwok has not run them all yet
            if not same(entry.get("observed") or {}, pods_usage(pods)):
                return None
        return q

    q = await eventually(breakdown_matches, 90, "per-cluster used/observed to match")
    conds = {c["type"]: c for c in q["status"]["conditions"]}
    assert conds["MemberObserved"]["status"] == "True", conds

    # A pod created in member2 itself, around Karmada: observed there, and counted in `used`
    # (it runs in the quota's namespace), never in the member's placement.
    direct = clusters[1]
    await eventually(
        lambda: testbed.get("namespace", namespace, cluster=direct), 60, "namespace in member"
    )
    await testbed.aapply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "around-karmada", "namespace": namespace},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "nginx",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    }
                ]
            },
        },
        cluster=direct,
    )

    async def direct_pod_observed() -> JSON | None:
        q = await get_quota(karmada, namespace)
        by = {c["clusterName"]: c for c in q["status"]["aggregatedStatus"]}
        pods = await member_pods(direct)
        if not same(by[direct].get("observed") or {}, pods_usage(pods)):
            return None
        return q if int(by[direct]["observed"]["pods"]) == placement[direct] + 1 else None

    q = await eventually(direct_pod_observed, 60, f"the direct pod in {direct}'s observed")
    by = {c["clusterName"]: c for c in q["status"]["aggregatedStatus"]}
    assert same(by[direct]["used"], usage(placement[direct], 1))

    async def counted() -> bool:
        q = await get_quota(karmada, namespace)
        around = {"pods": "1", "requests.cpu": "1", "requests.memory": "1Gi"}
        want = {
            n: str(Quantity.parse(v) + Quantity.parse(around.get(n, "0")))
            for n, v in usage(4, 1).items()
        }
        return same(q["status"]["used"], want)

    await eventually(counted, 30, "the pod made around Karmada counted in used")

    # kubectl karmadaquota describe shows the same figures
    env = {**os.environ, "KUBECTL": testbed.kubectl_binary}
    out = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "karmadaquota.kubectl_plugin",
            "describe",
            "team",
            "-n",
            namespace,
            "--kubeconfig",
            str(testbed.karmada_kubeconfig),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    print("\n" + out.stdout)
    # guarded by default: per member, placed/observed/guard
    header = next(line for line in out.stdout.splitlines() if line.startswith("Resource "))
    for cluster in clusters:
        assert f"{cluster} placed/observed/guard" in header
    pods_row = next(line for line in out.stdout.splitlines() if line.startswith("pods "))
    assert f"{placement[direct]}/{placement[direct] + 1}/" in pods_row


@pytest.mark.smoke
async def test_delete_and_scale_down_release_usage(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    await setup_workloads(testbed, namespace, {})
    await wait_gc_ready(testbed, karmada, namespace)
    ctl = start_controller()
    await testbed.aapply(quota(namespace))
    await wait_used(karmada, namespace, usage(0, 0))
    await eventually(ctl.leads, 30, "leadership")
    scale_downs: list[float] = []
    deletes: list[float] = []
    trials = int(os.environ.get("KARMADAQUOTA_E2E_RELEASE_TRIALS", "10"))

    async def used_is(want: Mapping[str, str]) -> bool:
        q = await get_quota(karmada, namespace)
        return same(q.get("status", {}).get("used", {}), want)

    for i in range(trials):
        name = f"app{i}"
        await testbed.aapply(deployment(namespace, name, 4, REQUESTS))
        await scheduled(karmada, namespace, name, 4)
        await wait_used(karmada, namespace, usage(4, 1))
        await scale(karmada, namespace, name, 2)
        scale_downs.append(await timed(lambda: used_is(usage(2, 1)), 15, "scale-down released"))
        await scheduled(karmada, namespace, name, 2)
        await delete_deployment(karmada, namespace, name)
        deletes.append(await timed(lambda: used_is(usage(0, 0)), 15, "delete released"))

    def line(what: str, xs: list[float]) -> str:
        return (
            f"{what:<10} n={len(xs)} p50={statistics.median(xs) * 1000:.0f} ms "
            f"p99={percentile(xs, 99) * 1000:.0f} ms max={max(xs) * 1000:.0f} ms"
        )

    print("\nrelease latency (API call -> status.used), through Karmada's own controllers:")
    print(line("scale-down", scale_downs))
    print(line("delete", deletes))  # figures only: timing is not asserted in tests


async def test_sigkill_and_restart_converge_to_the_exact_usage(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    await setup_workloads(testbed, namespace, {"web": 4, "api": 2})
    first = start_controller()
    await testbed.aapply(quota(namespace))
    await scheduled(karmada, namespace, "api", 2)
    await wait_used(karmada, namespace, usage(6, 2))
    first.kill()
    assert not first.alive()
    # while no controller runs: scale one down, delete the other, add a third
    await scale(karmada, namespace, "web", 1)
    await delete_deployment(karmada, namespace, "api")
    await testbed.aapply(deployment(namespace, "batch", 3, REQUESTS))
    await scheduled(karmada, namespace, "web", 1)
    await scheduled(karmada, namespace, "batch", 3)
    q = await get_quota(karmada, namespace)
    assert same(q["status"]["used"], usage(6, 2))  # nobody updated it meanwhile
    second = start_controller()
    # the dead leader's Lease must lapse (10 s) before the new process writes
    q = await wait_used(karmada, namespace, usage(4, 2), timeout=60)
    per = {c["clusterName"]: c["used"]["pods"] for c in q["status"]["aggregatedStatus"]}
    assert sum(int(v) for v in per.values()) == 4
    assert (await second.metrics())["karmadaquota_leader"] == 1


async def test_two_replicas_never_both_write(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    a, b = start_controller(), start_controller()
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases/{a.lease}"

    async def one_leader() -> ControllerProcess | None:
        ma, mb = await a.metrics(), await b.metrics()
        leaders = [c for c, m in ((a, ma), (b, mb)) if m.get("karmadaquota_leader") == 1]
        if len(leaders) > 1:
            raise InvariantViolation("two leaders at once")
        return leaders[0] if leaders else None

    leader = await eventually(one_leader, 60, "one leader")
    follower = b if leader is a else a
    lease = await karmada.get(lease_path)
    assert lease["spec"]["holderIdentity"] == leader.identity

    await setup_workloads(testbed, namespace, {"web": 4})
    await testbed.aapply(quota(namespace))
    await scheduled(karmada, namespace, "web", 4)
    await wait_used(karmada, namespace, usage(4, 1))
    for replicas in (3, 1, 2):
        await scale(karmada, namespace, "web", replicas)
        await wait_used(karmada, namespace, usage(replicas, 1))
        assert await one_leader() is leader

    writes = '_status_writes_total{result="ok"}'
    mf, ml = await follower.metrics(), await leader.metrics()
    assert mf[f"karmadaquota{writes}"] == 0, "the follower wrote quota status"
    assert ml[f"karmadaquota{writes}"] > 0
    assert mf["karmadaquota_bindings_indexed"] == ml["karmadaquota_bindings_indexed"] >= 1
    labels = {f'quota_namespace="{namespace}"', 'quota="team"', 'resource="pods"'}
    (used_pods,) = [
        v
        for k, v in mf.items()
        if k.startswith("karmadaquota_quota_used{")
        and labels == set(k.split("{", 1)[1].rstrip("}").split(","))
    ]
    assert used_pods == 2  # the follower's figures are warm

    # graceful stop of the leader: the follower takes over at once (the Lease is released),
    # well before the Lease (10 s) would have lapsed had it not been
    stopped = time.monotonic()
    await asyncio.to_thread(leader.stop)
    await eventually(follower.leads, LEASE_S, "the follower to lead", interval=0.1)
    failover = time.monotonic() - stopped
    print(f"\nfailover after a graceful stop: {failover:.1f} s")
    assert failover < LEASE_S, f"{failover:.1f} s: the Lease was not released, it lapsed"
    lease = await karmada.get(lease_path)
    assert lease["spec"]["holderIdentity"] == follower.identity
    await scale(karmada, namespace, "web", 3)
    await wait_used(karmada, namespace, usage(3, 1))
    assert (await follower.metrics())[f"karmadaquota{writes}"] > 0


async def test_invalid_quota_is_reported_and_not_charged(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    start_controller("--no-member-watch")
    await testbed.aapply(quota(namespace, "bad", {"pods": "10", "widgets": "3"}))

    async def invalid() -> JSON | None:
        q = await get_quota(karmada, namespace, "bad")
        conds = {c["type"]: c for c in q.get("status", {}).get("conditions", [])}
        return q if conds.get("Valid", {}).get("status") == "False" else None

    q = await eventually(invalid, 30, "Valid=False")
    conds = {c["type"]: c for c in q["status"]["conditions"]}
    assert "widgets" in conds["Valid"]["message"]
    assert conds["Ready"]["status"] == "False"
    assert not q["status"].get("used")


async def test_an_unreachable_member_is_reported_stale_and_nothing_else_stops(
    testbed: TestBed, crd: None, namespace: str, karmada: KubeClient, start_controller: Starter
) -> None:
    """A Cluster whose API endpoint nobody serves: the quota says which member is stale, and
    usage from the reachable members keeps being computed."""
    from e2e.testbed.ports import free_port

    ghost = f"ghost-{secrets.token_hex(3)}"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ghost, "namespace": "karmada-cluster"},
        "stringData": {
            "token": "nobody-checks-it",
            "caBundle": testbed.serving_cert(ghost).ca_bundle.decode(),
        },
    }
    cluster = {
        "apiVersion": "cluster.karmada.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": ghost},
        "spec": {
            "apiEndpoint": f"https://127.0.0.1:{free_port()}",
            "syncMode": "Push",
            "secretRef": {"namespace": "karmada-cluster", "name": ghost},
        },
    }
    await testbed.aapply([secret, cluster])
    try:
        start_controller()
        await testbed.aapply(quota(namespace))
        members = list(testbed.members)
        await testbed.aapply(
            [
                divided_policy(namespace, "divided", members),
                deployment(namespace, "web", 2, REQUESTS),
            ]
        )

        async def reported() -> bool:
            q = await get_quota(karmada, namespace)
            st = q.get("status", {})
            cond = {c["type"]: c for c in st.get("conditions", [])}.get("MemberObserved", {})
            return (
                cond.get("status") == "False"
                and cond.get("reason") == "MemberUnreachable"
                and ghost in cond.get("message", "")
                and st.get("used", {}).get("pods") == "2"
            )

        await eventually(reported, 90, f"{ghost} reported stale while usage is still computed")
    finally:
        await testbed.akubectl("delete", "cluster", ghost, "--wait=false", check=False)
        await testbed.akubectl(
            "delete", "secret", ghost, "-n", "karmada-cluster", "--wait=false", check=False
        )

        async def ghost_gone() -> bool:
            try:
                await karmada.get(f"/apis/cluster.karmada.io/v1alpha1/clusters/{ghost}")
            except NotFound:
                return True
            return False

        # a member the next test's quotas would count (guards for it never complete)
        await eventually(ghost_gone, 60, f"the Cluster {ghost} gone")
