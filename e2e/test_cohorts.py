"""Cohorts on the real bed (issue 44): a team borrows what another leaves unused, across two
members, and gives it back through the queue — judged by the pods the members run.

Two namespaces, each with a guarded quota of one cohort: `lender` (pods=4, lendingLimit 2,
onExceed Queue) and `borrower` (pods=2). The borrower's Deployment of 4 is refused, listed as
waiting, lent 2 by the controller and woken; the lender's own Deployment of 3 then does not fit
(4 − 2 lent) and is queued; when the borrower scales down, the loan comes back and the queued
Deployment is admitted. Throughout, the pods both namespaces run in the members (those in
their grace period included) never pass Σ hard = 6, and the lender's rival is the competitor
that must wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from e2e.testbed import TestBed, product
from e2e.testbed.aio import Within, eventually, within
from e2e.testbed.guards import member_clients
from e2e.testbed.layout import KARMADA
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient, NotFound

pytestmark = pytest.mark.e2e

CPU = {"cpu": "100m"}
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
BINDINGS = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"


@dataclass
class Stack:
    bed: TestBed
    api: KubeClient
    members: dict[str, KubeClient]


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[Stack]:
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-cohorts")
    hook = await product.start_webhook(testbed, "webhook-cohorts")
    api = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        async with member_clients(testbed) as members:
            yield Stack(testbed, api, members)
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()
        await api.close()


@contextlib.asynccontextmanager
async def namespaces(bed: TestBed, *names: str) -> AsyncIterator[list[str]]:
    token = secrets.token_hex(3)
    made = [f"e2e-cohort-{n}-{token}" for n in names]
    for ns in made:
        await bed.akubectl("create", "namespace", ns)
    try:
        yield made
    finally:
        for ns in made:
            await bed.akubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")


async def status(s: Stack, ns: str) -> JSON:
    got: JSON = (await s.api.get(QUOTAS.format(ns=ns) + "/team")).get("status") or {}
    return got


def loan(entries: list[JSON] | None, other: str) -> str:
    for e in entries or []:
        if e["quota"] == other:
            return str(e["resources"].get("pods", "0"))
    return "0"


async def pods_running(s: Stack, namespaces: list[str]) -> tuple[int, dict[str, int]]:
    """Pods of `namespaces` in every member, those in their grace period included."""
    out: dict[str, int] = {}
    for m, client in s.members.items():
        for ns in namespaces:
            try:
                items = (await client.get(f"/api/v1/namespaces/{ns}/pods")).get("items", [])
            except NotFound:
                items = []
            out[f"{m}/{ns}"] = len(items)
    return sum(out.values()), out


def within_hard(
    s: Stack, namespaces: list[str], hard: int
) -> contextlib.AbstractAsyncContextManager[Within]:
    """The pods `namespaces` run in the members (those ending included) stay within `hard`
    (the cohort's Σ hard) at every poll of the block."""

    async def pods() -> tuple[int, dict[str, int]]:
        return await pods_running(s, namespaces)

    return within(pods, hard, "the cohort's Σ hard")


async def placed(s: Stack, ns: str, name: str) -> int:
    try:
        rb = await s.api.get(BINDINGS.format(ns=ns) + f"/{name}-deployment")
    except NotFound:
        return 0
    if (rb["spec"].get("suspension") or {}).get("scheduling"):
        return 0
    return sum(int(c.get("replicas", 0)) for c in rb["spec"].get("clusters") or [])


async def test_a_team_borrows_idle_budget_and_the_lender_gets_it_back_through_its_queue(
    stack: Stack,
) -> None:
    s = stack
    cohort = f"research-{secrets.token_hex(2)}"
    async with namespaces(s.bed, "lender", "borrower") as (lender, borrower):
        members = list(s.bed.members)[:2]
        for ns in (lender, borrower):
            await s.bed.aapply(divided_policy(ns, "all", members))
        await s.bed.aapply(
            product.quota(
                lender,
                "team",
                {"pods": "4"},
                cohort=cohort,
                lendingLimit={"pods": "2"},
                onExceed="Queue",
            )
        )
        await s.bed.aapply(product.quota(borrower, "team", {"pods": "2"}, cohort=cohort))
        for ns in (lender, borrower):

            async def known(ns: str = ns) -> bool:
                return "pods" in (await status(s, ns)).get("used", {})

            await eventually(known, 60, f"{ns}'s usage known")

        async with within_hard(s, [lender, borrower], 6) as most:
            # the borrower asks for 4 of its 2: refused, then lent 2 of the lender's idle 4
            await s.bed.aapply(deployment(borrower, "big", 4, CPU))

            async def lent_and_running() -> bool:
                b, lt = await status(s, borrower), await status(s, lender)
                total, _ = await pods_running(s, [borrower])
                return (
                    loan(b.get("borrowed"), f"{lender}/team") == "2"
                    and loan(lt.get("lent"), f"{borrower}/team") == "2"
                    and await placed(s, borrower, "big") == 4
                    and total == 4
                )

            await eventually(lent_and_running, 120, "the borrower lent 2 and running 4 pods")
            told = await status(s, borrower)
            assert told["loans"] == "borrowed pods: 2", told
            assert (await status(s, lender))["loans"] == "lent pods: 2"

            # the lender's own 3 do not fit beside its loan (4 − 2): queued, not run
            await s.bed.aapply(deployment(lender, "own", 3, CPU))

            async def queued() -> bool:
                return int((await status(s, lender)).get("queued", 0)) == 1

            await eventually(queued, 60, "the lender's Deployment queued")
            assert await placed(s, lender, "own") == 0
            # nothing new is lent while the lender waits, and the loan in use stays
            assert loan((await status(s, lender)).get("lent"), f"{borrower}/team") == "2"

            # the borrower needs its loan no more: it comes back, the lender's queue admits
            await s.bed.akubectl("scale", "deployment", "big", "--replicas=2", "-n", borrower)

            async def returned() -> bool:
                return not (await status(s, lender)).get("lent")

            await eventually(returned, 60, "the loan given back to the lender", interval=0.05)
            back = time.monotonic()

            async def admitted() -> bool:
                return await placed(s, lender, "own") == 3

            await eventually(admitted, 30, "the lender's queued Deployment admitted", 0.05)
            took = time.monotonic() - back
            assert took < 5.0, took

            async def all_running() -> bool:
                total, _ = await pods_running(s, [lender])
                return total == 3

            await eventually(all_running, 60, "the lender's 3 pods running", 0.05)
            ran = time.monotonic() - back
            print(
                f"\nloan back -> the lender's queued Deployment admitted {took:.2f} s, "
                f"its 3 pods in the members {ran:.2f} s"
            )
        assert 4 <= most.most <= 6


async def test_a_cohort_storm_never_runs_more_than_its_hards_together(stack: Stack) -> None:
    """Three teams of pods=2: two storm with three Deployments of 2 each while the third is
    idle (its 2 lent), then the third asks for its own (it waits: its loan is in use), then one
    stormer leaves (its hard comes free: the third's loan comes back, the other stormer may
    borrow the rest). At every poll the members run at most Σ hard = 6 pods of the three."""
    s = stack
    cohort = f"storm-{secrets.token_hex(2)}"
    async with namespaces(s.bed, "a", "b", "c") as teams:
        members = list(s.bed.members)[:2]
        for ns in teams:
            await s.bed.aapply(divided_policy(ns, "all", members))
            await s.bed.aapply(product.quota(ns, "team", {"pods": "2"}, cohort=cohort))
        for ns in teams:

            async def known(ns: str = ns) -> bool:
                return "pods" in (await status(s, ns)).get("used", {})

            await eventually(known, 60, f"{ns}'s usage known")
        a, b, c = teams
        async with within_hard(s, teams, 6) as most:
            await asyncio.gather(
                *(s.bed.aapply(deployment(ns, f"d{i}", 2, CPU)) for ns in (a, b) for i in range(3))
            )

            async def full() -> bool:
                total, _ = await pods_running(s, teams)
                lent = loan((await status(s, c)).get("lent"), f"{a}/team")
                lent2 = loan((await status(s, c)).get("lent"), f"{b}/team")
                return total == 6 and {lent, lent2} == {"2", "0"}

            await eventually(full, 120, "a and b run 6 pods, c's idle 2 lent to one of them")
            borrower = a if loan((await status(s, c)).get("lent"), f"{a}/team") == "2" else b
            other = b if borrower == a else a

            # c's own workload waits while its loan is in use
            await s.bed.aapply(deployment(c, "own", 2, CPU))

            async def listed() -> bool:
                return bool((await status(s, c)).get("waiting"))

            await eventually(listed, 60, "c's workload refused and waiting")
            assert await placed(s, c, "own") == 0

            # the borrower leaves: its 2 come free; c gets its loan back and runs
            for i in range(3):
                await s.bed.akubectl("delete", "deployment", f"d{i}", "-n", borrower)

            async def c_runs() -> bool:
                total, _ = await pods_running(s, [c])
                return total == 2 and not (await status(s, c)).get("lent")

            await eventually(c_runs, 120, "c's loan back and its own 2 pods running")

            async def other_borrows() -> bool:
                total, _ = await pods_running(s, [other])
                got = loan((await status(s, other)).get("borrowed"), f"{borrower}/team")
                return total == 4 and got == "2"

            await eventually(other_borrows, 120, "the other stormer borrows the leaver's 2")
        assert most.most == 6


LOW, HIGH = "kq-e2e-cohort-low", "kq-e2e-cohort-high"


@contextlib.asynccontextmanager
async def priority_classes(bed: TestBed) -> AsyncIterator[None]:
    """Two PriorityClasses, in karmada-apiserver and every member (their pods name them)."""
    for name, value in ((LOW, 10), (HIGH, 1000)):
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for cluster in (KARMADA, *bed.members):
            await bed.aapply(body, cluster=cluster)
    try:
        yield
    finally:
        for cluster in (KARMADA, *bed.members):
            await bed.akubectl(
                "delete", "priorityclass", LOW, HIGH, "--ignore-not-found", cluster=cluster
            )


async def test_a_lender_that_reclaims_takes_its_loan_back_from_the_lowest_priority_borrower(
    stack: Stack,
) -> None:
    """The lender (pods=4, reclaimWithinCohort: Any) lent 2 to the borrower (pods=2), which
    runs a high-priority Deployment of 2 and a low-priority one of 2. The lender's own 3 wait:
    the low-priority Deployment's binding is queued (its pods leave the members, a Reclaimed
    event says why), the loan comes back, the lender's 3 run; the high-priority one keeps
    running. At every poll the members run at most Σ hard = 6 pods of the two."""
    s = stack
    cohort = f"reclaim-{secrets.token_hex(2)}"
    async with (
        priority_classes(s.bed),
        namespaces(s.bed, "lender", "borrower") as (lender, borrower),
    ):
        members = list(s.bed.members)[:2]
        for ns in (lender, borrower):
            await s.bed.aapply(divided_policy(ns, "all", members))
        await s.bed.aapply(
            product.quota(lender, "team", {"pods": "4"}, cohort=cohort, reclaimWithinCohort="Any")
        )
        await s.bed.aapply(product.quota(borrower, "team", {"pods": "2"}, cohort=cohort))
        for ns in (lender, borrower):

            async def known(ns: str = ns) -> bool:
                return "pods" in (await status(s, ns)).get("used", {})

            await eventually(known, 60, f"{ns}'s usage known")
        await s.bed.aapply(deployment(borrower, "high", 2, CPU, priorityClassName=HIGH))

        async def high_runs() -> bool:
            return (await pods_running(s, [borrower]))[0] == 2

        await eventually(high_runs, 60, "the borrower's high-priority 2 running")
        await s.bed.aapply(deployment(borrower, "low", 2, CPU, priorityClassName=LOW))

        async def borrowing() -> bool:
            got = loan((await status(s, borrower)).get("borrowed"), f"{lender}/team")
            return got == "2" and (await pods_running(s, [borrower]))[0] == 4

        await eventually(borrowing, 120, "the borrower lent 2, running 4 pods")

        async with within_hard(s, [lender, borrower], 6) as most:
            await s.bed.aapply(deployment(lender, "own", 3, CPU))

            async def reclaimed() -> bool:
                rb = await s.api.get(BINDINGS.format(ns=borrower) + "/low-deployment")
                annotations = rb["metadata"].get("annotations") or {}
                return annotations.get("quota.karmada.io/queued-by") == "team"

            await eventually(reclaimed, 60, "the low-priority binding queued (reclaimed)")

            async def lender_runs() -> bool:
                return (await pods_running(s, [lender]))[0] == 3

            await eventually(lender_runs, 120, "the loan back and the lender's 3 pods running")
            assert await placed(s, borrower, "high") == 2, "the high-priority one is untouched"
            assert await placed(s, borrower, "low") == 0
            events = await s.api.get(f"/api/v1/namespaces/{borrower}/events")
            told = [e for e in events.get("items", []) if e.get("reason") == "Reclaimed"]
            assert told and told[0]["involvedObject"]["name"] == "low", told
            assert f"quota {lender}/team reclaims" in told[0]["message"]
        assert most.most >= 4
