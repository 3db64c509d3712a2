"""Refused workloads go through when room appears, on the real bed: Karmada's detector, our
webhook recording the refusal in `status.waiting`, our controller waking it by annotation.

Karmada retries a refused binding with exponential backoff (its workqueue doubles the delay
after each failure), so a workload refused for a while is retried only every so often by Karmada
itself; before freeing room these tests wait until two successive refusals of each waiting
workload were `SPACED` seconds apart or more (`status.waiting`: `refusals`, `lastRefused`), so
that Karmada's next retry is at least twice that away and what makes the workload go is the
wake, which they also check directly (the `quota.karmada.io/woken-at` annotation on the
template, the controller's wake-up counter).
Timing figures belong in `bench/bench_wake.py`; deadlines here are generous.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient, NotFound
from karmadaquota.times import parse_time
from karmadaquota.waiting import ANNOTATION

pytestmark = pytest.mark.e2e

CPU = {"cpu": "100m"}
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
BINDINGS = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
# two successive refusals this far apart: Karmada's next retry is >= 2 x this away, far longer
# than a wake takes (docs/benchmarks.md: under a second)
SPACED = 8.0


@dataclass
class Stack:
    """Controller + webhook as the module runs them; the controller can be restarted."""

    bed: TestBed
    api: KubeClient
    controller: product.Proc
    metrics_port: int

    def restart_controller(self, *extra: str) -> None:
        self.controller.stop()
        self.controller, self.metrics_port = product.start_controller(
            self.bed, "controller-wake", *extra
        )

    async def wakeups(self) -> float:
        samples = await product.controller_metrics(self.metrics_port)
        return samples.get('karmadaquota_wakeups_total{result="woken"}', 0.0)


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[Stack]:
    await asyncio.to_thread(product.install_crd, testbed)
    controller, port = product.start_controller(testbed, "controller-wake")
    hook = await product.start_webhook(testbed, "webhook-wake")
    api = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    s = Stack(testbed, api, controller, port)
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield s
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        s.controller.stop()
        await api.close()


# ---------------------------------------------------------------------------------------------
# helpers


async def quota_status(s: Stack, ns: str) -> JSON:
    q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
    status: JSON = q.get("status") or {}
    return status


async def waiting_names(s: Stack, ns: str) -> list[str]:
    return [w["template"]["name"] for w in (await quota_status(s, ns)).get("waiting") or []]


async def setup(s: Stack, ns: str, pods: int) -> None:
    await s.bed.aapply(divided_policy(ns, "all", list(s.bed.members)))
    await s.bed.aapply(product.quota(ns, "team", {"pods": str(pods)}))

    async def initialised() -> bool:
        return "pods" in (await quota_status(s, ns)).get("used", {})

    await eventually(initialised, 30, "controller initialises status.used")


async def create(s: Stack, ns: str, name: str, replicas: int) -> None:
    await s.bed.aapply(deployment(ns, name, replicas, CPU))


async def placed(s: Stack, ns: str, name: str) -> int:
    """Replicas the binding of `name` places in member clusters (0 without a binding)."""
    try:
        rb = await s.api.get(BINDINGS.format(ns=ns) + f"/{name}-deployment")
    except NotFound:
        return 0
    return sum(int(c.get("replicas", 0)) for c in rb["spec"].get("clusters") or [])


async def has_binding(s: Stack, ns: str, name: str) -> bool:
    try:
        await s.api.get(BINDINGS.format(ns=ns) + f"/{name}-deployment")
    except NotFound:
        return False
    return True


async def annotated(s: Stack, ns: str, name: str) -> bool:
    d = await s.api.get(DEPLOYMENTS.format(ns=ns) + f"/{name}")
    return ANNOTATION in ((d.get("metadata") or {}).get("annotations") or {})


async def refused_and_listed(s: Stack, ns: str, name: str, replicas: int) -> None:
    await create(s, ns, name, replicas)

    async def listed() -> bool:
        return name in await waiting_names(s, ns)

    await eventually(listed, 60, f"{name} refused and listed in status.waiting")
    assert not await has_binding(s, ns, name)


async def admitted(s: Stack, ns: str, name: str, replicas: int) -> None:
    await create(s, ns, name, replicas)
    await until_placed(s, ns, name, replicas, 90, f"{name} admitted and scheduled")


async def until_placed(
    s: Stack, ns: str, name: str, replicas: int, timeout: float, what: str
) -> None:
    """Wait until the binding of `name` places exactly `replicas`."""

    async def done() -> bool:
        return await placed(s, ns, name) == replicas

    await eventually(done, timeout, what)


async def until_waiting(s: Stack, ns: str, names: list[str], timeout: float, what: str) -> None:
    """Wait until `status.waiting` lists exactly `names`, in this order."""

    async def done() -> bool:
        return await waiting_names(s, ns) == names

    await eventually(done, timeout, what)


async def backed_off(s: Stack, ns: str, names: list[str], timeout: float = 120) -> None:
    """Wait until Karmada's own retries of each named waiting workload have backed off: two of
    its refusals in a row (its `refusals` count one apart) recorded `SPACED` s apart or more."""
    seen: dict[str, list[tuple[int, datetime]]] = {n: [] for n in names}

    async def spaced() -> bool:
        for w in (await quota_status(s, ns)).get("waiting") or []:
            name = w["template"]["name"]
            when = parse_time(w.get("lastRefused") or w["firstRefused"])
            assert when is not None, w
            got = seen.setdefault(name, [])
            if not got or got[-1][0] != int(w["refusals"]):
                got.append((int(w["refusals"]), when))

        def apart(got: list[tuple[int, datetime]]) -> bool:
            return any(
                n2 == n1 + 1 and (t2 - t1).total_seconds() >= SPACED
                for (n1, t1), (n2, t2) in itertools.pairwise(got)
            )

        return all(apart(seen[n]) for n in names)

    await eventually(spaced, timeout, f"Karmada's retries of {names} {SPACED} s apart", 0.2)


async def set_hard(s: Stack, ns: str, pods: int) -> None:
    await s.bed.aapply(product.quota(ns, "team", {"pods": str(pods)}))


# ---------------------------------------------------------------------------------------------
# tests


async def test_refused_workload_is_woken_when_its_room_is_freed(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=2)
    await admitted(s, ns, "a", 2)
    await refused_and_listed(s, ns, "b", 2)
    entry = (await quota_status(s, ns))["waiting"][0]
    assert entry["binding"] == "b-deployment"
    assert entry["requested"]["pods"] == "2"
    assert entry["template"]["kind"] == "Deployment" and entry["template"]["uid"]
    await backed_off(s, ns, ["b"])
    woken = await s.wakeups()

    await s.bed.akubectl("delete", "deployment", "a", "-n", ns, "--wait=false")

    await until_placed(s, ns, "b", 2, 60, "b's binding created and its 2 replicas placed")
    assert await annotated(s, ns, "b"), "b went through by the wake, not Karmada's backoff"
    assert await s.wakeups() >= woken + 1

    await until_waiting(s, ns, [], 30, "b left the waiting list once admitted")


async def test_fifo_wakes_only_what_fits_in_order_of_first_refusal(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=2)
    await admitted(s, ns, "a", 2)
    for name in ("first", "second", "third"):
        await refused_and_listed(s, ns, name, 2)

    await until_waiting(
        s, ns, ["first", "second", "third"], 30, "the three listed in the order they were refused"
    )
    await backed_off(s, ns, ["first", "second", "third"])

    # room for exactly one: the first goes, the others keep waiting (never woken)
    await s.bed.akubectl("delete", "deployment", "a", "-n", ns, "--wait=false")

    await until_placed(s, ns, "first", 2, 60, "the first refused admitted and placed")

    await until_waiting(
        s, ns, ["second", "third"], 30, "the first off the list, the others still waiting"
    )
    for name in ("second", "third"):
        assert not await has_binding(s, ns, name)
        assert not await annotated(s, ns, name), f"{name} woken though nothing fits"

    # room for one more: the second (refused before the third) goes, the third keeps waiting
    await set_hard(s, ns, 4)

    await until_placed(s, ns, "second", 2, 60, "the second admitted when hard is raised")
    assert not await has_binding(s, ns, "third")
    assert not await annotated(s, ns, "third")

    await set_hard(s, ns, 6)

    await until_placed(s, ns, "third", 2, 60, "the third admitted last")

    await until_waiting(s, ns, [], 30, "nobody left waiting")


async def test_deleted_or_scaled_down_waiting_workloads_leave_the_list(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=3)
    await admitted(s, ns, "a", 2)
    await refused_and_listed(s, ns, "gone", 2)
    await refused_and_listed(s, ns, "smaller", 2)

    await s.bed.akubectl("delete", "deployment", "gone", "-n", ns, "--wait=false")

    async def gone_left() -> bool:
        return "gone" not in await waiting_names(s, ns)

    await eventually(gone_left, 60, "a deleted template leaves the waiting list")

    # scaled down to fit: Karmada reconciles the spec change itself; no wake needed
    await s.bed.akubectl("scale", "deployment/smaller", "--replicas=1", "-n", ns)

    await until_placed(s, ns, "smaller", 1, 60, "the scaled-down workload admitted")

    await until_waiting(s, ns, [], 30, "the scaled-down workload left the waiting list")
    assert not await annotated(s, ns, "smaller")


async def test_refused_scale_up_is_woken_when_hard_is_raised(stack: Stack, namespace: str) -> None:
    s, ns = stack, namespace
    await setup(s, ns, pods=2)
    await admitted(s, ns, "web", 2)
    await s.bed.akubectl("scale", "deployment/web", "--replicas=4", "-n", ns)

    async def listed() -> bool:
        return "web" in await waiting_names(s, ns)

    await eventually(listed, 60, "the refused scale-up listed")
    entry = (await quota_status(s, ns))["waiting"][0]
    # only the increase waits (2 more replicas), not what the Deployment already holds
    assert entry["requested"]["pods"] == "2"
    assert entry["requested"]["requests.cpu"] == "200m"
    assert "count/deployments.apps" not in entry["requested"]
    await backed_off(s, ns, ["web"])

    await set_hard(s, ns, 4)

    await until_placed(
        s, ns, "web", 4, 60, "the scale-up admitted and placed after hard was raised"
    )
    assert await annotated(s, ns, "web")


async def test_with_waking_off_nothing_is_patched_and_karmada_retries_as_before(
    stack: Stack, namespace: str
) -> None:
    s, ns = stack, namespace
    s.restart_controller("--no-wake")
    try:
        await setup(s, ns, pods=2)
        await admitted(s, ns, "a", 2)
        await refused_and_listed(s, ns, "b", 2)
        await s.bed.akubectl("delete", "deployment", "a", "-n", ns, "--wait=false")

        # Karmada's own backoff (short: b was refused only briefly) lets b through, often so
        # soon after a's binding is gone that `used` is pods=0 for less than a poll: b placed
        # with pods: 2 is itself the proof that a's usage was released
        await until_placed(s, ns, "b", 2, 120, "b admitted by Karmada's own retry")
        assert not await annotated(s, ns, "b")
        assert await s.wakeups() == 0
    finally:
        s.restart_controller()
