"""ClusterKarmadaQuota end to end: one budget over five namespaces on the real bed — real
karmada-apiserver, the shipped registration (namespaceSelector on the enforcement label the
controller puts on every selected namespace), two webhook replicas behind one address, our
controller keeping `used` from the watched bindings and namespace labels."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding, retryable, storm
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeClient, KubeError
from karmadaquota.quantity import Quantity

pytestmark = pytest.mark.e2e

RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
ALL_RB_PATH = "/apis/work.karmada.io/v1alpha2/resourcebindings"
CKQ_PATH = "/apis/quota.karmada.io/v1alpha1/clusterkarmadaquotas"
TTL = "120s"


@pytest.fixture(scope="module")
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def replicas(testbed: TestBed) -> AsyncIterator[None]:
    """CRDs, the controller and two webhook replicas behind one round-robin address."""
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-cluster-suite")
    one = await product.start_webhook(testbed, "webhook-ckq-a", TTL)
    two = await product.start_webhook(testbed, "webhook-ckq-b", TTL)
    try:
        with product.round_robin_proxy(testbed, [one.port, two.port]) as port:
            base = f"https://127.0.0.1:{port}"
            await asyncio.to_thread(product.register, testbed, base, one.ca_bundle)
            try:
                yield
            finally:
                await asyncio.to_thread(product.unregister, testbed)
    finally:
        one.proc.stop()
        two.proc.stop()
        controller.stop()


@pytest.fixture
def team(testbed: TestBed) -> Iterator[tuple[str, list[str]]]:
    """A team label value and five namespaces carrying it (deleted afterwards)."""
    value = f"t{secrets.token_hex(3)}"
    names = [f"e2e-ckq-{value}-{i}" for i in range(5)]
    for ns in names:
        testbed.kubectl("create", "namespace", ns)
        testbed.kubectl("label", "namespace", ns, f"team={value}")
    try:
        yield value, names
    finally:
        for ns in names:
            testbed.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")


async def create_cluster_quota(
    api: KubeClient, name: str, team: str, hard: dict[str, str], selected: int
) -> None:
    """Create the cluster quota; return once the controller has written `used` and labelled
    every selected namespace for enforcement."""
    body = {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "ClusterKarmadaQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard, "namespaceSelector": {"matchLabels": {"team": team}}},
    }
    await api.request("POST", CKQ_PATH, body)

    async def ready() -> bool:
        status = (await api.get(paths.cluster_quota(name))).get("status") or {}
        enforced = any(
            c["type"] == "Enforced" and c["status"] == "True" for c in status.get("conditions", [])
        )
        return (
            set(hard) <= set(status.get("used", {}))
            and status.get("selectedNamespaces") == selected
            and enforced
        )

    await eventually(ready, 30, f"controller initialises {name} and labels its namespaces")


@contextlib.asynccontextmanager
async def deleting(api: KubeClient, name: str) -> AsyncIterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(KeyError, KubeError):
            await api.request("DELETE", paths.cluster_quota(name))


async def ckq(api: KubeClient, name: str) -> ClusterKarmadaQuota:
    return ClusterKarmadaQuota.model_validate(await api.get(paths.cluster_quota(name)))


async def stored_cpu(api: KubeClient, namespaces: list[str]) -> int:
    """Σ requested millicores of the bindings stored in `namespaces` (what admission let in),
    from one list over all namespaces: one snapshot at one resourceVersion (a list per
    namespace could miss a binding moving between two of them, or count it twice)."""
    total = 0
    for rb in (await api.get(ALL_RB_PATH))["items"]:
        if rb["metadata"]["namespace"] not in namespaces:
            continue
        spec = rb["spec"]
        cpu = spec["replicaRequirements"]["resourceRequest"]["cpu"]
        total += int(spec["replicas"]) * int(cpu.removesuffix("m"))
    return total


@contextlib.asynccontextmanager
async def watching(api: KubeClient, namespaces: list[str], hard_m: int) -> AsyncIterator[list[int]]:
    """Poll Σ stored usage every 100 ms for the block; fail if it ever exceeds `hard_m`."""
    seen: list[int] = []
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            seen.append(await stored_cpu(api, namespaces))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    task = asyncio.create_task(poll())
    try:
        yield seen
    finally:
        stop.set()
        await task
    assert seen and max(seen) <= hard_m, f"Σ usage passed hard: max {max(seen)} > {hard_m}"


def _named(ns: str, i: int) -> dict[str, object]:
    return binding(ns, f"rb-{i:02d}")


async def test_a_storm_over_five_namespaces_and_two_replicas_admits_exactly_the_room(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    """48 creates in flight across 5 namespaces selected by one cluster quota of 3 cpu:
    exactly 30 bindings of 100m admitted, Σ ≤ hard at every 100 ms poll."""
    value, names = team
    name = f"ckq-storm-{value}"
    async with deleting(api, name):
        await create_cluster_quota(api, name, value, {"requests.cpu": "3"}, selected=5)
        async with watching(api, names, 3000) as seen:
            counts = [10, 10, 10, 10, 8]  # 48 creates in flight at once
            results = await asyncio.gather(
                *(
                    storm(
                        api,
                        RB_PATH.format(ns=ns),
                        functools.partial(_named, ns),
                        count,
                        deadline=120,
                        retry=retryable,
                    )
                    for ns, count in zip(names, counts, strict=True)
                )
            )
        admitted = sum(len(r.admitted) for r in results)
        denied = {m for r in results for m in r.denied.values()}
        assert admitted == 30, [r.summary() for r in results]
        assert all(f"exceeded quota: {name}," in m for m in denied), denied
        assert await stored_cpu(api, names) == 3000
        print(f"storm: {admitted} admitted; Σ stored polled {len(seen)} times, max {max(seen)}m")

        async def settled() -> bool:
            q = await ckq(api, name)
            return q.status.used.get("requests.cpu") == "3" and not q.status.reservations

        await eventually(settled, 30, "used == Σ admitted and no pending charge left")
        q = await ckq(api, name)
        per_ns = {
            u.namespace: Quantity.parse(str(u.used["requests.cpu"])) for u in q.status.namespaces
        }
        assert sum(v.nanos for v in per_ns.values()) == Quantity.parse("3").nanos, per_ns
        assert set(per_ns) <= set(names)


async def test_relabelling_moves_usage_within_two_seconds(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    value, names = team
    name = f"ckq-relabel-{value}"
    outside = names[4]
    testbed.kubectl("label", "namespace", outside, "team-")  # not selected
    async with deleting(api, name):
        await api.request("POST", RB_PATH.format(ns=outside), binding(outside, "big", "100m", 7))
        await create_cluster_quota(api, name, value, {"requests.cpu": "1"}, selected=4)
        await api.request("POST", RB_PATH.format(ns=names[0]), binding(names[0], "web", "100m", 2))
        await eventually(
            lambda: _used_is(api, name, "200m"), 10, "the selected namespace's usage counted"
        )
        started = time.monotonic()
        await testbed.akubectl("label", "namespace", outside, f"team={value}")
        await eventually(lambda: _used_is(api, name, "900m"), 2.0, "relabelled in", 0.05)
        took_in = time.monotonic() - started
        # over hard now? no: 900m ≤ 1; one more of 200m is refused naming the cluster quota
        with pytest.raises(KubeError) as refused:
            await api.request(
                "POST", RB_PATH.format(ns=names[1]), binding(names[1], "more", "100m", 2)
            )
        assert f"exceeded quota: {name}, requested: requests.cpu=200m" in refused.value.message
        started = time.monotonic()
        await testbed.akubectl("label", "namespace", outside, "team-")
        await eventually(lambda: _used_is(api, name, "200m"), 2.0, "relabelled out", 0.05)
        took_out = time.monotonic() - started
        print(f"relabel in: used moved in {took_in:.2f}s; out: {took_out:.2f}s")


async def _used_is(api: KubeClient, name: str, cpu: str) -> bool:
    return (await ckq(api, name)).status.used.get("requests.cpu") == cpu


async def test_the_delete_here_recreate_there_juggle_never_spends_twice(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    """Capsule #1662: 3 workloads moved between namespaces, concurrently, 4 times over, under a
    cluster quota with room for exactly 3. Each move tries its create in the new namespace
    while the old binding is still stored and charged, and deletes the old one only after
    that: a webhook that spent the room twice would store a workload in both namespaces,
    which one list right after every admission (and every 100 ms) sees as Σ > hard. Every
    move lands (once the old binding is seen gone), and at the end used is exactly what
    exists."""
    value, names = team
    name = f"ckq-juggle-{value}"
    refusals: list[str] = []
    async with deleting(api, name):
        await create_cluster_quota(api, name, value, {"requests.cpu": "300m"}, selected=5)
        for i in range(3):
            await api.request("POST", RB_PATH.format(ns=names[0]), binding(names[0], f"w{i}"))

        async def move(i: int, src: str, dst: str) -> None:
            old = f"{RB_PATH.format(ns=src)}/w{i}"
            deleted = False
            deadline = time.monotonic() + 60
            while True:  # refused until a deletion is observed: retried, as Karmada does
                try:
                    await api.request("POST", RB_PATH.format(ns=dst), binding(dst, f"w{i}"))
                except KubeError as e:
                    assert "exceeded quota" in e.message or retryable(e.message), e.message
                    assert time.monotonic() < deadline, f"w{i} never landed in {dst}: {e}"
                    refusals.append(e.message)
                    if not deleted:  # tried while still charged in src: now it may go
                        await api.request("DELETE", old)
                        deleted = True
                    await asyncio.sleep(0.1)
                    continue
                # admitted (maybe into the room another move left while w{i} is still in src)
                total = await stored_cpu(api, names)
                assert total <= 300, f"w{i} admitted in {dst}: Σ stored {total}m > 300m"
                if not deleted:
                    await api.request("DELETE", old)
                return

        async with watching(api, names, 300):
            for r in range(4):
                src, dst = names[r], names[r + 1]
                await asyncio.gather(*(move(i, src, dst) for i in range(3)))
        # each round's first create found the quota full (nothing was deleted before it)
        assert sum("exceeded quota" in m for m in refusals) >= 4, refusals
        assert await stored_cpu(api, names) == 300

        async def settled() -> bool:
            q = await ckq(api, name)
            return (
                q.status.used.get("requests.cpu") == "300m"
                and not q.status.reservations
                and [u.namespace for u in q.status.namespaces] == [names[4]]
            )

        await eventually(settled, 30, "used is exactly the three that exist, in their namespace")


async def test_a_cluster_quota_and_a_namespaced_quota_together_the_tighter_wins(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    value, names = team
    name = f"ckq-both-{value}"
    async with deleting(api, name):
        await create_cluster_quota(api, name, value, {"requests.cpu": "500m"}, selected=5)
        await testbed.aapply(product.quota(names[0], "kq", {"requests.cpu": "200m"}))

        async def kq_ready() -> bool:
            q = await api.get(paths.quota(names[0], "kq"))
            return "requests.cpu" in (q.get("status") or {}).get("used", {})

        await eventually(kq_ready, 30, "the namespaced quota initialised")
        first = await storm(
            api,
            RB_PATH.format(ns=names[0]),
            lambda i: binding(names[0], f"a{i}"),
            4,
            retry=retryable,
        )
        assert len(first.admitted) == 2, first.summary()  # the namespaced quota is tighter here
        assert all("exceeded quota: kq," in m for m in first.denied.values()), first.denied
        second = await storm(
            api,
            RB_PATH.format(ns=names[1]),
            lambda i: binding(names[1], f"b{i}"),
            5,
            retry=retryable,
        )
        assert len(second.admitted) == 3, second.summary()  # the cluster quota's 500m - 200m
        assert all(f"exceeded quota: {name}," in m for m in second.denied.values())

        async def settled() -> bool:
            q = await ckq(api, name)
            return q.status.used.get("requests.cpu") == "500m" and not q.status.reservations

        # refusals by the namespaced quota took back what the cluster quota reserved for them
        await eventually(settled, 30, "cluster quota: exactly what was admitted")


VIEW_ROLE = "karmadaquota-applied-cluster-quotas-view"
TENANT = "alice-ckq"


async def test_a_tenant_with_namespaced_read_rights_sees_the_totals_and_only_its_namespace(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    """OpenShift's AppliedClusterResourceQuota, on Karmada: the controller keeps a view in
    every selected namespace; the shipped aggregated ClusterRole makes `view` read it."""
    value, names = team
    name = f"ckq-view-{value}"
    docs = yaml.safe_load_all((product.REPO / "controller/karmada/rbac.yaml").read_text())
    (role,) = [d for d in docs if d["metadata"]["name"] == VIEW_ROLE]
    await testbed.aapply(role)
    await testbed.akubectl(
        "create",
        "rolebinding",
        "tenant-view",
        "--clusterrole=view",
        f"--user={TENANT}",
        "-n",
        names[0],
    )
    async with deleting(api, name):
        await api.request("POST", RB_PATH.format(ns=names[0]), binding(names[0], "web", "100m", 2))
        await api.request("POST", RB_PATH.format(ns=names[1]), binding(names[1], "web", "100m", 3))
        await create_cluster_quota(api, name, value, {"requests.cpu": "1"}, selected=5)

        async def seen() -> dict[str, Any] | None:
            proc = await testbed.akubectl(
                "--as", TENANT, "-n", names[0], "get", "ackq", name, "-o", "json", check=False
            )
            if proc.returncode != 0:
                return None
            doc: dict[str, Any] = json.loads(proc.stdout)
            return doc if doc["status"]["used"].get("requests.cpu") == "500m" else None

        mine = await eventually(seen, 30, "the tenant reads its namespace's view")
        assert mine["status"]["namespaceUsed"] == {"requests.cpu": "200m"}
        assert mine["status"]["summary"] == "requests.cpu: 500m/1"
        assert mine["status"]["selectedNamespaces"] == 5
        assert names[1] not in json.dumps(mine)  # no other namespace's breakdown
        table = await testbed.akubectl("--as", TENANT, "-n", names[0], "get", "ackq")
        assert "requests.cpu: 500m/1" in table.stdout and "requests.cpu: 200m" in table.stdout
        for args in (["get", "ckq", name], ["-n", names[1], "get", "ackq", name]):
            denied = await testbed.akubectl("--as", TENANT, *args, check=False)
            assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
        admin = await testbed.akubectl("get", "ckq", name)
        assert "SUMMARY" in admin.stdout and "NAMESPACES" in admin.stdout
        assert "requests.cpu: 500m/1" in admin.stdout


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"onExceed": "Queue"}, "onExceed"),
        ({"memberEnforcement": "ResourceQuota"}, "memberEnforcement"),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}},
            "values: must be specified when `operator` is 'In' or 'NotIn'",
        ),
    ],
)
async def test_what_a_cluster_quota_cannot_have_is_refused_with_the_reason(
    testbed: TestBed, replicas: None, api: KubeClient, spec: dict[str, Any], reason: str
) -> None:
    """Queue mode and member guards, exercised once each with a cluster quota: refused by the
    API server (CEL) before anything is stored, saying why."""
    body = {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "ClusterKarmadaQuota",
        "metadata": {"name": f"ckq-bad-{secrets.token_hex(3)}"},
        "spec": {"hard": {"pods": "1"}, "namespaceSelector": {}, **spec},
    }
    with pytest.raises(KubeError) as refused:
        await api.request("POST", CKQ_PATH, body)
    assert refused.value.status == 422 and reason in refused.value.message, refused.value.message


def _events(bed: TestBed, ns: str, name: str) -> str:
    events = bed.get("events", namespace=ns) or {"items": []}
    return "\n".join(
        e.get("message", "")
        for e in events["items"]
        if e.get("involvedObject", {}).get("name") == name
    )


def _member_replicas(bed: TestBed, ns: str, name: str) -> int:
    total = 0
    for m in bed.members:
        d = bed.get("deployment", name, cluster=m, namespace=ns)
        total += int(d["spec"]["replicas"]) if d else 0
    return total


async def test_deployments_in_two_namespaces_share_the_budget_through_karmada(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    """The user's path: Deployments + PropagationPolicies, Karmada's detector creating the
    bindings. The second namespace's Deployment does not fit what the first one uses: Karmada
    reports the cluster quota's refusal on it, and the members run only the first."""
    value, names = team
    name = f"ckq-deploy-{value}"
    members = list(testbed.members)
    cpu = {"cpu": "250m"}
    async with deleting(api, name):
        await create_cluster_quota(api, name, value, {"requests.cpu": "1"}, selected=5)
        await testbed.aapply(
            [deployment(names[0], "web", 3, cpu), divided_policy(names[0], "web", members, "web")]
        )
        await eventually(lambda: _used_is(api, name, "750m"), 60, "web counted in the budget")
        await eventually(
            lambda: _member_replicas(testbed, names[0], "web") == 3, 90, "web runs in the members"
        )
        await testbed.aapply(
            [deployment(names[1], "api", 2, cpu), divided_policy(names[1], "api", members, "api")]
        )
        message = await eventually(
            lambda: (
                "exceeded quota" in _events(testbed, names[1], "api")
                and _events(testbed, names[1], "api")
            ),
            60,
            "an event on Deployment api naming the cluster quota",
        )
        expected = (
            f"exceeded quota: {name}, requested: requests.cpu=500m, used: requests.cpu=750m, "
            "limited: requests.cpu=1"
        )
        assert expected in str(message), message
        assert testbed.get("resourcebinding", "api-deployment", namespace=names[1]) is None
        assert _member_replicas(testbed, names[1], "api") == 0


