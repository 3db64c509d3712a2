"""Karmada's cluster failover with and without a full quota (issue 38).

A bed of its own (started for this module) runs with Karmada's cluster failover on
(e2e/testbed/failover.py: the ``Failover`` gate, NoExecute taint eviction, a ClusterTaintPolicy
tainting a not-Ready member NoExecute), so that the other suites' member outages never move
their workloads. A Deployment divided over member1 and member2 runs; member1's kube-apiserver is
killed; the clock runs until all its replicas run Ready on member2 (as kwok reports them). Then
member1 comes back with its old pods, and the time until Karmada deletes them is measured.

Without a quota that is the baseline, measured 5 times (p50 printed and recorded). With a full
quota (hard = what runs) the same failover must finish within the baseline's p50 × 1.5 + 10 s
and Σ pods on the Ready members must stay ≤ hard at every poll; the member coming back may leave
Σ over hard for no longer than `RETURN_BOUND_S`. Without issue 38's charging rule
(docs/charging.md, "Failover") a failover in a full quota waits for the graceful eviction to
time out (10 minutes); the return test is expected to fail (`LINGERING`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.testbed import TestBed, backend_from_env, build_binaries, campaign, product
from e2e.testbed import failover as fo
from e2e.testbed import guards as gi
from e2e.testbed.aio import InvariantViolation, eventually
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import KubeClient

pytestmark = pytest.mark.e2e

AWAY, STAYS = "member1", "member2"
REPLICAS = 4
REQUESTS = {"cpu": "100m", "memory": "64Mi"}
REPEATS = 5
FAILOVER_TIMEOUT_S = 180.0
# How long a returning member's old pods may keep Σ on the Ready members over hard. A
# placeholder until docs/charging.md states the rule's window (issue 38's product half).
RETURN_BOUND_S = 15.0
# Karmada deletes the returning member's Deployment ~0.4 s after it is Ready, but on the bed its
# pods linger 3–80 s more: the member's kube-controller-manager garbage collector, whose
# discovery failed during the API server outage, cascades the deletion only once it resyncs.
LINGERING = pytest.mark.xfail(
    strict=False,
    reason="a returning member's old pods outlive its Deployment by the member GC's resync",
)
QUOTAS = {
    "pods": {"pods": str(REPLICAS)},
    "pods-and-cpu": {"pods": str(REPLICAS), "requests.cpu": f"{REPLICAS * 100}m"},
}


@pytest.fixture(scope="module")
def failover_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBed]:
    if backend_from_env() != "local":
        pytest.skip("taking a member away needs the local process bed")
    build_binaries()
    bed = TestBed.start(
        Path(tmp_path_factory.mktemp("failover-bed")),
        [AWAY, STAYS],
        quiet=True,
        karmada_feature_gates=fo.FEATURE_GATES,
        karmada_controller_manager_args=fo.CONTROLLER_MANAGER_ARGS,
        karmada_webhook_args=fo.WEBHOOK_ARGS,
    )
    try:
        bed.apply(fo.taint_policy())
        yield bed
    finally:
        bed.stop()


@pytest.fixture(scope="module")
async def karmada(failover_bed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(failover_bed.karmada_kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def members(failover_bed: TestBed) -> AsyncIterator[dict[str, KubeClient]]:
    async with gi.member_clients(failover_bed) as clients:
        yield clients


@contextlib.asynccontextmanager
async def running_everywhere(
    bed: TestBed, karmada: KubeClient, members: dict[str, KubeClient], hard: dict[str, str] | None
) -> AsyncIterator[str]:
    """A fresh namespace (with a quota of `hard`, initialised, if given) where the workload
    runs, divided over both members; deleted afterwards."""
    ns = f"failover-{secrets.token_hex(3)}"
    await karmada.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        await _place(bed, karmada, members, ns, hard)
        yield ns
    finally:
        await bed.akubectl("delete", "namespace", ns, "--wait=false")


async def _place(
    bed: TestBed,
    karmada: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    hard: dict[str, str] | None,
) -> None:
    await gi.member_namespace(members, ns)
    if hard is not None:
        path = campaign.QUOTA_PATH.format(ns=ns)
        await karmada.post(path, product.quota(ns, "team", hard))

        async def initialised() -> bool:
            q = await karmada.get(f"{path}/team")
            return set(hard) <= set((q.get("status") or {}).get("used") or {})

        await eventually(initialised, 60, f"quota in {ns} initialised")
    await bed.aapply(
        [
            deployment(ns, "app", REPLICAS, REQUESTS),
            divided_policy(ns, "app", [AWAY, STAYS], deployment="app"),
        ]
    )
    watch = fo.Watch(karmada, members, ns)

    async def divided() -> bool:
        p = await watch.poll()
        return all(p.running[m] == REPLICAS // 2 for m in (AWAY, STAYS))

    await eventually(divided, 90, f"{REPLICAS} pods Running, divided over {AWAY} and {STAYS}")


@dataclass(frozen=True)
class Run:
    failover_s: float
    back: fo.Return


def never_over(hard: int) -> fo.OnPoll:
    """The quota's guarantee where it can be seen: Σ pods on the Ready members ≤ hard."""

    def check(p: fo.Poll) -> None:
        if p.pods_on_ready() > hard:
            raise InvariantViolation(
                f"{p.at:.1f}s: {p.pods_on_ready()} pods on Ready members > hard {hard}: {p}"
            )

    return check


