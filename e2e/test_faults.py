"""Faults injected mid-storm; afterwards the quota invariant must hold (e2e/testbed/campaign.py).

Each test reports its recovery times (printed, and as pytest report properties):
`available_s`, from the fault until an ordinary binding is admitted again, and `converged_s`,
from the end of the storm until `used` equals the live bindings' charges with no reservation
left. No timing is asserted beyond generous deadlines.

The storm's quotas include one with member guards (`memberEnforcement: ResourceQuota`): through
every fault, Σ over members of what its guard ResourceQuotas may hold ≤ its hard is polled from
the members (e2e/testbed/guards.py) while the storm runs, and at every convergence poll.

These tests kill and restart the control plane, so they run on a bed of their own (two members,
started for this module) and the shared bed of the other suites is never disturbed. A member
API server killed mid-storm is the guards' outage case here (the member keeps its guard, the
other's never grows past what is left); the controller's view of an unreachable member is
covered by
e2e/test_controller.py::test_an_unreachable_member_is_reported_stale_and_nothing_else_stops.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from e2e.testbed import TestBed, backend_from_env, build_binaries, campaign
from e2e.testbed import guards as gi
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding
from karmadaquota.kube.client import JSON, KubeClient, KubeError

pytestmark = pytest.mark.e2e

TTL_S = 20
OPS, NAMES = 240, 40


@pytest.fixture(scope="module")
def fault_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBed]:
    if backend_from_env() != "local":
        pytest.skip("fault injection needs the local process bed")
    build_binaries()
    bed = TestBed.start(
        Path(tmp_path_factory.mktemp("fault-bed")), ["member1", "member2"], quiet=True
    )
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture(scope="module")
async def stack(fault_bed: TestBed) -> AsyncIterator[campaign.Stack]:
    async with campaign.stack(fault_bed, controllers=2, ttl=f"{TTL_S}s") as s:
        yield s


@pytest.fixture(scope="module")
async def api(fault_bed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(fault_bed.karmada_kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def members(fault_bed: TestBed) -> AsyncIterator[dict[str, KubeClient]]:
    async with gi.member_clients(fault_bed) as clients:
        yield clients


@pytest.fixture
async def ns(api: KubeClient) -> str:
    name = f"fault-{secrets.token_hex(3)}"
    await api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    return name  # not deleted: the bed is thrown away with the module


async def admitted_probe(api: KubeClient, ns: str, timeout: float = 120) -> float:
    """Seconds until a small binding is admitted in `ns` (it has room for every probe)."""
    started = time.monotonic()
    path = campaign.RB_PATH.format(ns=ns)
    while True:
        try:
            await api.post(path, binding(ns, f"probe-{secrets.token_hex(4)}", cpu="1m"))
            return time.monotonic() - started
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError):
            if time.monotonic() - started > timeout:
                raise
        await asyncio.sleep(0.2)  # polling interval


async def storm_with_fault(
    api: KubeClient,
    members: dict[str, KubeClient],
    bed: TestBed,
    ns: str,
    fault: Callable[[asyncio.Task[campaign.Stats]], Awaitable[None]],
    record_property: Callable[[str, Any], None],
    converge_timeout: float = TTL_S + 90,
) -> gi.GuardInvariant:
    """Run a seeded storm in `ns`, inject `fault` once the storm is under way, measure; a
    second namespace, `<ns>-probe`, must admit before and after the fault. `fault` is given
    the storm's task. The member guards of the storm's guarded quota are polled from before
    the storm until it converged."""
    probe_ns = f"{ns}-probe"
    await api.post("/api/v1/namespaces", {"metadata": {"name": probe_ns}})
    seed = campaign.seed_from_env()
    print(f"seed={seed} (replay: KARMADAQUOTA_SEED={seed})")
    record_property("seed", seed)
    await campaign.create_quotas(api, ns)
    await api.post(
        campaign.QUOTA_PATH.format(ns=probe_ns),
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": "probe", "namespace": probe_ns},
            "spec": {"hard": {"requests.cpu": "1000"}},
        },
    )
    await admitted_probe(api, probe_ns)  # the probe namespace works before the fault
    await gi.member_namespace(members, ns)
    await gi.guards_ready(members, ns, campaign.GUARDED)
    guard_check = campaign.guard_invariant(members, ns)
    async with gi.watching(guard_check):
        storm = asyncio.create_task(
            campaign.run(api, ns, bed.members, seed, OPS, concurrency=12, names=NAMES)
        )
        await asyncio.sleep(1.0)  # let the storm get under way: a fault mid-storm is the point
        t_fault = time.monotonic()
        await fault(storm)
        await admitted_probe(api, probe_ns)
        available = time.monotonic() - t_fault
        stats = await storm
        print(stats.summary())
        _, converged = await campaign.converge(
            api, ns, timeout=converge_timeout, guards=guard_check
        )
    _, converged_probe = await campaign.converge(api, probe_ns, timeout=converge_timeout)
    print(f"recovery: admissions again {available:.1f}s after the fault; usage converged "
          f"{converged:.1f}s after the storm")  # fmt: skip
    record_property("available_s", round(available, 1))
    record_property("converged_s", round(max(converged, converged_probe), 1))
    return guard_check


async def test_one_webhook_replica_sigkilled_mid_storm(
    fault_bed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    record_property: Callable[[str, Any], None],
) -> None:

    async def kill_replica(_storm: object) -> None:
        stack.webhooks[1].proc.stop(signal.SIGKILL)

    await storm_with_fault(api, members, fault_bed, ns, kill_replica, record_property)
    await stack.restart_webhook(1)


async def test_controller_leader_sigkilled_with_a_standby_running(
    fault_bed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    record_property: Callable[[str, Any], None],
) -> None:
    leader = await eventually(lambda: stack.leader(), 60, "a controller leads")
    takeover: list[float] = []

    async def kill_leader(_storm: object) -> None:
        leader.stop(signal.SIGKILL)
        started = time.monotonic()

        async def new_leader() -> None:
            await eventually(
                lambda: stack.leader() not in (None, leader), 60, "the standby takes the Lease"
            )
            takeover.append(time.monotonic() - started)

        asyncio.get_running_loop().create_task(new_leader())

    await storm_with_fault(api, members, fault_bed, ns, kill_leader, record_property)
    await eventually(lambda: bool(takeover), 60, "takeover measured")
    print(f"standby took the Lease {takeover[0]:.1f}s after the leader was killed")
    record_property("takeover_s", round(takeover[0], 1))
    stack.start_controller()  # a standby again for the tests after this one


@pytest.mark.parametrize("component", ["karmada-apiserver", "karmada-etcd"])
async def test_control_plane_process_sigkilled_and_restarted_mid_storm(
    fault_bed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    component: str,
    record_property: Callable[[str, Any], None],
) -> None:
    healthy: list[float] = []

    async def restart(_storm: object) -> None:
        healthy.append(await asyncio.to_thread(fault_bed.restart, component, signal.SIGKILL, 120))

    await storm_with_fault(api, members, fault_bed, ns, restart, record_property)
    print(f"{component}: bed healthy {healthy[0]:.1f}s after SIGKILL")
    record_property("healthy_s", round(healthy[0], 1))
    assert fault_bed.healthy()


async def test_member_api_server_sigkilled_mid_storm_and_the_guards_hold(
    fault_bed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    record_property: Callable[[str, Any], None],
) -> None:
    """A member's kube-apiserver SIGKILLed while the storm moves the guards: it is kept down
    for the rest of the storm and until the quota reports it unguarded (the controller tried
    to move its guard and could not), then restarted. Σ of the guards ≤ hard at every poll
    through it (the down member counted at the guard it keeps, confirmed unchanged once it is
    back), and afterwards every member is guarded again."""
    down = fault_bed.members[-1]
    component = f"{down}-kube-apiserver"
    healthy: list[float] = []
    reported: list[str] = []

    async def guarded(status: str) -> JSON | None:
        q = await api.get(campaign.QUOTA_PATH.format(ns=ns) + f"/{campaign.GUARDED}")
        conds = {c["type"]: c for c in (q.get("status") or {}).get("conditions") or []}
        cond = conds.get("Guarded", {})
        return cond if cond.get("status") == status else None

    async def outage(storm: asyncio.Task[campaign.Stats]) -> None:
        await asyncio.to_thread(fault_bed.kill, component)
        try:
            await asyncio.wait([storm], timeout=120)  # the storm runs on against one member
            cond = await eventually(
                lambda: guarded("False"), 60, f"Guarded=False while {down} is down"
            )
            reported.append(cond["message"])
        finally:
            healthy.append(
                await asyncio.to_thread(fault_bed.restart, component, signal.SIGKILL, 120)
            )

    check = await storm_with_fault(api, members, fault_bed, ns, outage, record_property)
    assert reported[0].startswith(f"{down}: unreachable"), reported
    print(f"{component}: bed healthy {healthy[0]:.1f}s after the restart began")
    record_property("healthy_s", round(healthy[0], 1))
    # the invariant was judged while the member was away, not only around the outage
    record_property("polls_while_down", check.held_polls)
    assert check.held_polls > 0, check.summary()
    await eventually(lambda: guarded("True"), 60, f"{down} guarded again")
    assert fault_bed.healthy()
