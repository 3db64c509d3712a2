"""The member guards' I/O (controller.guard_keeper) against fake member API servers.

Every write any member applies is checked by the fleet: Σ over members of what the guards may
hold (max(spec.hard, status.hard)) ≤ the global hard. Requests are recorded, so the verbs and
resources the guards use are asserted too (docs/security.md lists them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import guard_keeper as gk
from karmadaquota.controller import guards as gd
from karmadaquota.controller.guard_keeper import (
    GUARD_LABEL,
    GuardKeeper,
    guard_name,
    label_value,
)
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.quantity import NANO
from tests.fake_members import Fleet

NS = "team-a"
MEMBERS = ["member1", "member2", "member3"]
P = "pods"


def kq(hard: Mapping[str, str] | None = None, **spec: Any) -> KarmadaQuota:
    return KarmadaQuota.model_validate(
        {
            "metadata": {"name": "team", "namespace": NS, "uid": "kq-uid"},
            "spec": {"hard": dict(hard or {"pods": "10"}), "memberEnforcement": "ResourceQuota"}
            | spec,
        }
    )


def inputs(usage: Mapping[str, int], hard: int = 10, reserved: int = 0) -> gd.GuardInputs:
    return gd.GuardInputs(
        hard={P: hard * NANO},
        members=[gd.MemberState(c, usage={P: usage.get(c, 0) * NANO}) for c in MEMBERS],
        reserved={P: reserved * NANO},
    )


def held(fleet: Fleet) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for c in MEMBERS:
        g = fleet.guard(c, NS, "team")
        out[c] = None if g is None else g["spec"]["hard"]["pods"]
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keeper(fleet: Fleet, clock: Clock | None = None, **kw: Any) -> GuardKeeper:
    return GuardKeeper(
        fleet.registry(), ControllerMetrics(), poll=0.0, clock=clock or Clock(), **kw
    )


async def test_creates_one_guard_per_member_labelled_ours_with_the_quotas_scopes() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    k = keeper(fleet)
    quota = kq(
        scopeSelector={
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        }
    )
    result = await k.sync(quota, inputs({"member1": 4}))
    assert result.changed and result.retry_at is None
    assert held(fleet) == {"member1": "6", "member2": "2", "member3": "2"}
    g = fleet.guard("member1", NS, "team")
    assert g is not None
    assert g["metadata"]["name"] == "karmadaquota-team"
    assert g["metadata"]["labels"][GUARD_LABEL] == "team"
    assert g["spec"]["scopeSelector"] == {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    assert k.shown(NS, "team", "member2") == {"pods": "2"}
    # nothing changes: nothing is written
    before = len(fleet.requests)
    again = await k.sync(quota, inputs({"member1": 4}))
    assert not again.changed
    assert all(verb == "GET" for _, verb, _ in fleet.requests[before:])


async def test_decreases_are_confirmed_before_any_increase() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, lag=True)
    k = keeper(fleet)
    await k.sync(kq(), inputs({"member1": 4}))
    for m in fleet.members.values():
        m.sync_status()
    fleet.requests.clear()
    # member2 runs 4 pods around Karmada: member1 and member3 give up share for it
    await k.sync(kq(), inputs({"member1": 4, "member2": 4}))
    assert held(fleet) == {"member1": "5", "member2": "5", "member3": "0"}
    writes = [(c, verb) for c, verb, _ in fleet.requests if verb != "GET"]
    assert writes[-1] == ("member2", "PUT")
    assert {c for c, _ in writes[:-1]} == {"member1", "member3"}
    assert fleet.worst[P] <= 10 * NANO


async def test_a_lowering_the_member_does_not_enforce_holds_back_every_increase() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, confirm_timeout=0.0)
    await k.sync(kq(), inputs({"member1": 4}))
    fleet.members["member3"].stuck = True  # its quota controller stopped
    result = await k.sync(kq(), inputs({"member1": 4, "member2": 4}))
    assert result.retry_at is not None
    # member3's spec is lowered but it still enforces 2: member2 has not grown
    assert held(fleet)["member2"] == "2"
    fleet.members["member3"].stuck = False
    fleet.members["member3"].sync_status()
    clock.now += 10
    await k.sync(kq(), inputs({"member1": 4, "member2": 4}))
    assert held(fleet) == {"member1": "5", "member2": "5", "member3": "0"}


async def test_an_unreachable_member_keeps_its_share_until_it_is_back() -> None:
    fleet = Fleet(MEMBERS, {P: 9 * NANO})
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq({"pods": "9"}), inputs({}, hard=9))
    assert held(fleet) == {"member1": "3", "member2": "3", "member3": "3"}
    fleet.members["member3"].down = True
    clock.now += 100  # past the re-read period: member3 is found down
    result = await k.sync(kq({"pods": "9"}), inputs({"member2": 3}, hard=9))
    assert result.retry_at is not None
    # the 6 left by member3: member2's 3 pods, then 3 shared (the odd one to member1 by name)
    assert held(fleet) == {"member1": "2", "member2": "4", "member3": "3"}
    fleet.members["member3"].down = False
    clock.now += 10
    await k.sync(kq({"pods": "9"}), inputs({"member2": 3}, hard=9))
    assert held(fleet) == {"member1": "2", "member2": "5", "member3": "2"}
    assert fleet.worst[P] <= 9 * NANO


async def test_a_new_leader_assumes_an_unreachable_member_holds_everything() -> None:
    fleet = Fleet(MEMBERS, {P: 9 * NANO})
    await keeper(fleet).sync(kq({"pods": "9"}), inputs({}, hard=9))
    fleet.members["member3"].down = True
    successor = keeper(fleet)
    result = await successor.sync(kq({"pods": "9"}), inputs({"member1": 2}, hard=9))
    assert result.retry_at is not None
    assert held(fleet) == {"member1": "0", "member2": "0", "member3": "3"}
    assert fleet.worst[P] <= 9 * NANO


async def test_a_lost_reply_to_a_raise_is_assumed_applied() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({"member1": 4}))
    fleet.members["member2"].lose_replies = 1
    await k.sync(kq(), inputs({"member1": 4, "member2": 4}))  # member2 raised, reply lost
    assert held(fleet)["member2"] == "5"
    clock.now += 10
    await k.sync(kq(), inputs({"member1": 4, "member2": 4}))
    assert held(fleet) == {"member1": "5", "member2": "5", "member3": "0"}
    assert fleet.worst[P] <= 10 * NANO


async def test_a_resource_quota_of_someone_else_is_left_alone() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    theirs = {
        "metadata": {"name": guard_name("team"), "namespace": NS, "resourceVersion": "1"},
        "spec": {"hard": {"pods": "100"}},
    }
    fleet.members["member2"].quotas[(NS, guard_name("team"))] = theirs
    fleet.hard = {P: 1000 * NANO}  # theirs is not ours to count
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({}))
    assert fleet.members["member2"].quotas[(NS, guard_name("team"))]["spec"]["hard"] == {
        "pods": "100"
    }
    assert "not managed by karmadaquota" in k.problems(NS, "team")["member2"]
    assert set(k.problems(NS, "team")) == {"member2"}
    # member2 gets no guard of ours and holds nothing of the others' shares
    assert held(fleet) == {"member1": "5", "member2": "100", "member3": "5"}
    clock.now += 10
    assert await k.remove(kq())  # nothing of ours there to delete
    assert (NS, guard_name("team")) in fleet.members["member2"].quotas


async def test_remove_deletes_every_guard_and_waits_for_unreachable_members() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({"member1": 4}))
    fleet.members["member2"].down = True
    assert not await k.remove(kq())
    assert held(fleet) == {"member1": None, "member2": "2", "member3": None}
    fleet.members["member2"].down = False
    clock.now += 10
    assert await k.remove(kq())
    assert held(fleet) == {"member1": None, "member2": None, "member3": None}


async def test_only_resourcequotas_of_the_namespace_are_requested() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({"member1": 4}))
    await k.sync(kq(), inputs({"member1": 4, "member2": 4}))
    fleet.members["member1"].lose_replies = 1
    clock.now += 100
    await k.sync(kq(), inputs({"member2": 4}))
    await k.remove(kq())
    verbs = {verb for _, verb, _ in fleet.requests}
    paths = {path for _, _, path in fleet.requests}
    assert verbs <= {"GET", "POST", "PUT", "DELETE"}
    assert paths <= {
        f"/api/v1/namespaces/{NS}/resourcequotas",
        f"/api/v1/namespaces/{NS}/resourcequotas/{guard_name('team')}",
    }


def test_long_names_are_hashed_within_kubernetes_limits() -> None:
    long = "q" * 300
    assert len(guard_name(long)) <= 253 and guard_name(long) != guard_name(long[:-1])
    assert len(label_value(long)) <= 63 and label_value("team") == "team"


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("usage"), st.sampled_from(MEMBERS), st.integers(0, 12)),
        st.tuples(st.just("down"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("lose"), st.sampled_from(MEMBERS), st.integers(0, 2)),
        st.tuples(st.just("stuck"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("failover"), st.just(""), st.just(0)),
        st.tuples(st.just("reserved"), st.just(""), st.integers(0, 5)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
async def test_the_fleets_guards_never_hold_more_than_the_hard(
    steps: list[tuple[str, str, int]],
) -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, lag=True)
    clock = Clock()
    k = keeper(fleet, clock, confirm_timeout=0.0)
    usage: dict[str, int] = {}
    reserved = 0
    for kind, c, value in steps:
        if kind == "usage":
            usage[c] = value
        elif kind == "down":
            fleet.members[c].down = bool(value)
        elif kind == "lose":
            fleet.members[c].lose_replies = value
        elif kind == "stuck":
            fleet.members[c].stuck = bool(value)
        elif kind == "failover":
            k = keeper(fleet, clock, confirm_timeout=0.0)
        elif kind == "reserved":
            reserved = value
        clock.now += 5
        await k.sync(kq(), inputs(usage, reserved=reserved))
    assert fleet.worst.get(P, 0) <= 10 * NANO


async def test_a_member_that_stays_down_is_tried_less_and_less_often() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, retry=2.0, max_retry=8.0)
    await k.sync(kq(), inputs({}))
    fleet.members["member3"].down = True
    clock.now += 100  # past the re-read period
    waits = []
    for _ in range(5):
        result = await k.sync(kq(), inputs({}))
        assert result.retry_at is not None
        waits.append(result.retry_at - clock.now)
        clock.now = result.retry_at
    assert waits == [2.0, 4.0, 8.0, 8.0, 8.0]
    tries = [r for r in fleet.requests if r[0] == "member3"]
    fleet.members["member3"].down = False
    await k.sync(kq(), inputs({}))
    assert len([r for r in fleet.requests if r[0] == "member3"]) > len(tries)
    assert "member3" not in k.errors


async def test_a_member_whose_pod_watch_recovered_is_tried_at_once() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({}))
    fleet.members["member3"].down = True
    clock.now += 100
    await k.sync(kq(), inputs({"member1": 4}))  # member3 found down: backoff
    fleet.members["member3"].down = False
    before = len([r for r in fleet.requests if r[0] == "member3"])
    await k.sync(kq(), inputs({"member1": 4}))
    assert len([r for r in fleet.requests if r[0] == "member3"]) == before  # still backing off
    k.recovered(["member3"])
    result = await k.sync(kq(), inputs({"member1": 4}))
    assert result.retry_at is None
    assert held(fleet) == {"member1": "6", "member2": "2", "member3": "2"}


async def test_a_leader_losing_its_lease_after_lowering_raises_nothing() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    k = keeper(fleet)
    await k.sync(kq(), inputs({"member1": 4}))
    asked = []

    def lease_running_out() -> bool:
        asked.append(True)
        return len(asked) < 2  # still the leader for the lowering, not for the raise

    result = await k.sync(kq(), inputs({"member1": 4, "member2": 4}), may_write=lease_running_out)
    assert result.retry_at is not None
    assert held(fleet) == {"member1": "5", "member2": "2", "member3": "0"}  # lowered only


async def test_a_change_of_the_quotas_scopes_is_carried_to_every_guard() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    k = keeper(fleet)
    await k.sync(kq(), inputs({}))
    high = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    result = await k.sync(kq(scopeSelector=high), inputs({}))
    assert result.changed
    for m in MEMBERS:
        g = fleet.guard(m, NS, "team")
        assert g is not None and g["spec"]["scopeSelector"] == high
    assert not (await k.sync(kq(scopeSelector=high), inputs({}))).changed


def test_a_guards_scope_selector_is_written_as_the_api_server_returns_it() -> None:
    # values: [] would be dropped by the API server (omitempty): then every read would differ
    exists = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]}
    body = gk.guard_body(kq(scopeSelector=exists), {P: NANO})
    assert body["spec"]["scopeSelector"] == exists


async def test_a_reservation_s_lowering_waits_and_its_placement_gives_it_back_unwritten() -> None:
    """A storm's admission reserves headroom (the guards' desired shares fall) and the
    placement that follows gives it back to the members it lands in: within the tighten delay,
    nothing is written. Writing each would lower and confirm every member, then raise them
    again, for every create."""
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, tighten_delay=2.0)
    await k.sync(kq(), inputs({"member1": 1}))  # 1 + 3 each: 4, 3, 3
    assert held(fleet) == {"member1": "4", "member2": "3", "member3": "3"}
    fleet.requests.clear()
    reserved = await k.sync(kq(), inputs({"member1": 1}, reserved=3))
    assert not reserved.changed
    assert reserved.retry_at == clock.now + 2.0  # the lowering is looked at again then
    clock.now += 1.0
    # the 3 reserved land one in each member (a workload divided over them)
    placed = await k.sync(kq(), inputs({"member1": 2, "member2": 1, "member3": 1}))
    assert not placed.changed and placed.retry_at is None
    assert [verb for _, verb, _ in fleet.requests if verb != "GET"] == []
    assert held(fleet) == {"member1": "4", "member2": "3", "member3": "3"}


async def test_a_reservation_s_lowering_is_written_once_the_delay_is_over() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, tighten_delay=2.0)
    await k.sync(kq(), inputs({"member1": 1}))
    assert not (await k.sync(kq(), inputs({"member1": 1}, reserved=3))).changed
    clock.now += 2.0
    later = await k.sync(kq(), inputs({"member1": 1}, reserved=3))
    assert later.changed
    assert held(fleet) == {"member1": "3", "member2": "2", "member3": "2"}  # 1 + 2 each


async def test_a_lowering_the_hard_needs_is_written_at_once() -> None:
    """Σ of the guards as they are over the new hard: no wait, the guarantee comes first."""
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, tighten_delay=60.0)
    await k.sync(kq(), inputs({"member1": 1}))
    result = await k.sync(kq({"pods": "4"}), inputs({"member1": 1}, hard=4))
    assert result.changed
    assert held(fleet) == {"member1": "2", "member2": "1", "member3": "1"}
    assert fleet.worst[P] <= 10 * NANO


# ---- a guard its member counted short (kubernetes/kubernetes#123434) ----------------------


def pod(name: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if deleting:  # in its grace period until far in the future: still counted
        meta |= {"deletionTimestamp": "2999-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


def runs(k: GuardKeeper, member: str, *pods: dict[str, Any]) -> None:
    """The member's pod watch lists `pods`."""
    watch = k.members.get(member)
    assert watch is not None
    for p in pods:
        watch.added(p)
    watch.relisted(1)
    watch.claims_relisted()


