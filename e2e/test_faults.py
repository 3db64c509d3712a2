"""Faults injected mid-storm; afterwards the quota invariant must hold (e2e/testbed/campaign.py).

Each test reports its recovery times (printed, and as pytest report properties):
`available_s`, from the fault until an ordinary binding is admitted again, and `converged_s`,
from the end of the storm until `used` equals the live bindings' charges with no reservation
left. No timing is asserted beyond generous deadlines.

The storm's quotas include one with member guards (`memberEnforcement: ResourceQuota`): through
every fault, Σ over members of what its guard ResourceQuotas may hold ≤ its hard is polled from
the members (e2e/testbed/guards.py) while the storm runs, and at every convergence poll. A
ClusterKarmadaQuota spans the storm's namespace and a sibling with a smaller storm of its own,
tighter than the namespaced quotas: through every fault, Σ charges of the live bindings of both
namespaces ≤ its hard at every poll, and `used` == Σ with no pending charge left afterwards.

These tests kill and restart the control plane, so they run on a bed of their own (two members,
started for this module) and the shared bed of the other suites is never disturbed. A member
API server killed mid-storm is the guards' outage case here (the member keeps its guard, the
other's never grows past what is left); the controller's view of an unreachable member is
covered by
e2e/test_controller.py::test_an_unreachable_member_is_reported_stale_and_nothing_else_stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from e2e.testbed import (
    TestBed,
    backend_from_env,
    build_binaries,
    campaign,
    faketime,
    kubeconfig,
    product,
    running,
)
from e2e.testbed import guards as gi
from e2e.testbed.aio import InvariantViolation, eventually
from e2e.testbed.storm import binding
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, MERGE_PATCH, KubeClient, KubeError
from karmadaquota.pending import wire_reservations
from karmadaquota.quantity import NANO, Quantity

pytestmark = pytest.mark.e2e

TTL_S = 20
OPS, NAMES = 240, 40
SIBLING_SEED = 0x51B1  # the sibling namespace's storm, replayed with the storm's seed


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


async def under_way(api: KubeClient, ns: str, storm: asyncio.Task[Any], least: int = 5) -> None:
    """Wait until the storm has stored `least` bindings in `ns`; it must still be running
    then (the fault that follows lands mid-storm, as the test's name says)."""

    async def stored() -> bool:
        if storm.done():
            raise InvariantViolation("the storm ended before the fault could land in it")
        return len((await api.get(campaign.RB_PATH.format(ns=ns)))["items"]) >= least

    await eventually(stored, 60, f"{least} bindings stored by the storm", interval=0.1)
    assert not storm.done(), "the storm ended before the fault"


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
    the storm until it converged. A cluster quota spans `ns` and `<ns>-sib`, where a smaller
    storm runs meanwhile; its invariant is polled and converged as the namespace's is."""
    probe_ns, sibling = f"{ns}-probe", f"{ns}-sib"
    for name in (probe_ns, sibling):
        await api.post("/api/v1/namespaces", {"metadata": {"name": name}})
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
    budget, spanned = campaign.budget_name(), [ns, sibling]
    await campaign.create_cluster_quota(api, budget, spanned)
    await admitted_probe(api, probe_ns)  # the probe namespace works before the fault
    await gi.member_namespace(members, ns)
    await gi.guards_ready(members, ns, campaign.GUARDED)
    guard_check = campaign.guard_invariant(members, ns)
    async with (
        gi.watching(guard_check),
        campaign.invariant_during(api, ns),
        campaign.cluster_invariant_during(api, budget, spanned) as shared,
    ):
        storm = asyncio.create_task(
            campaign.run(api, ns, bed.members, seed, OPS, concurrency=12, names=NAMES)
        )
        sibling_storm = asyncio.create_task(
            campaign.run(
                api, sibling, bed.members, seed ^ SIBLING_SEED, OPS // 4, 4, names=NAMES // 4
            )
        )
        await under_way(api, ns, storm)  # a fault mid-storm is the point
        t_fault = time.monotonic()
        await fault(storm)
        await admitted_probe(api, probe_ns)
        available = time.monotonic() - t_fault
        stats, sibling_stats = await storm, await sibling_storm
        print(stats.summary())
        print(f"the sibling's storm: {sibling_stats.summary()}")
        _, converged = await campaign.converge(
            api, ns, timeout=converge_timeout, guards=guard_check
        )
        _, converged_shared = await campaign.converge_cluster(
            api, budget, spanned, timeout=converge_timeout
        )
    _, converged_probe = await campaign.converge(api, probe_ns, timeout=converge_timeout)
    await campaign.delete_cluster_quota(api, budget)
    refusal = f"exceeded quota: {budget},"
    refused = sum(n for s in (stats, sibling_stats) for m, n in s.messages.items() if refusal in m)
    print(f"recovery: admissions again {available:.1f}s after the fault; usage converged "
          f"{converged:.1f}s after the storm; {budget}: {refused} refusals, "
          f"{shared.polls} polls judged")  # fmt: skip
    record_property("available_s", round(available, 1))
    record_property("converged_s", round(max(converged + converged_shared, converged_probe), 1))
    record_property("cluster_refusals", refused)
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


# ---- the controller away for 3× the TTL: admission fails closed, nothing lapses --------------

OUTAGE_TTL_S = 4.0  # a short TTL (--reservation-ttl) so that the outage lasts 3× it
OUTAGE_S = 3 * OUTAGE_TTL_S
OUTAGE_HARD = {"pods": "8", "requests.cpu": "800m"}
OUTAGE_WORKLOADS = 8  # of 2 replicas × 100m: twice the hard, created across the outage
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"


@contextlib.asynccontextmanager
async def webhooks_with(
    stack: campaign.Stack, ttl: float, offsets: tuple[float, float] = (0.0, 0.0)
) -> AsyncIterator[None]:
    """Both webhook replicas restarted with `ttl` and their wall clocks offset by `offsets`
    seconds (libfaketime preloaded: e2e/testbed/faketime.py); as they were afterwards."""
    old = stack.ttl
    stack.ttl = f"{ttl:g}s"
    try:
        for i, offset in enumerate(offsets):
            await stack.restart_webhook(i, env=faketime.skewed(offset))
        yield
    finally:
        stack.ttl = old
        for i in range(len(offsets)):
            await stack.restart_webhook(i)


def pause(procs: list[product.Proc]) -> Callable[[], None]:
    """SIGSTOP `procs` (a process that is there but answers nothing); the resume."""
    for p in procs:
        p.popen.send_signal(signal.SIGSTOP)

    def resume() -> None:
        for p in procs:
            p.popen.send_signal(signal.SIGCONT)

    return resume


async def overdue(stack: campaign.Stack) -> float:
    """The largest karmadaquota_pending_overdue_seconds over the webhook replicas."""
    values = []
    for w in stack.webhooks:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            values.append(
                product.parse_metrics(await w.metrics()).get(
                    "karmadaquota_pending_overdue_seconds", 0.0
                )
            )
    return max(values, default=0.0)


async def outage_storm(
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    away: Callable[[], Awaitable[Callable[[], None]]],
    record_property: Callable[[str, Any], None],
    nobody_confirms: bool = True,
) -> None:
    """Workloads (Deployments, divided over the members) created one after the other across
    an outage of 3× the TTL that `away` starts (it returns the recovery), twice what the quota
    holds. Σ of what the members run ≤ hard at every 100 ms poll throughout; no pending charge
    lapses (with `nobody_confirms`, no controller at all: the charges are still held when the
    outage ends); once it is over the charges are confirmed, and with the hard raised to fit
    every workload all of them are admitted and run."""
    bed = stack.bed
    await bed.aapply(divided_policy(ns, "all", list(bed.members)))
    await api.post(campaign.QUOTA_PATH.format(ns=ns), product.quota(ns, "team", OUTAGE_HARD))
    quota_path = campaign.QUOTA_PATH.format(ns=ns) + "/team"

    async def initialised() -> bool:
        return set(OUTAGE_HARD) <= set(
            ((await api.get(quota_path)).get("status") or {}).get("used", {})
        )

    await eventually(initialised, 60, "quota initialised")
    await gi.member_namespace(members, ns)
    names = [f"w{i}" for i in range(OUTAGE_WORKLOADS)]
    inv = running.RunningInvariant(api, members, ns, "team")
    async with running.watching(inv):
        resume = await away()
        t0 = time.monotonic()
        try:
            for i, name in enumerate(names):  # spread over the outage: most after some TTL
                await asyncio.sleep(
                    max(0.0, t0 + i * OUTAGE_S / OUTAGE_WORKLOADS - time.monotonic())
                )
                await api.post(DEPLOYMENTS.format(ns=ns), deployment(ns, name, 2, {"cpu": "100m"}))
                inv.check()
            # the outage lasts 3× the TTL: by now every charge is past its expiry, held
            await asyncio.sleep(max(0.0, t0 + OUTAGE_S - time.monotonic()))  # the fault's length
            inv.check()
            late = await overdue(stack)
            status = (await api.get(quota_path)).get("status") or {}
            held = len(wire_reservations(status))
            print(f"outage over after {time.monotonic() - t0:.1f}s: {held} pending charges held, "
                  f"oldest {late:.1f}s past its expiry; members ran {inv.worst}")  # fmt: skip
            record_property("pending_held", held)
            record_property("overdue_s", round(late, 1))
            if nobody_confirms:
                assert held > 0 and late > 0, "no pending charge was held through the outage"
        finally:
            resume()
        t_back = time.monotonic()

        async def confirmed() -> bool:
            status = (await api.get(quota_path)).get("status") or {}
            pods = Quantity.parse(str(status.get("used", {}).get("pods", "-1")))
            return not wire_reservations(status) and pods == (await inv.running())["pods"]

        # the pending charges are confirmed: counted in used (what runs), none left
        await eventually(confirmed, 120, "pending charges confirmed after the outage", interval=0.2)
        back = time.monotonic() - t_back
        # room for every workload: the ones refused during the outage are woken and admitted
        await api.request(
            "PATCH",
            quota_path,
            {"spec": {"hard": {"pods": "16", "requests.cpu": "1600m"}}},
            content_type=MERGE_PATCH,
        )

        async def all_run() -> bool:
            got = await inv.running()
            return got["pods"].nanos == 16 * NANO

        await eventually(all_run, 180, "every workload admitted and run after the outage")
        admitted_all = time.monotonic() - t_back
    print(f"recovery: charges confirmed {back:.1f}s after the outage, every workload running "
          f"{admitted_all:.1f}s after it")  # fmt: skip
    record_property("confirmed_s", round(back, 1))
    record_property("all_admitted_s", round(admitted_all, 1))


@pytest.mark.parametrize("who", ["every controller", "the Lease holder"])
async def test_controller_paused_for_three_ttls_under_a_storm_fails_closed(
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    who: str,
    record_property: Callable[[str, Any], None],
) -> None:
    """SIGSTOP (there, answering nothing) for 3× the TTL while twice the quota is created:
    Σ of what the members run never passes the hard (on c43fe24 the charges lapsed at their
    expiry and the webhook let the second half in), and once the controller is back the
    charges are confirmed and everything is admitted."""

    async def away() -> Callable[[], None]:
        if who == "every controller":
            return pause([c for c in stack.controllers if c.popen.poll() is None])
        leader = await eventually(stack.leader, 60, "a controller leads")
        assert len([c for c in stack.controllers if c.popen.poll() is None]) > 1, "no standby"
        return pause([leader])

    async with webhooks_with(stack, OUTAGE_TTL_S):
        await outage_storm(
            stack, api, members, ns, away, record_property, who == "every controller"
        )


@pytest.mark.parametrize("skew", [2.0, -2.0])
async def test_webhook_clocks_skewed_by_two_ttls_still_count_each_others_charges(
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    skew: float,
    record_property: Callable[[str, Any], None],
) -> None:
    """One replica's clock runs `skew` × TTL off (fake time in the process) while every
    controller is paused for 3× the TTL: the replicas count each other's charges, expired by
    either clock, and Σ of what the members run never passes the hard."""

    async def away() -> Callable[[], None]:
        return pause([c for c in stack.controllers if c.popen.poll() is None])

    async with webhooks_with(stack, OUTAGE_TTL_S, (0.0, skew * OUTAGE_TTL_S)):
        await outage_storm(stack, api, members, ns, away, record_property)


async def test_controller_connection_stalled_for_three_ttls_under_a_storm_fails_closed(
    fault_bed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    tmp_path: Path,
    record_property: Callable[[str, Any], None],
) -> None:
    """The leading controller runs, but its connection to karmada-apiserver — its watches,
    its Lease renewals, its writes — stalls for 3× the TTL (an L4 proxy in between,
    SIGSTOPped: a partition, not a refused connection). The others are paused, so nobody
    confirms: Σ of what the members run ≤ hard at every poll, and once the link is back the
    controller leads again and confirms."""
    upstream = urlsplit(kubeconfig.server_of(fault_bed.karmada_kubeconfig)).port
    assert upstream is not None
    with product.tcp_proxy(fault_bed, [upstream], name="controller-link") as (port, link):
        config = yaml.safe_load(fault_bed.karmada_kubeconfig.read_text())
        for c in config["clusters"]:
            c["cluster"]["server"] = f"https://127.0.0.1:{port}"
        linked = tmp_path / "controller-link.kubeconfig"
        linked.write_text(yaml.safe_dump(config))
        others = [c for c in stack.controllers if c.popen.poll() is None]
        resume_others = pause(others)
        proc, _ = product.start_controller(
            fault_bed,
            f"{stack.lease}-linked",
            env={"KARMADAQUOTA_LEASE_NAME": stack.lease},
            kubeconfig=linked,
        )
        stack.controllers.append(proc)
        try:
            # it leads once the paused leader's Lease has lapsed
            await eventually(lambda: stack.leader() is proc, 60, "the linked controller leads")

            async def away() -> Callable[[], None]:
                return pause([link])

            async with webhooks_with(stack, OUTAGE_TTL_S):
                await outage_storm(stack, api, members, ns, away, record_property)
        finally:
            proc.stop()
            resume_others()
