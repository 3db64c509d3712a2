"""Queue instead of refuse (issue 20) on the real bed: Deployments + a PropagationPolicy,
Karmada's detector building bindings, our mutating webhook queueing them (scheduling
suspended, `quota.karmada.io/queued-by`), the validating webhook charging nothing for them and
charging the admission exactly, and the controller's leader admitting them in order.

Negative claims ("still queued") are checked after a positive synchronisation point that
proves the controller has acted on the same state (a later admission, a status figure), never
after a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.layout import KARMADA
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, MERGE_PATCH, KubeClient, KubeError, NotFound
from karmadaquota.queued import ANNOTATION

pytestmark = pytest.mark.e2e

CPU = {"cpu": "100m"}
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
BINDINGS = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
HIGH = "kq-e2e-high"


@dataclass
class Stack:
    bed: TestBed
    api: KubeClient
    metrics_port: int

    async def admissions(self, reason: str) -> float:
        samples = await product.controller_metrics(self.metrics_port)
        return samples.get(f'karmadaquota_queue_admissions_total{{reason="{reason}"}}', 0.0)


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[Stack]:
    await asyncio.to_thread(product.install_crd, testbed)
    controller, port = product.start_controller(testbed, "controller-queue")
    hook = await product.start_webhook(testbed, "webhook-queue")
    api = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": HIGH},
        "value": 1000,
    }
    try:
        for cluster in (KARMADA, *testbed.members):  # members too: their pods name it
            await testbed.aapply(high, cluster=cluster)
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield Stack(testbed, api, port)
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()
        for cluster in (KARMADA, *testbed.members):
            await testbed.akubectl(
                "delete", "priorityclass", HIGH, "--ignore-not-found", cluster=cluster
            )
        await api.close()


# ---------------------------------------------------------------------------------------------
# helpers


async def quota_status(s: Stack, ns: str) -> JSON:
    status: JSON = (await s.api.get(QUOTAS.format(ns=ns) + "/team")).get("status") or {}
    return status


async def _no_pending(s: Stack, ns: str) -> bool:
    return not (await quota_status(s, ns)).get("pending")


async def setup(s: Stack, ns: str, pods: int, strategy: str = "BestEffortFIFO") -> None:
    await s.bed.aapply(divided_policy(ns, "all", list(s.bed.members)))
    await set_quota(s, ns, pods, "Queue", strategy)

    async def initialised() -> bool:
        return "pods" in (await quota_status(s, ns)).get("used", {})

    await eventually(initialised, 30, "controller initialises status.used")


async def set_quota(
    s: Stack, ns: str, pods: int, on_exceed: str, strategy: str = "BestEffortFIFO"
) -> None:
    hard = {"pods": str(pods), "count/deployments.apps": "100"}
    await s.bed.aapply(
        product.quota(ns, "team", hard, onExceed=on_exceed, queueingStrategy=strategy)
    )


async def create(s: Stack, ns: str, name: str, replicas: int, **pod: Any) -> None:
    await s.bed.aapply(deployment(ns, name, replicas, CPU, **pod))


async def scale(s: Stack, ns: str, name: str, replicas: int) -> None:
    await s.bed.akubectl("scale", "deployment", name, f"--replicas={replicas}", "-n", ns)


async def binding(s: Stack, ns: str, name: str) -> JSON | None:
    try:
        return await s.api.get(BINDINGS.format(ns=ns) + f"/{name}-deployment")
    except NotFound:
        return None


def is_queued(rb: JSON | None) -> bool:
    if rb is None:
        return False
    annotations = (rb.get("metadata") or {}).get("annotations") or {}
    suspension = rb["spec"].get("suspension") or {}
    return (
        annotations.get(ANNOTATION) == "team"
        and suspension.get("scheduling") is True
        and not rb["spec"].get("clusters")
    )


def placed_replicas(rb: JSON | None) -> int:
    if rb is None:
        return 0
    return sum(int(c.get("replicas", 0)) for c in rb["spec"].get("clusters") or [])


async def until_placed(s: Stack, ns: str, name: str, replicas: int, timeout: float = 60) -> None:
    async def done() -> bool:
        rb = await binding(s, ns, name)
        return placed_replicas(rb) == replicas and not is_queued(rb)

    await eventually(done, timeout, f"{name} placed with {replicas} replicas")


async def until_queued(s: Stack, ns: str, name: str, timeout: float = 60) -> None:
    async def done() -> bool:
        return is_queued(await binding(s, ns, name))

    await eventually(done, timeout, f"{name} created queued (suspended, annotated)")


async def until_queue_length(s: Stack, ns: str, n: int, timeout: float = 30) -> None:
    async def done() -> bool:
        return bool((await quota_status(s, ns)).get("queued", 0) == n)

    await eventually(done, timeout, f"status.queued == {n}")


async def until_used_pods(s: Stack, ns: str, pods: int, timeout: float = 30) -> None:
    async def done() -> bool:
        return bool((await quota_status(s, ns)).get("used", {}).get("pods") == str(pods))

    await eventually(done, timeout, f"status.used pods == {pods}")


async def queue_up(s: Stack, ns: str, name: str, replicas: int, length: int, **pod: Any) -> None:
    """Create a workload that must be queued, and wait until the quota counts it."""
    await create(s, ns, name, replicas, **pod)
    await until_queued(s, ns, name)
    await until_queue_length(s, ns, length)


async def events_for(s: Stack, ns: str, name: str) -> list[str]:
    got = await s.api.get(
        f"/api/v1/namespaces/{ns}/events",
        {"fieldSelector": f"involvedObject.name={name},involvedObject.kind=Deployment"},
    )
    return [
        e.get("reason", "")
        for e in got.get("items") or []
        if (e.get("source") or {}).get("component") == "karmadaquota-controller"
    ]


# ---------------------------------------------------------------------------------------------
# tests


@pytest.mark.smoke
async def test_queued_in_order_and_a_later_high_priority_one_goes_first(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=4)
    await create(s, ns, "base", 4)
    await until_placed(s, ns, "base", 4)
    for i, name in enumerate(("a", "b", "c"), start=1):
        await queue_up(s, ns, name, 2, i)
    # queued bindings are charged nothing and placed nowhere: used is the base's 4 (once the
    # controller has folded the base's admitted charges, within a second)

    async def base_only() -> bool:
        return bool((await quota_status(s, ns))["used"]["pods"] == "4")

    await eventually(base_only, 30, "used: the base's 4 pods, nothing of the queued ones")

    async def queued_event() -> bool:
        return "Queued" in await events_for(s, ns, "a")

    await eventually(queued_event, 30, "a Queued event on a's Deployment")
    await queue_up(s, ns, "vip", 2, 4, priorityClassName=HIGH)
    rb = await binding(s, ns, "vip")
    assert rb is not None and rb["spec"]["replicaRequirements"]["priorityClassName"] == HIGH

    await scale(s, ns, "base", 2)  # room for one of them: the high-priority one
    await until_placed(s, ns, "vip", 2)
    for name in ("a", "b", "c"):
        assert is_queued(await binding(s, ns, name)), f"{name} must wait behind vip"
    await until_queue_length(s, ns, 3)

    await scale(s, ns, "base", 0)  # room for one more: the oldest, a
    await until_placed(s, ns, "a", 2)
    await until_used_pods(s, ns, 4)
    assert is_queued(await binding(s, ns, "b"))
    assert is_queued(await binding(s, ns, "c"))
    await until_queue_length(s, ns, 2)

    async def admitted_event() -> bool:
        return "Admitted" in await events_for(s, ns, "vip")

    await eventually(admitted_event, 30, "an Admitted event on vip's Deployment")
    assert await s.admissions("room") >= 2  # vip, then a


async def test_best_effort_lets_a_small_one_pass_a_large_head(stack: Stack, namespace: str) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=4)
    await create(s, ns, "base", 4)
    await until_placed(s, ns, "base", 4)
    await queue_up(s, ns, "big", 3, 1)
    await queue_up(s, ns, "small", 1, 2)

    await scale(s, ns, "base", 3)  # room for 1: not for big, for small
    await until_placed(s, ns, "small", 1)
    assert is_queued(await binding(s, ns, "big"))
    await until_queue_length(s, ns, 1)


async def test_strict_fifo_lets_nothing_pass_its_head(stack: Stack, namespace: str) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=4, strategy="StrictFIFO")
    await create(s, ns, "base", 4)
    await until_placed(s, ns, "base", 4)
    await queue_up(s, ns, "big", 3, 1)
    await queue_up(s, ns, "small", 1, 2)

    await scale(s, ns, "base", 3)  # room for 1: small fits but must not pass big
    await until_used_pods(s, ns, 3)
    # a new workload that fits is queued too: it would pass the queue
    await queue_up(s, ns, "tiny", 1, 3)

    await scale(s, ns, "base", 1)  # room for 3: big (the head), and nothing more fits
    await until_placed(s, ns, "big", 3)
    # had small passed big at room 1, big (3) would not fit now (1 + 1 + 3 > 4)
    assert is_queued(await binding(s, ns, "small"))
    assert is_queued(await binding(s, ns, "tiny"))

    await scale(s, ns, "base", 0)  # room for 1: small, the next in line; tiny stays
    await until_placed(s, ns, "small", 1)
    assert is_queued(await binding(s, ns, "tiny"))
    await until_queue_length(s, ns, 1)


async def test_deleting_or_scaling_down_a_queued_workload(stack: Stack, namespace: str) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=4)
    await create(s, ns, "base", 3)
    await until_placed(s, ns, "base", 3)
    await queue_up(s, ns, "gone", 2, 1)
    await queue_up(s, ns, "shrinks", 3, 2)

    await s.bed.akubectl("delete", "deployment", "gone", "-n", ns, "--wait=false")
    await until_queue_length(s, ns, 1)

    await scale(s, ns, "shrinks", 1)  # now it fits: admitted
    await until_placed(s, ns, "shrinks", 1)
    await until_queue_length(s, ns, 0)
    await until_used_pods(s, ns, 4)


async def test_switched_to_refuse_queues_nothing_new_and_drains_its_queue(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=4)
    await create(s, ns, "base", 4)
    await until_placed(s, ns, "base", 4)
    await queue_up(s, ns, "q1", 2, 1)
    drained = await s.admissions("quota_refuse_mode")

    await set_quota(s, ns, 4, "Refuse")

    async def refuses() -> bool:
        spec = (await s.api.get(QUOTAS.format(ns=ns) + "/team"))["spec"]
        return bool(spec["onExceed"] == "Refuse")

    await eventually(refuses, 10, "quota switched to Refuse")
    await create(s, ns, "r1", 2)

    async def refused_and_waiting() -> bool:
        names = [w["template"]["name"] for w in (await quota_status(s, ns)).get("waiting") or []]
        return "r1" in names

    await eventually(refused_and_waiting, 60, "r1 refused (remembered in status.waiting)")
    assert await binding(s, ns, "r1") is None, "a Refuse quota queues nothing new"

    # room for q1 and r1 both (r1 is woken by annotation, and must not take q1's room)
    await scale(s, ns, "base", 0)
    await until_placed(s, ns, "q1", 2)
    assert await s.admissions("quota_refuse_mode") == drained + 1


@pytest.mark.smoke
async def test_the_zero_charge_cannot_be_bought(stack: Stack, namespace: str) -> None:
    """Our annotation and a suspension on a placed binding leave it charged in full; taking
    the annotation or the suspension off a queued binding is charged, and refused when full."""
    s, ns = stack, namespace
    await setup(s, ns, pods=4)
    await create(s, ns, "base", 4)
    await until_placed(s, ns, "base", 4)
    path = BINDINGS.format(ns=ns) + "/base-deployment"
    await s.api.request(
        "PATCH",
        path,
        {
            "metadata": {"annotations": {ANNOTATION: "team"}},
            "spec": {"suspension": {"scheduling": True}},
        },
        content_type=MERGE_PATCH,
    )
    # synchronise on a later change the controller must count: a Deployment of 0 replicas.
    # `used` is read once every admitted charge is counted in it (a charge the controller only
    # has to fold into `used` may wait up to a second: docs/architecture.md)
    await eventually(lambda: _no_pending(s, ns), 30, "every admitted charge counted in used")
    before = int((await quota_status(s, ns))["used"]["count/deployments.apps"])
    await create(s, ns, "marker", 0)

    async def counted() -> bool:
        used = (await quota_status(s, ns))["used"]
        return int(used["count/deployments.apps"]) == before + 1

    await eventually(counted, 30, "the marker counted")
    assert (await quota_status(s, ns))["used"]["pods"] == "4", "a placed binding stays charged"
    assert (await quota_status(s, ns)).get("queued", 0) == 0

    await queue_up(s, ns, "waits", 1, 1)
    waits = BINDINGS.format(ns=ns) + "/waits-deployment"
    for patch in (
        {"metadata": {"annotations": {ANNOTATION: None}}},
        {"spec": {"suspension": {"scheduling": None}}},
    ):
        with pytest.raises(KubeError) as refused:
            await s.api.request("PATCH", waits, patch, content_type=MERGE_PATCH)
        assert refused.value.status == 403 and "exceeded quota: team" in str(refused.value)
    assert is_queued(await binding(s, ns, "waits"))