def recount(fleet: Fleet, member: str, used: str) -> None:
    """The member's quota controller writes status.used (a recount from its caches)."""
    path = f"/api/v1/namespaces/{NS}/resourcequotas/{guard_name('team')}"
    fleet.members[member].api.update(
        path, lambda o: o.setdefault("status", {}).update(used={P: used})
    )


def used(fleet: Fleet, member: str) -> str:
    g = fleet.guard(member, NS, "team")
    assert g is not None
    return str(g["status"]["used"][P])


def patches(fleet: Fleet) -> list[tuple[str, str, str]]:
    return [r for r in fleet.requests if r[1] == "PATCH"]


def test_undercounted_names_only_what_the_member_counts_short() -> None:
    live = {P: 4 * NANO, "requests.cpu": 2 * NANO, "count/pods": 4 * NANO}
    counted = {P: 3 * NANO, "requests.cpu": 5 * NANO}  # count/pods not synced by the member yet
    assert gd.undercounted(live, counted) == {P: 4 * NANO}
    assert gd.undercounted(live, {P: 4 * NANO}) == {}


async def test_a_guard_counted_short_of_the_member_s_pods_is_restored_after_the_delay() -> None:
    """The member recounted 3 where 4 pods run (the 5th, being deleted, is not in the floor):
    left alone for `mend_delay` (both watches catch up), then status.used is patched to 4 at
    the resourceVersion that counted short, and the member's next recount is its own."""
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, reread_period=0.0, mend_delay=0.25)
    await k.sync(kq(), inputs({"member1": 5}))
    runs(k, "member1", *(pod(f"p{i}") for i in range(4)), pod("old", deleting=True))
    recount(fleet, "member1", "3")
    first = await k.sync(kq(), inputs({"member1": 5}))
    assert first.retry_at == clock.now + 0.25
    assert patches(fleet) == [] and used(fleet, "member1") == "3"
    clock.now += 0.25
    await k.sync(kq(), inputs({"member1": 5}))
    assert patches(fleet) == [
        ("member1", "PATCH", f"/api/v1/namespaces/{NS}/resourcequotas/{guard_name('team')}/status")
    ]
    assert used(fleet, "member1") == "4"
    # counted right (or more than the floor: a pod still being stored): nothing is written
    recount(fleet, "member1", "5")
    clock.now += 1.0
    await k.sync(kq(), inputs({"member1": 5}))
    await k.sync(kq(), inputs({"member1": 5}))
    assert len(patches(fleet)) == 1 and used(fleet, "member1") == "5"


