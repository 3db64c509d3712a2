"""A quota's desired status, from scratch: used, per cluster, reservations, conditions (pure)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import recompute as rc
from karmadaquota.controller import status as st
from karmadaquota.controller.index import BindingIndex, observe
from karmadaquota.controller.members import ClusterAccess, MemberWatch
from karmadaquota.controller.recompute import NamespaceSnapshot, recompute
from karmadaquota.pending import (
    RELEASED_DISPROVED,
    RELEASED_OBSERVED,
    entry_key,
    prune_reservations,
)
from karmadaquota.quantity import MAX_BASE_UNITS, NANO, Quantity
from karmadaquota.times import format_time
from tests.conftest import NOW, quota, raw_binding, reservation
from tests.controller.test_controller_pods import container, pod
from tests.fake_api import FakeApiServer
from tests.polling import until


async def member(
    name: str,
    *pods: dict[str, Any],
    synced: bool = True,
    error: str = "",
    claims: Sequence[dict[str, Any]] = (),
) -> MemberWatch:
    """A member cluster's pod and claim watch as the controller runs it
    (`members.MemberWatch`), over a FakeApiServer standing for that member's kube-apiserver and
    holding `pods` and `claims`: listed once (`synced`), then, with `error`, the server failing
    and the watch saying why."""
    api = FakeApiServer()
    for p in pods:
        api.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
    for c in claims:
        api.create(f"/api/v1/namespaces/{c['metadata']['namespace']}/persistentvolumeclaims", c)

    async def secrets(namespace: str, secret: str) -> dict[str, Any]:
        return {"data": {"token": "dG9rZW4="}}

    access = ClusterAccess(name, f"https://{name}", "karmada-cluster", name)
    watch = MemberWatch(access, secrets, lambda _: None, client_factory=lambda *_: api)
    if synced:
        await watch.informer.relist(api)
        await watch.claim_informer.relist(api)
    if error:
        await fail(watch, error)
    return watch


async def fail(watch: MemberWatch, error: str) -> None:
    """The member's API server refuses connections (`error`) until the watch reports it."""
    api = await watch.api()
    assert isinstance(api, FakeApiServer)
    api.fail = OSError(error)
    task = asyncio.create_task(watch.run())
    try:
        await until(lambda: watch.error == error, what=f"{watch.name} reports {error}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def index_of(*raws: dict[str, Any]) -> BindingIndex:
    index = BindingIndex()
    for raw in raws:
        index.apply(observe(raw, index.intern))
    return index


def inputs(index: BindingIndex, *members: MemberWatch, **kw: Any) -> NamespaceSnapshot:
    kw.setdefault("evicting", index.evicting("team-a"))
    return NamespaceSnapshot(
        bindings=index.bindings("team-a"), deleted=index.deleted, members=members, **kw
    )


def res(
    name: str,
    uid: str,
    reserved: Mapping[str, str],
    generation: int = 1,
    expires: Any = NOW + timedelta(minutes=1),
) -> dict[str, Any]:
    r = reservation(reserved, expires, name=name)
    r["reservedBy"]["uid"] = uid
    r["generation"] = generation
    return r


HARD = {
    "requests.cpu": "10",
    "requests.memory": "20Gi",
    "pods": "50",
    "count/deployments.apps": "5",
}


def test_new_quota_gets_every_hard_name_even_when_unused() -> None:
    q = quota(hard=HARD, used={})
    out = recompute(q, inputs(index_of()), NOW)
    assert out.status.used == {
        "count/deployments.apps": "0",
        "pods": "0",
        "requests.cpu": "0",
        "requests.memory": "0",
    }
    assert out.status.hard == dict(sorted(HARD.items()))
    assert out.status.summary == (
        "count/deployments.apps: 0/5, pods: 0/50, requests.cpu: 0/10, requests.memory: 0/20Gi"
    )
    assert [c.type for c in out.status.conditions] == ["Ready", "Valid", "MemberObserved"]
    assert out.status.conditions[0].status == "True"


def test_used_sums_bindings_in_the_hard_format() -> None:
    index = index_of(
        raw_binding(
            "a",
            replicas=3,
            requests={"cpu": "500m", "memory": "512Mi"},
            clusters={"member1": 2, "member2": 1},
        ),
        raw_binding(
            "b", replicas=1, requests={"cpu": "2", "memory": "1Gi"}, clusters={"member2": 1}
        ),
    )
    out = recompute(quota(hard=HARD), inputs(index), NOW)
    assert out.status.used == {
        "count/deployments.apps": "2",
        "pods": "4",
        "requests.cpu": "3500m",
        "requests.memory": "2560Mi",
    }
    per = {c.clusterName: c.used for c in out.status.aggregatedStatus}
    assert per["member1"] == {
        "count/deployments.apps": "1",
        "pods": "2",
        "requests.cpu": "1",
        "requests.memory": "1Gi",
    }
    assert per["member2"]["requests.cpu"] == "2500m"
    assert per["member2"]["count/deployments.apps"] == "2"


def test_scope_filters_what_is_charged() -> None:
    index = index_of(
        raw_binding("hi", replicas=2, priority_class="high"),
        raw_binding("lo", replicas=3, priority_class="low"),
    )
    q = quota(hard={"pods": "10"}, expressions=[("PriorityClass", "In", ["high"])])
    assert recompute(q, inputs(index), NOW).status.used == {"pods": "2"}


async def test_clusters_listed_are_members_and_placements_sorted() -> None:
    index = index_of(raw_binding("a", replicas=1, clusters={"zeta": 1}))
    members = inputs(index, await member("member2"), await member("member1"))
    out = recompute(quota(hard={"pods": "9"}), members, NOW)
    assert [c.clusterName for c in out.status.aggregatedStatus] == ["member1", "member2", "zeta"]
    assert out.status.aggregatedStatus[0].used == {"pods": "0"}
    assert out.status.aggregatedStatus[0].observed == {"pods": "0"}
    assert out.status.aggregatedStatus[2].observed is None  # not a known member


async def test_observed_comes_from_member_pods_and_what_runs_past_placement_is_used() -> None:
    m2 = await member(
        "member2",
        pod("direct", containers=[container({"cpu": "1", "memory": "1Gi"})]),
        pod("other-ns", namespace="else"),
    )
    index = index_of(raw_binding("a", replicas=1, clusters={"member1": 1}))
    out = recompute(quota(hard=HARD), inputs(index, await member("member1"), m2), NOW)
    by = {c.clusterName: c for c in out.status.aggregatedStatus}
    assert by["member2"].observed == {"pods": "1", "requests.cpu": "1", "requests.memory": "1Gi"}
    assert by["member2"].used["pods"] == "0"
    assert by["member1"].observed == {"pods": "0", "requests.cpu": "0", "requests.memory": "0"}
    # the pod made around Karmada runs in the quota's namespace: counted on top of the charge
    assert out.status.used["pods"] == "2"
    oob = next(c for c in out.status.conditions if c.type == "OutOfBandUsage")
    assert (oob.status, oob.reason) == ("True", "ObservedExceedsPlaced")
    assert "member2: pods=1, requests.cpu=1, requests.memory=1Gi" in oob.message


async def test_terminating_pods_count_on_top_of_every_charge_never_netted() -> None:
    # member1: binding a's 2 pods run, binding b's 1 is placed but not started, and a deleted
    # workload's pod is still in its grace period. Netting what runs against what is placed
    # (3 vs 3) would hide the terminating pod: once b's pod starts, 4 run.
    going = pod("old", containers=[container({"cpu": "1", "memory": "1Gi"})])
    going["metadata"]["deletionTimestamp"] = format_time(NOW + timedelta(seconds=30))
    going["metadata"]["deletionGracePeriodSeconds"] = 30
    m1 = await member(
        "member1",
        pod("a-1", containers=[container({"cpu": "1", "memory": "1Gi"})]),
        pod("a-2", containers=[container({"cpu": "1", "memory": "1Gi"})]),
    )
    m1.table.apply("MODIFIED", going)  # as the watch reports a pod being deleted
    index = index_of(
        raw_binding("a", uid="ua", replicas=2, clusters={"member1": 2}),
        raw_binding("b", uid="ub", replicas=1, clusters={"member1": 1}),
    )
    out = recompute(quota(hard=HARD), inputs(index, m1), NOW)
    assert out.status.used["pods"] == "4"
    assert out.status.used["requests.cpu"] == "4"
    assert {c.clusterName: c.observed for c in out.status.aggregatedStatus}["member1"] == {
        "pods": "3",
        "requests.cpu": "3",
        "requests.memory": "3Gi",
    }


async def test_a_deleting_binding_and_then_its_terminating_pods_hold_the_charge() -> None:
    index = index_of(raw_binding("a", uid="ua", replicas=2, clusters={"member1": 2}, deleting=True))
    out = recompute(quota(hard=HARD), inputs(index, await member("member1")), NOW)
    assert out.status.used["pods"] == "2"  # Karmada is still removing its workloads


async def test_member_never_synced_has_no_observed_and_condition_unknown() -> None:
    index = index_of(raw_binding("a", replicas=1, clusters={"m": 1}))
    both = inputs(index, await member("m", synced=False), await member("n", synced=False))
    out = recompute(quota(hard=HARD, member_enforcement="None"), both, NOW)
    # m: what is placed there, nothing observed; n: nothing known, no entry of zeros
    assert [(c.clusterName, c.observed) for c in out.status.aggregatedStatus] == [("m", None)]
    cond = out.status.conditions[2]
    assert (cond.type, cond.status, cond.reason) == ("MemberObserved", "Unknown", "MemberSyncing")


async def test_many_members_not_observed_are_counted_not_listed() -> None:
    """A fleet of Pull-mode clusters: the condition names a few and counts the rest, and no
    zero entry is written for them (each of thousands of statuses would carry the fleet)."""
    fleet = [await member(f"c{i:03d}", synced=False, error="no apiEndpoint") for i in range(40)]
    index = index_of(raw_binding("a", replicas=1, clusters={"c007": 1}))
    out = recompute(
        quota(hard={"pods": "5"}, member_enforcement="None"), inputs(index, *fleet), NOW
    )
    assert [c.clusterName for c in out.status.aggregatedStatus] == ["c007"]
    cond = out.status.conditions[2]
    assert cond.status == "False" and cond.reason == "MemberUnreachable"
    assert cond.message.startswith("observed usage is stale for c000: no apiEndpoint")
    assert "c004: no apiEndpoint (never observed)" in cond.message and "c005" not in cond.message
    assert cond.message.endswith("(and 35 more)")


async def test_unreachable_member_keeps_figures_and_is_named() -> None:
    m = await member("member2", pod("x"), error="connection refused")
    out = recompute(quota(hard={"pods": "5"}), inputs(index_of(), await member("member1"), m), NOW)
    by = {c.clusterName: c for c in out.status.aggregatedStatus}
    assert by["member2"].observed == {"pods": "1"}
    cond = out.status.conditions[2]
    assert cond.status == "False" and cond.reason == "MemberUnreachable"
    assert "member2: connection refused" in cond.message
    assert "member1" not in cond.message
    assert out.status.conditions[0].status == "True"  # usage is still right


async def test_member_watch_disabled() -> None:
    out = recompute(
        quota(hard={"pods": "5"}),
        inputs(
            index_of(raw_binding("a", replicas=1, clusters={"member1": 1})),
            await member("member1"),
            member_watch=False,
        ),
        NOW,
    )
    assert out.status.aggregatedStatus[0].observed is None
    assert out.status.conditions[2].reason == "MemberWatchDisabled"


def test_invalid_quota_is_not_charged() -> None:
    index = index_of(raw_binding("a", replicas=1))
    q = quota(hard={"limits.pods": "4", "pods": "2"})
    out = recompute(q, inputs(index), NOW)
    assert out.status.used == {}
    valid = {c.type: c for c in out.status.conditions}["Valid"]
    assert valid.status == "False" and "limits.pods" in valid.message
    assert {c.type: c for c in out.status.conditions}["Ready"].status == "False"
    assert out.used == {}


def test_reservation_dropped_once_observed_at_its_generation() -> None:
    index = index_of(raw_binding("a", replicas=2, generation=3, uid="uid-a"))
    q = quota(
        hard=HARD,
        reservations=[
            res("a", "uid-a", {"pods": "2"}, generation=3),
            res("a-next", "uid-a", {"pods": "1"}, generation=4),
            res("b", "uid-b", {"pods": "1"}),
        ],
    )
    out = recompute(q, inputs(index), NOW)
    assert [r.reservedBy.name for r in out.status.reservations] == ["a-next", "b"]
    assert out.released == {RELEASED_OBSERVED: 1}
    # the same write carries that binding's usage
    assert out.status.used["pods"] == "2"


def test_reservation_of_a_deleted_binding_is_dropped() -> None:
    index = index_of(raw_binding("a", rv=3, uid="uid-a"))
    index.remove("team-a", "uid-a", 5)
    q = quota(hard=HARD, reservations=[res("a", "uid-a", {"pods": "2"}, generation=9)])
    out = recompute(q, inputs(index), NOW)
    assert out.status.reservations == []
    assert out.released == {RELEASED_OBSERVED: 1}


def test_expired_and_unreadable_reservations_hold_next_expiry_reported() -> None:
    """A clock alone never releases a charge: expired and unreadable expirations are kept
    (due for the orphan audit); the next expiry is the earliest one still to come."""
    q = quota(
        hard=HARD,
        reservations=[
            res("old", "u1", {"pods": "1"}, expires=NOW - timedelta(seconds=1)),
            res("bad", "u2", {"pods": "1"}, expires="not a time"),
            res("later", "u3", {"pods": "1"}, expires=NOW + timedelta(seconds=30)),
            res("soon", "u4", {"pods": "1"}, expires=NOW + timedelta(seconds=5)),
        ],
    )
    out = recompute(q, inputs(index_of()), NOW)
    assert [r.reservedBy.name for r in out.status.reservations] == ["old", "bad", "later", "soon"]
    assert out.released == {}
    assert out.next_expiry == NOW + timedelta(seconds=5)


def test_a_reservation_naming_no_possible_binding_is_disproved_at_once() -> None:
    q = quota(
        hard=HARD,
        reservations=[
            res("Not/A Name", "u1", {"pods": "1"}, expires=NOW + timedelta(seconds=30)),
            res("fine", "u2", {"pods": "1"}, expires=NOW + timedelta(seconds=30)),
        ],
    )
    out = recompute(q, inputs(index_of()), NOW)
    assert [r.reservedBy.name for r in out.status.reservations] == ["fine"]
    assert out.released == {RELEASED_DISPROVED: 1}


def test_used_plus_reserved_never_dips_below_the_truth() -> None:
    """Whatever the index has seen, a binding's usage is in used or in a kept reservation."""
    q = quota(hard={"pods": "100"}, reservations=[res("a", "uid-a", {"pods": "4"}, generation=2)])
    for seen_generation in (None, 1, 2, 3):
        raws = (
            []
            if seen_generation is None
            else [
                raw_binding(
                    "a",
                    uid="uid-a",
                    replicas=4 if seen_generation >= 2 else 1,
                    generation=seen_generation,
                )
            ]
        )
        out = recompute(q, inputs(index_of(*raws)), NOW)
        used = int(out.status.used["pods"])
        reserved = sum(int(r.reserved["pods"]) for r in out.status.reservations)
        # the admitted 4 pods are accounted for at every stage, exactly once when observed
        assert used + reserved >= 4
        if seen_generation is not None and seen_generation >= 2:
            assert (used, reserved) == (4, 0)


def test_prune_keeps_order() -> None:
    q = quota(hard=HARD, reservations=[res(n, f"u-{n}", {"pods": "1"}) for n in "abc"])
    kept, released, _ = prune_reservations(q.status.reservations, {}, lambda uid: False, NOW)
    assert [r.reservedBy.name for r in kept] == ["a", "b", "c"] and released == {}


def test_prune_releases_up_to_the_count_of_each_disproved_key() -> None:
    """Disproved entries (an UPDATE never stored) go, as many of each key as proved: a third
    entry of the same key, admitted after the proof, and every other entry stay."""
    same = [res("a", "u-a", {"pods": "1"}) for _ in range(3)]
    q = quota(hard=HARD, reservations=[*same, res("b", "u-b", {"pods": "1"})])
    key = entry_key(q.status.reservations[0])
    kept, released, _ = prune_reservations(
        q.status.reservations, {}, lambda uid: False, NOW, {key: 2}
    )
    assert [r.reservedBy.name for r in kept] == ["a", "b"]
    assert released == {RELEASED_DISPROVED: 2}


async def test_recompute_is_stable_no_second_write() -> None:
    index = index_of(raw_binding("a", replicas=2, clusters={"member1": 2}))
    m = await member("member1")
    q = quota(hard=HARD, used={})
    first = recompute(q, inputs(index, m), NOW)
    raw = q.model_dump(mode="json")
    raw["status"] = st.dump(first.status)
    again = recompute(KarmadaQuota.model_validate(raw), inputs(index, m), NOW + timedelta(hours=1))
    assert not st.needs_write(raw["status"], st.dump(again.status))


async def test_condition_transition_time_moves_only_on_change() -> None:
    m = await member("member1")
    q = quota(hard=HARD)
    first = recompute(q, inputs(index_of(), m), NOW)
    raw = q.model_dump(mode="json")
    raw["status"] = st.dump(first.status)
    await fail(m, "boom")
    later = NOW + timedelta(minutes=5)
    second = recompute(KarmadaQuota.model_validate(raw), inputs(index_of(), m), later)
    stamps = {c.type: c.lastTransitionTime for c in second.status.conditions}
    assert stamps["Ready"] == format_time(NOW)
    assert stamps["MemberObserved"] == format_time(later)


def test_observed_generation_is_the_quota_generation() -> None:
    raw = quota(hard=HARD).model_dump(mode="json")
    raw["metadata"]["generation"] = 7
    out = recompute(KarmadaQuota.model_validate(raw), inputs(index_of()), NOW)
    assert out.status.observedGeneration == 7
    assert all(c.observedGeneration == 7 for c in out.status.conditions)


def test_pure_controller_modules_import_no_io_library() -> None:
    code = (
        "import json, sys\n"
        "import karmadaquota.controller.index, karmadaquota.controller.pods\n"
        "import karmadaquota.controller.recompute, karmadaquota.controller.status\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(out.stdout)
    assert [m for m in ("aiohttp", "kopf", "kubernetes_asyncio") if m in loaded] == []


def test_a_negative_binding_never_lowers_used_and_is_named_on_the_quota() -> None:
    index = index_of(
        raw_binding("web", replicas=2, requests={"cpu": "1", "memory": "1Gi"}),
        raw_binding("neg", replicas=3, requests={"cpu": "-4", "memory": "1Gi"}),
    )
    out = recompute(quota(hard=HARD, member_enforcement="None"), inputs(index), NOW)
    assert out.status.used["requests.cpu"] == "2"  # the negative binding charges zero cpu
    assert out.status.used["requests.memory"] == "5Gi"  # and the rest of what it asks
    assert out.status.used["pods"] == "5"
    cond = {c.type: c for c in out.status.conditions}["BindingsCharged"]
    assert (cond.status, cond.reason) == ("False", "InvalidBindings")
    assert cond.message == (
        "1 binding(s) charged as zero where invalid: neg-deployment: "
        'spec.replicaRequirements.resourceRequest[cpu]: Invalid value: "-4": '
        "must be greater than or equal to 0"
    )
    # Once the binding is gone, the condition goes with it.
    index.remove("team-a", "uid-neg", 10)
    again = recompute(
        quota(hard=HARD).model_copy(update={"status": out.status}), inputs(index), NOW
    )
    assert "BindingsCharged" not in {c.type for c in again.status.conditions}


def test_an_unreadable_binding_is_indexed_as_zero_and_named() -> None:
    bad = raw_binding("bad")
    bad["spec"]["replicaRequirements"]["resourceRequest"]["cpu"] = "12x"
    index = index_of(raw_binding("web", replicas=1), bad)
    out = recompute(quota(hard=HARD), inputs(index), NOW)
    assert out.status.used["requests.cpu"] == "1"
    assert out.status.used["count/deployments.apps"] == "1"
    cond = {c.type: c for c in out.status.conditions}["BindingsCharged"]
    assert cond.message.startswith("1 binding(s) charged as zero where invalid: bad-deployment: ")
    assert "12x" in cond.message


def test_orphan_checks_wait_for_the_grace_period_then_look_once() -> None:
    pending = {"u1": "web", "u2": "db"}
    seen = {"u1": 97.0, "gone": 1.0, "recent": 95.0}
    first = rc.orphan_checks(pending, seen, set(), 100.0, 2.0, 15.0)
    assert first.due == {"u1": "web"}  # unobserved since 97: due at 99
    assert first.recheck_at == 102.0  # u2 was first seen now
    # a uid no longer pending is forgotten a minute after it was first seen
    assert first.first_seen == {"u1": 97.0, "u2": 100.0, "recent": 95.0}


def test_a_free_name_is_looked_at_again_only_after_the_admission_window() -> None:
    pending = {"u1": "web"}
    at = rc.orphan_checks(pending, {"u1": 97.0}, {"u1"}, 100.0, 2.0, 15.0)
    assert at.due == {} and at.recheck_at == 112.0
    assert rc.orphan_checks(pending, {"u1": 97.0}, {"u1"}, 112.0, 2.0, 15.0).due == pending


@pytest.mark.parametrize(
    ("holder", "unobserved_for", "orphan"),
    [
        ("another-uid", 2.0, True),  # AlreadyExists: the reserved create cannot be stored
        ("u1", 60.0, False),  # it exists (the index has not seen it yet)
        ("", 2.0, False),  # free name: the create may still be waiting on another webhook
        ("", 14.9, False),
        ("", 15.0, True),  # no create admitted that long ago can still be in flight
    ],
)
def test_is_orphan_trusts_a_free_name_only_after_the_admission_window(
    holder: str, unobserved_for: float, orphan: bool
) -> None:
    assert rc.is_orphan("u1", holder, unobserved_for, 15.0) is orphan


def test_a_sum_beyond_the_largest_quantity_saturates_and_stays_readable() -> None:
    """Bindings that never passed admission can sum past 2^63-1; `used` must stay parseable
    (the webhook reads it) and at least hard, so new charges are denied in plain words."""
    huge = raw_binding("huge", replicas=2**31 - 1, requests={"cpu": "1E", "memory": "1Gi"})
    out = recompute(quota(hard=HARD), inputs(index_of(huge)), NOW)
    cpu = Quantity.parse(out.status.used["requests.cpu"])
    assert cpu.nanos == MAX_BASE_UNITS * NANO
    assert cpu >= Quantity.parse(HARD["requests.cpu"])


# ---------------------------------------------------------------------------------------------
# failover (issue 38): 2 replicas of web moved from m1 (evicted, still running 2 pods as last
# seen) to m2; docs/charging.md "Failover"


def _failover_binding() -> dict[str, Any]:
    raw = raw_binding("web", replicas=2, clusters={"m2": 2})
    raw["spec"]["gracefulEvictionTasks"] = [
        {"fromCluster": "m1", "replicas": 2, "creationTimestamp": "2026-11-27T10:00:00Z"}
    ]
    return raw


def _with_failover(mode: str | None) -> KarmadaQuota:
    q = quota(hard={"pods": "4"})
    if mode is not None:
        q.spec.failover = KarmadaQuota.model_validate(
            {"metadata": {}, "spec": {"hard": {}, "failover": {"evictedReplicas": mode}}}
        ).spec.failover
    return q


async def test_a_released_cluster_stops_charging_its_evicted_replicas_and_its_last_pods() -> None:
    index = index_of(_failover_binding())
    m1 = await member("m1", pod("a"), pod("b"), pod("extra"))  # 2 evicted + 1 made around
    m2 = await member("m2", pod("c"), pod("d"))
    away = {"released": frozenset({"m1"})}
    out = recompute(_with_failover(None), inputs(index, m1, m2, **away), NOW)
    # m2's 2 placed; m1: only its pod beyond what was placed there before the eviction
    assert out.status.used == {"pods": "3"}
    assert all(c.type != st.COND_EVICTION_CHARGED for c in out.status.conditions)
    held = recompute(_with_failover("Hold"), inputs(index, m1, m2, **away), NOW)
    assert held.status.used == {"pods": "5"}  # 2 + 2 evicted + 1 made around
    cond = next(c for c in held.status.conditions if c.type == st.COND_EVICTION_CHARGED)
    assert cond.status == "True"
    assert "m1 (1 binding): held (spec.failover.evictedReplicas Hold)" in cond.message
    assert "end by 2026-11-27T10:10:00Z at the latest" in cond.message


async def test_a_ready_or_waiting_evicted_cluster_is_charged_and_says_until_when() -> None:
    index = index_of(_failover_binding())
    ready = recompute(_with_failover(None), inputs(index), NOW)
    assert ready.status.used == {"pods": "4"}
    cond = next(c for c in ready.status.conditions if c.type == st.COND_EVICTION_CHARGED)
    assert cond.message.endswith(
        "m1 (1 binding): Ready, the evictions end by 2026-11-27T10:10:00Z at the latest"
    )
    soon = NOW.timestamp() + 30
    waiting = recompute(_with_failover(None), inputs(index, releasing={"m1": soon}), NOW)
    cond = next(c for c in waiting.status.conditions if c.type == st.COND_EVICTION_CHARGED)
    assert f"m1 (1 binding): not Ready, released at {format_time(NOW + timedelta(seconds=30))}" in (
        cond.message
    )