async def test_a_storm_of_deployments_over_five_namespaces_admits_exactly_the_room(
    testbed: TestBed, replicas: None, api: KubeClient, team: tuple[str, list[str]]
) -> None:
    """The same storm through Karmada: 48 Deployments (1 × 100m) + a PropagationPolicy per
    namespace applied at once over 5 namespaces under a cluster quota of 3 cpu. Karmada's
    detector creates the bindings and retries the refused ones; exactly 30 exist, Σ ≤ hard at
    every 100 ms poll, and retries never add one."""
    value, names = team
    name = f"ckq-deploys-{value}"
    members = list(testbed.members)
    async with deleting(api, name):
        await create_cluster_quota(api, name, value, {"requests.cpu": "3"}, selected=5)
        counts = [10, 10, 10, 10, 8]
        docs: list[dict[str, Any]] = [divided_policy(ns, "all", members) for ns in names]
        docs += [
            deployment(ns, f"d-{i:02d}", 1, {"cpu": "100m"})
            for ns, count in zip(names, counts, strict=True)
            for i in range(count)
        ]
        async with watching(api, names, 3000) as seen:
            await testbed.aapply(docs)

            async def settled() -> bool:
                return await stored_cpu(api, names) == 3000 and await _used_is(api, name, "3")

            await eventually(settled, 120, "30 bindings admitted and counted", 0.2)
            await asyncio.sleep(3.0)  # Karmada keeps retrying the 18 refused: none gets in
        assert await stored_cpu(api, names) == 3000
        print(f"deployment storm: Σ stored polled {len(seen)} times, max {max(seen)}m")