async def test_a_short_count_the_member_corrects_itself_within_the_delay_is_not_written() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, reread_period=0.0, mend_delay=0.25)
    await k.sync(kq(), inputs({"member1": 2}))
    runs(k, "member1", pod("a"), pod("b"))
    recount(fleet, "member1", "1")
    await k.sync(kq(), inputs({"member1": 2}))
    recount(fleet, "member1", "2")
    clock.now += 0.25
    result = await k.sync(kq(), inputs({"member1": 2}))
    assert result.retry_at is None and patches(fleet) == []


async def test_a_restore_that_loses_to_another_write_is_tried_again() -> None:
    """An admission (or a recount) between the read and the patch: the patch carries the
    resourceVersion that counted short, so it conflicts and nothing is overwritten."""
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    clock = Clock()
    k = keeper(fleet, clock, reread_period=60.0, mend_delay=0.0)
    await k.sync(kq(), inputs({"member1": 3}))
    runs(k, "member1", pod("a"), pod("b"), pod("c"))
    recount(fleet, "member1", "2")
    clock.now += 61.0  # read again: it counts 2
    await k.sync(kq(), inputs({"member1": 3}))  # ... and restored
    assert used(fleet, "member1") == "3"
    k.reread_period = 1e9  # what the keeper knows is now older than the member's guard
    known = k._known[(NS, "team", "member1")]
    k._known[(NS, "team", "member1")] = dataclasses.replace(known, used={P: NANO})
    recount(fleet, "member1", "2")  # another write: the resourceVersion moved
    result = await k.sync(kq(), inputs({"member1": 3}))
    assert used(fleet, "member1") == "2"  # not overwritten by a stale patch
    assert result.retry_at is not None and result.retry_at <= clock.now + k.poll + 1e-9


async def test_a_recount_the_guard_watch_shows_lowering_used_brings_the_namespace_at_once() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO})
    k = keeper(fleet)
    await k.sync(kq(), inputs({"member1": 3}))
    marked: list[str] = []
    k.on_change = marked.append
    g = fleet.guard("member1", NS, "team")
    assert g is not None
    for value, rv in (("3", 100), ("3", 101), ("2", 102)):
        event = {**g, "status": {**g["status"], "used": {P: value}}}
        event["metadata"] = {**g["metadata"], "resourceVersion": str(rv)}
        k.observed("member1", event, False)
    assert marked == [NS]  # the first event raised used (3 > none), the last lowered it
