"""The adversarial campaign: generated bindings created, updated and deleted concurrently through
the real karmada-apiserver and two webhook replicas against overlapping quotas; afterwards the
quota invariant is checked from the API alone (see e2e/testbed/campaign.py), Σ charges ≤ hard
at every 100 ms poll while the storm runs as well as after it. One quota has
member guards: pods are created directly in a member meanwhile (around Karmada), and Σ over
members of the guards' hard ≤ the quota's hard is polled throughout the storm and at every
convergence poll (e2e/testbed/guards.py).

A ClusterKarmadaQuota spans the campaign's namespace and a sibling (labelled for it, holding no
KarmadaQuota of its own) where a smaller seeded storm runs at the same time: tighter than the
namespaced quotas, it refuses during the storms (by name) once they and the pods made around
Karmada fill it, and its invariant is judged the same way over both namespaces — Σ charges of
their live bindings ≤ its hard at every poll, `used` == Σ with no pending charge left once
converged.

Seeded: the seed is printed (shown on failure); `KARMADAQUOTA_SEED=<n>` replays a run.
`KARMADAQUOTA_LONG=1` runs the larger local size.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from e2e.testbed import TestBed, campaign, tenant
from e2e.testbed import guards as gi
from e2e.testbed.aio import eventually
from karmadaquota.controller import guard_keeper as gk
from karmadaquota.kube.client import KubeClient, NotFound

pytestmark = pytest.mark.e2e

TTL_S = 20
SIBLING_SEED = 0x51B1  # the sibling's storm: its own sequence, replayed with the campaign's seed


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[campaign.Stack]:
    async with campaign.stack(testbed, controllers=1, ttl=f"{TTL_S}s") as s:
        yield s


@pytest.fixture(scope="module")
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def members(testbed: TestBed) -> AsyncIterator[dict[str, KubeClient]]:
    async with gi.member_clients(testbed) as clients:
        yield clients


async def test_generated_storm_never_over_admits_and_usage_converges(
    testbed: TestBed,
    stack: campaign.Stack,
    api: KubeClient,
    members: dict[str, KubeClient],
    namespace: str,
    record_property: Callable[[str, Any], None],
) -> None:
    seed = campaign.seed_from_env()
    ops, names, concurrency = (3000, 300, 32) if campaign.long_run() else (400, 60, 16)
    print(f"campaign seed={seed} ops={ops} names={names} (replay: KARMADAQUOTA_SEED={seed})")
    record_property("seed", seed)
    await campaign.create_quotas(api, namespace)
    direct = testbed.members[-1]
    await gi.member_namespace(members, namespace)
    await gi.guards_ready(members, namespace, campaign.GUARDED)
    sibling = f"{namespace}-sib"
    await api.post("/api/v1/namespaces", {"metadata": {"name": sibling}})
    budget = campaign.budget_name()
    spanned = [namespace, sibling]
    try:
        await campaign.create_cluster_quota(api, budget, spanned)
        await tenant.grant(testbed, namespace)
        guard_check = campaign.guard_invariant(members, namespace)
        async with gi.watching(guard_check):
            async with (
                campaign.invariant_during(api, namespace),  # Σ ≤ hard at every poll
                campaign.cluster_invariant_during(
                    api, budget, spanned, around=campaign.pods_around(members[direct], namespace)
                ) as shared,
            ):
                stats, sibling_stats, (pod_stats, pods_left), tenant_stats = await asyncio.gather(
                    campaign.run(
                        api, namespace, testbed.members, seed, ops, concurrency, names=names
                    ),
                    campaign.run(
                        api, sibling, testbed.members, seed ^ SIBLING_SEED, ops // 4, 4, names // 3
                    ),
                    campaign.direct_pods(members[direct], namespace, seed, ops // 10),
                    campaign.tenant_writes(
                        tenant.impersonating(api),
                        namespace,
                        testbed.members,
                        seed,
                        ops // 10,
                        names,
                    ),
                )
            print(stats.summary())
            print(f"the sibling's storm: {sibling_stats.summary()}")
            print(f"the tenant's writes: {tenant_stats.summary()}")
            print(f"pods made in {direct} around Karmada: {pod_stats.summary()}")
            # they count in the guarded quota's usage: gone, `used` is the bindings' charges again
            await campaign.delete_pods(members[direct], namespace, pods_left)
            verdict, seconds = await campaign.converge(
                api, namespace, timeout=TTL_S + 60, guards=guard_check
            )
        shared_verdict, shared_seconds = await campaign.converge_cluster(
            api, budget, spanned, timeout=TTL_S + 60
        )
    finally:
        await campaign.delete_cluster_quota(api, budget)
        with contextlib.suppress(NotFound):
            await api.request("DELETE", f"/api/v1/namespaces/{sibling}")
    print(f"converged {seconds:.1f}s after the storm ({budget}: {shared_seconds:.1f}s later)")
    record_property("converge_seconds", round(seconds, 1))

    # the campaign exercised what it claims to: admissions, quota refusals, negative values
    assert stats.outcomes["create:ok"] > 0, stats.summary()
    messages = " ".join(stats.messages)
    assert "exceeded quota" in messages, stats.summary()
    assert "must be greater than or equal to" in messages, stats.summary()
    # the tenant wrote bindings and an override: none of it got through, each refused by name
    assert tenant_stats.outcomes["tenant-patch:refused"] > 0, tenant_stats.summary()
    assert not [k for k in tenant_stats.outcomes if k.endswith(":ok")], tenant_stats.summary()
    assert all('is forbidden: user "alice" may not' in m for m in tenant_stats.messages), (
        tenant_stats.summary()
    )
    # and never failed inside: a refusal is a decision, not a crash
    for s in (stats, sibling_stats):
        assert "quota admission failed" not in " ".join(s.messages), s.summary()
    assert verdict.converged
    # pods were made around Karmada while the guards moved (some may be refused by a guard)
    assert pod_stats.outcomes["pod-create:ok"] > 0, pod_stats.summary()
    # every quota of the campaign is guarded (the default): any of their guards may refuse one
    guard_refusals = [f"exceeded quota: {gk.guard_name(q.quota)}," for q in guard_check.quotas]
    assert len(guard_refusals) == len(campaign.quotas(namespace)), guard_refusals
    # or the member's quota admission gave up on a guard's status after its own retries, while
    # its quota controller and the keeper wrote the guard (Kubernetes' "Operation cannot be
    # fulfilled on resourcequotas"): refused by the guard all the same, never admitted past it
    guard_refusals += [
        f'Operation cannot be fulfilled on resourcequotas "{gk.guard_name(q.quota)}"'
        for q in guard_check.quotas
    ]
    assert all(any(r in m for r in guard_refusals) for m in pod_stats.messages), pod_stats.summary()

    # the cluster quota: the sibling's bindings got in under it alone, it refused in both
    # namespaces once the two storms filled it, and it converged like the namespaced ones
    refusal = f"exceeded quota: {budget},"
    assert sibling_stats.outcomes["create:ok"] > 0, sibling_stats.summary()
    refused_by_budget = {
        ns: sum(n for m, n in s.messages.items() if refusal in m)
        for ns, s in ((namespace, stats), (sibling, sibling_stats))
    }
    peak = {
        k.split("/", 1)[1]: round(f, 2)
        for k, f in shared.peak.items()
        if k.startswith(f"{budget}/")
    }
    print(f"{budget}: refusals naming it {refused_by_budget}, peak Σ/hard {peak}, "
          f"{shared.polls} polls judged")  # fmt: skip
    record_property("cluster_refusals", sum(refused_by_budget.values()))
    record_property("cluster_polls", shared.polls)
    assert sum(refused_by_budget.values()) > 0, (stats.summary(), sibling_stats.summary())
    # and the storms did fill it (half of a resource at least): the refusals are not only
    # requests too large for it alone. The pods made around Karmada count in its fill as they
    # count in its `used`: in some seeds they hold most of its cpu, and the bindings' half of it.
    assert max(peak.values(), default=0.0) >= 0.5, (peak, f"KARMADAQUOTA_SEED={seed}")
    # the sibling has no quota of its own: every quota refusal there is the cluster quota's
    assert all(refusal in m for m in sibling_stats.messages if "exceeded quota" in m), (
        sibling_stats.summary()
    )
    assert shared_verdict.converged

    # the guarded quota goes with its guards before the namespace does
    path = campaign.QUOTA_PATH.format(ns=namespace) + f"/{campaign.GUARDED}"
    await api.request("DELETE", path)

    async def gone() -> bool:
        try:
            await api.get(path)
        except NotFound:
            return True
        return False

    await eventually(gone, 30, "the guarded quota deleted once its guards are gone")

    # what the programs logged through all of it: decisions, never objects or credentials
    for proc in [*(w.proc for w in stack.webhooks), *stack.controllers]:
        text = proc.log.read_text(errors="replace")
        # field paths do appear in error messages; these appear only in whole objects
        for leak in ("BEGIN ", "PRIVATE KEY", "Bearer ", "managedFields", "TaintManager"):
            assert leak not in text, f"{proc.log} contains {leak!r}"