async def fail_over_and_back(
    bed: TestBed,
    karmada: KubeClient,
    members: dict[str, KubeClient],
    ns: str,
    timeout: float = FAILOVER_TIMEOUT_S,
    on_poll: fo.OnPoll = fo.nothing,
) -> Run:
    """Take AWAY away, time the failover, bring it back (always) and time its cleanup."""
    watch = fo.Watch(karmada, members, ns)
    try:
        watch.started = fo.take_away(bed, AWAY)
        failover_s = await fo.time_until_running_elsewhere(watch, AWAY, REPLICAS, timeout, on_poll)
        assert any(p.tainted[AWAY] for p in watch.polls), (
            f"{AWAY} was never tainted NoExecute: the replicas moved some other way"
        )
    except BaseException:
        await asyncio.to_thread(fo.bring_back, bed, AWAY)
        raise
    back = await fo.watch_return(bed, watch, AWAY, REPLICAS)
    return Run(failover_s, back)


@pytest.fixture(scope="module")
async def baseline(
    failover_bed: TestBed, karmada: KubeClient, members: dict[str, KubeClient]
) -> list[Run]:
    """The failover without a quota, `REPEATS` times, each in a fresh namespace."""
    runs: list[Run] = []
    for _ in range(REPEATS):
        async with running_everywhere(failover_bed, karmada, members, None) as ns:
            runs.append(await fail_over_and_back(failover_bed, karmada, members, ns))
    return runs


def fast_enough(baseline: list[Run]) -> float:
    """A failover in a full quota must finish within the baseline's p50 × 1.5 + 10 s."""
    return fo.p50([r.failover_s for r in baseline]) * 1.5 + 10


def _figures(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def _record(record_property: Any, name: str, values: list[float]) -> None:
    record_property(name, _figures(values))
    record_property(f"{name}_p50", round(fo.p50(values), 1))
    print(f"{name}: p50 {fo.p50(values):.1f}s of [{_figures(values)}]")


async def test_a_member_taken_away_its_replicas_run_on_the_other_without_a_quota(
    baseline: list[Run], record_property: Any
) -> None:
    """Cluster failover works on the bed and is timed: member1's replicas run on member2
    after its API server is killed, and its old pods are deleted once it is back."""
    assert len(baseline) == REPEATS
    failover = [r.failover_s for r in baseline]
    _record(record_property, "failover_s", failover)
    _record(record_property, "return_ready_s", [r.back.ready_s for r in baseline])
    cleanup = [r.back.cleanup_after_ready_s for r in baseline]
    _record(record_property, "return_cleanup_after_ready_s", cleanup)
    undeploy = [r.back.undeployed_s - r.back.ready_s for r in baseline]
    _record(record_property, "return_deployment_deleted_after_ready_s", undeploy)
    _record(record_property, "return_over_hard_s", [r.back.over_hard_s for r in baseline])
    assert all(0 < f < FAILOVER_TIMEOUT_S for f in failover), failover


@pytest.mark.parametrize("hard", list(QUOTAS.values()), ids=list(QUOTAS))
async def test_a_failover_in_a_full_quota_is_as_fast_and_never_over_hard(
    baseline: list[Run],
    stack: campaign.Stack,
    failover_bed: TestBed,
    karmada: KubeClient,
    members: dict[str, KubeClient],
    hard: dict[str, str],
    record_property: Any,
) -> None:
    """With the quota full, the same failover completes within the baseline's p50 × 1.5 +
    10 s, and Σ pods on the Ready members ≤ hard at every poll."""
    bound = fast_enough(baseline)
    async with running_everywhere(failover_bed, karmada, members, hard) as ns:
        run = await fail_over_and_back(
            failover_bed, karmada, members, ns, timeout=bound, on_poll=never_over(REPLICAS)
        )
    record_property("failover_s", round(run.failover_s, 1))
    print(f"failover in a full quota {hard}: {run.failover_s:.1f}s (bound {bound:.1f}s)")
    assert run.failover_s <= bound


@LINGERING
async def test_a_member_back_with_its_old_pods_is_over_hard_no_longer_than_the_rule_says(
    baseline: list[Run],
    stack: campaign.Stack,
    failover_bed: TestBed,
    karmada: KubeClient,
    members: dict[str, KubeClient],
    record_property: Any,
) -> None:
    """After a failover in a full quota, member1 comes back with its old pods: Σ pods on the
    Ready members is over hard until Karmada deletes them, no longer than `RETURN_BOUND_S`."""
    async with running_everywhere(failover_bed, karmada, members, QUOTAS["pods"]) as ns:
        run = await fail_over_and_back(
            failover_bed, karmada, members, ns, timeout=fast_enough(baseline)
        )
    record_property("return_over_hard_s", round(run.back.over_hard_s, 1))
    print(
        f"member back: Ready after {run.back.ready_s:.1f}s, its old Deployment deleted "
        f"{run.back.undeployed_s - run.back.ready_s:.1f}s later, its old pods gone "
        f"{run.back.cleanup_after_ready_s:.1f}s after Ready, Σ over hard for "
        f"{run.back.over_hard_s:.1f}s"
    )
    assert run.back.over_hard_s <= RETURN_BOUND_S


@pytest.fixture(scope="module")
async def stack(failover_bed: TestBed) -> AsyncIterator[campaign.Stack]:
    """karmadaquota's webhook and controller, started after the baseline (which must run
    without them)."""
    async with campaign.stack(failover_bed, controllers=1, ttl="20s") as s:
        yield s
