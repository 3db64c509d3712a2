"""Queue mode under faults (issue 20's target): two webhook replicas behind one address and two
controllers sharing a Lease; the leader is killed (SIGKILL) while workloads are queued and room
appears. The invariant (Σ charges of live bindings ≤ hard, a queued binding charged nothing) is
checked at every poll; exactly what fits is admitted, in order, none twice, none lost.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import pytest

from e2e.testbed import TestBed, campaign, product
from e2e.testbed.aio import InvariantViolation, eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient
from karmadaquota.queued import ANNOTATION

pytestmark = pytest.mark.e2e

CPU = {"cpu": "100m"}
BINDINGS = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTA = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas/team"


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[campaign.Stack]:
    async with campaign.stack(testbed, controllers=2) as s:
        yield s


@pytest.fixture
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


def placed(rb: JSON) -> int:
    return sum(int(c.get("replicas", 0)) for c in rb["spec"].get("clusters") or [])


def queued(rb: JSON) -> bool:
    return ANNOTATION in ((rb.get("metadata") or {}).get("annotations") or {})


async def bindings(api: KubeClient, ns: str) -> dict[str, JSON]:
    items = (await api.get(BINDINGS.format(ns=ns)))["items"]
    return {b["spec"]["resource"]["name"]: b for b in items}


async def test_leader_killed_mid_queue_never_over_admits_nor_loses_one(
    stack: campaign.Stack, api: KubeClient, namespace: str
) -> None:
    s, ns, bed = stack, namespace, stack.bed
    await bed.aapply(divided_policy(ns, "all", list(bed.members)))
    await bed.aapply(product.quota(ns, "team", {"pods": "10"}, onExceed="Queue"))

    async def initialised() -> bool:
        return "pods" in ((await api.get(QUOTA.format(ns=ns))).get("status") or {}).get("used", {})

    await eventually(initialised, 30, "quota initialised")
    await bed.aapply(deployment(ns, "base", 10, CPU))

    async def base_placed() -> bool:
        return placed((await bindings(api, ns)).get("base") or {"spec": {}}) == 10

    await eventually(base_placed, 60, "base placed")
    waiting = [f"w{i}" for i in range(8)]
    for name in waiting:  # one after the other: their order is their creation
        await bed.aapply(deployment(ns, name, 2, CPU))

    async def all_queued() -> bool:
        status = (await api.get(QUOTA.format(ns=ns))).get("status") or {}
        got = await bindings(api, ns)
        return status.get("queued") == 8 and all(queued(got.get(n, {})) for n in waiting)

    await eventually(all_queued, 60, "eight workloads queued")
    leader = await eventually(s.leader, 30, "a controller leads")

    async def settled() -> bool:
        v = await campaign.verdict(api, ns)
        if not v.safe:  # fails at once: never read as "not yet"
            raise InvariantViolation(f"over-admitted in {ns}:\n{v}")
        got = await bindings(api, ns)
        admitted = [n for n in waiting if not queued(got[n])]
        return len(admitted) == 5 and all(placed(got[n]) == 2 for n in admitted)

    # Σ ≤ hard at every 100 ms poll from the kill until five are admitted
    async with campaign.invariant_during(api, ns):
        leader.stop(signal.SIGKILL)
        await bed.akubectl("scale", "deployment", "base", "--replicas=0", "-n", ns)
        s.start_controller()  # a third replica joins; the standby takes over the Lease first
        await eventually(
            settled, 120, "five admitted and placed after the leader was killed", interval=0.1
        )
    got = await bindings(api, ns)
    assert [n for n in waiting if not queued(got[n])] == waiting[:5], "oldest first"
    assert all(queued(got[n]) and placed(got[n]) == 0 for n in waiting[5:])
    verdict, _ = await campaign.converge(api, ns, 60)
    assert verdict.converged
    status = (await api.get(QUOTA.format(ns=ns)))["status"]
    assert status["used"]["pods"] == "10" and status["queued"] == 3


async def test_the_campaign_in_queue_mode_never_over_admits_and_converges(
    testbed: TestBed, stack: campaign.Stack, api: KubeClient, namespace: str
) -> None:
    """The adversarial campaign (e2e/test_campaign.py) with every quota in Queue mode: creates
    that do not fit are queued and admitted by the leader while updates (which replace the
    whole spec: a suspension dropped is charged in full) and deletes race them."""
    seed = campaign.seed_from_env()
    print(f"campaign seed={seed} (replay: KARMADAQUOTA_SEED={seed})")
    await campaign.create_quotas(api, namespace, on_exceed="Queue")
    async with campaign.invariant_during(api, namespace):  # Σ ≤ hard at every poll
        stats = await campaign.run(
            api, namespace, testbed.members, seed, 400, concurrency=16, names=60
        )
    print(stats.summary())
    verdict, seconds = await campaign.converge(api, namespace, timeout=80)
    print(f"converged {seconds:.1f}s after the storm")
    assert verdict.converged
    queued_total = 0.0
    for w in stack.webhooks:
        samples = product.parse_metrics(await w.metrics())
        queued_total += sum(
            v for k, v in samples.items() if k.startswith("karmadaquota_queued_total{")
        )
    assert queued_total > 0, "the campaign queued nothing: Queue mode was not exercised"
