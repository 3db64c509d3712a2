"""Pull-mode members' guards, carried by Karmada as Works (controller.guard_works), against the
fake karmada-apiserver and a fake karmada-agent (tests.fake_members.Fleet).

As in test_guard_keeper, every write any member applies — the agent's included — is checked
by the fleet: Σ over members of what the guards may hold ≤ the global hard.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from karmadaquota.controller.guard_keeper import (
    GUARD_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    GuardKeeper,
    guard_body,
    guard_name,
)
from karmadaquota.controller.guard_works import (
    EXECUTION_FINALIZER,
    REVISION,
    GuardWorks,
    as_quota,
    work_name,
)
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.quantity import NANO
from tests.controller.test_guard_keeper import MEMBERS, NS, Clock, P, inputs, kq
from tests.fake_members import Fleet

PULL = "member3"
WORK = work_name(NS, "team")


def keeper(fleet: Fleet, clock: Clock | None = None, **kw: Any) -> GuardKeeper:
    return GuardKeeper(
        fleet.registry(),
        ControllerMetrics(),
        poll=0.0,
        clock=clock or Clock(),
        carried=lambda member: GuardWorks(fleet, member),
        **kw,
    )


def held(fleet: Fleet) -> dict[str, str | None]:
    """What each member's ResourceQuota says (for member3: what karmada-agent applied)."""
    out: dict[str, str | None] = {}
    for c in MEMBERS:
        g = fleet.guard(c, NS, "team")
        out[c] = None if g is None else g["spec"]["hard"]["pods"]
    return out


def work_hard(fleet: Fleet) -> str:
    return str(fleet.works(PULL)[WORK]["spec"]["workload"]["manifests"][0]["spec"]["hard"][P])


async def test_a_pull_member_gets_its_guard_as_a_work_karmada_applies() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL])
    k = keeper(fleet)
    result = await k.sync(kq(), inputs({"member1": 4}))
    assert result.changed and result.retry_at is None
    assert held(fleet) == {"member1": "6", "member2": "2", "member3": "2"}
    work = fleet.works(PULL)[WORK]
    assert WORK == "karmadaquota-guard-team-a-team"
    assert work["metadata"]["labels"] == {GUARD_LABEL: "team", MANAGED_BY_LABEL: MANAGED_BY}
    assert work["metadata"]["finalizers"] == [EXECUTION_FINALIZER]
    (manifest,) = work["spec"]["workload"]["manifests"]
    revision = manifest["spec"]["hard"].pop(REVISION)
    assert int(revision) > 0
    assert manifest == guard_body(kq(), {P: 2 * NANO})  # what a Push member gets
    assert k.problems(NS, "team") == {}
    assert "karmada-es-member3/karmadaquota-guard-team-a-team" in k.routes(NS, "team")[PULL]
    # karmada-apiserver: Works in member3's execution namespace, by name, and nothing else
    karmada = {(verb, path) for who, verb, path in fleet.requests if who == "karmada"}
    base = "/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-member3/works"
    assert {path for _, path in karmada} <= {base, f"{base}/{WORK}"}
    assert {verb for verb, _ in karmada} <= {"GET", "POST", "PUT", "DELETE"}
    # nothing changes: nothing is written
    before = len(fleet.requests)
    assert not (await k.sync(kq(), inputs({"member1": 4}))).changed
    assert all(verb == "GET" for _, verb, _ in fleet.requests[before:])


async def test_a_lowering_waits_for_the_status_karmada_reflects() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL], agent_lag=True)
    clock = Clock()
    k = keeper(fleet, clock, confirm_timeout=0.0)
    await k.sync(kq(), inputs({}))
    fleet.carry(PULL)
    clock.now += 100
    await k.sync(kq(), inputs({}))
    assert held(fleet) == {"member1": "4", "member2": "3", "member3": "3"}
    # member1 runs 6 pods around Karmada: member3 must give up its share first
    result = await k.sync(kq(), inputs({"member1": 6}))
    assert result.retry_at is not None
    assert work_hard(fleet) == "1"  # lowered in the Work ...
    assert held(fleet)["member1"] == "4"  # ... and nothing raised while it is not enforced
    fleet.carry(PULL, reflect=False)  # applied in the member, not reflected yet
    clock.now += 10
    await k.sync(kq(), inputs({"member1": 6}))
    assert held(fleet)["member1"] == "4"
    fleet.carry(PULL)  # reflected: the member enforces the lowering
    clock.now += 10
    await k.sync(kq(), inputs({"member1": 6}))
    assert held(fleet) == {"member1": "8", "member2": "1", "member3": "1"}
    assert fleet.worst[P] <= 10 * NANO


async def test_a_stale_reflection_confirms_no_lowering() -> None:
    """Raised, applied in the member but not reflected, then lowered to the value the stale
    reflection shows: the member may enforce the raise, so nothing else is raised."""
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL], agent_lag=True)
    clock = Clock()
    k = keeper(fleet, clock, confirm_timeout=0.0)
    await k.sync(kq(), inputs({PULL: 2}))
    fleet.carry(PULL)
    clock.now += 100
    await k.sync(kq(), inputs({PULL: 2}))
    assert held(fleet) == {"member1": "3", "member2": "3", "member3": "4"}
    await k.sync(kq(), inputs({PULL: 6}))  # member3 runs more: the others lower, it rises
    assert held(fleet) == {"member1": "2", "member2": "1", "member3": "4"}
    assert work_hard(fleet) == "7"
    fleet.carry(PULL, reflect=False)  # the member enforces 7; the Work still reflects 4
    # some of its pods go: member3 is lowered to 5 (above the 4 the reflection shows), and
    # member1 wants 4: it must wait, member3 may still enforce 7 (the fleet checks Σ ≤ 10)
    result = await k.sync(kq(), inputs({PULL: 4, "member1": 2}))
    assert result.retry_at is not None
    assert work_hard(fleet) == "5"
    assert held(fleet)["member1"] == "2"
    fleet.carry(PULL)
    clock.now += 10
    await k.sync(kq(), inputs({PULL: 4, "member1": 2}))
    assert held(fleet) == {"member1": "4", "member2": "1", "member3": "5"}
    assert fleet.worst[P] <= 10 * NANO


async def test_a_work_deleted_by_another_writer_is_put_back() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL])
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({"member1": 4}))
    path = f"/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{PULL}/works/{WORK}"
    fleet.karmada.delete(path)  # a Karmada admin: Karmada's finalizer holds it ...
    fleet.carry(PULL)  # ... until the agent has removed the guard from the member
    assert WORK not in fleet.works(PULL) and held(fleet)[PULL] is None
    clock.now += 100  # the keeper's next read of it
    result = await k.sync(kq(), inputs({"member1": 4}))
    assert result.changed
    assert WORK in fleet.works(PULL)
    assert held(fleet) == {"member1": "6", "member2": "2", "member3": "2"}
    assert fleet.worst[P] <= 10 * NANO


async def test_removal_waits_until_the_agent_removed_the_guard() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL], agent_lag=True)
    clock = Clock()
    k = keeper(fleet, clock)
    await k.sync(kq(), inputs({}))
    fleet.carry(PULL)
    assert not await k.remove(kq())  # the Work is being deleted: the member still holds it
    assert "karmada-agent has not yet removed" in k.errors[PULL]
    fleet.carry(PULL)
    clock.now += 100
    assert await k.remove(kq())
    assert held(fleet) == {"member1": None, "member2": None, "member3": None}
    assert fleet.works(PULL) == {}


async def test_a_new_leader_assumes_an_unreflected_work_may_hold_the_whole_hard() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL], agent_lag=True)
    clock = Clock()
    await keeper(fleet, clock).sync(kq(), inputs({}))  # written, never applied
    successor = keeper(fleet, clock, confirm_timeout=0.0)
    await successor.sync(kq(), inputs({"member1": 4}))
    # member3 may enforce anything up to 10: it is lowered, nobody is raised until it confirms
    assert held(fleet) == {"member1": "4", "member2": "2", "member3": None}
    fleet.carry(PULL)
    clock.now += 10
    await successor.sync(kq(), inputs({"member1": 4}))
    assert held(fleet) == {"member1": "6", "member2": "2", "member3": "2"}
    assert fleet.worst[P] <= 10 * NANO


async def test_karmadas_refusal_to_apply_the_work_is_named() -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL], agent_lag=True)
    k = keeper(fleet)
    await k.sync(kq(), inputs({}))
    refused = {
        "type": "Applied",
        "status": "False",
        "reason": "AppliedFailed",
        "message": "resourcequotas karmadaquota-team already exists and is not managed by Karmada",
    }
    fleet.karmada.update(
        f"/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{PULL}/works/{WORK}",
        lambda o: o.update(status={"conditions": [refused]}),
    )
    k.reread_period = 0.0  # the next read learns it
    await k.sync(kq(), inputs({}))
    assert "Karmada did not apply it" in k.problems(NS, "team")[PULL]
    assert "not managed by Karmada" in k.problems(NS, "team")[PULL]


def test_the_view_bounds_every_write_since_the_reflected_one() -> None:
    def work(revision: int, hard: str, seen: int | None, shown: str = "") -> dict[str, Any]:
        spec = {"hard": {P: hard, REVISION: str(revision)}}
        status: dict[str, Any] = {}
        if seen is not None:
            status = {
                "manifestStatuses": [
                    {
                        "identifier": {"kind": "ResourceQuota"},
                        "status": {"hard": {P: shown, REVISION: str(seen)}},
                    }
                ]
            }
        return {
            "metadata": {},
            "spec": {"workload": {"manifests": [{"spec": spec}]}},
            "status": status,
        }

    from karmadaquota.controller.guard_works import Sent

    ceiling = {P: "10"}
    sent = [Sent(1, {P: "3"}, True), Sent(2, {P: "6"}, False), Sent(3, {P: "2"}, False)]
    assert as_quota(work(3, "2", 3, "2"), sent, ceiling)["status"]["hard"] == {P: "2"}
    assert as_quota(work(3, "2", 1, "3"), sent, ceiling)["status"]["hard"] == {P: "6"}
    assert as_quota(work(3, "2", None), sent, ceiling)["status"]["hard"] == {P: "6"}
    assert as_quota(work(3, "2", 2, "6"), sent[1:], ceiling)["status"]["hard"] == {P: "6"}
    # not all known (a new leader): the whole hard
    assert as_quota(work(3, "2", 1, "3"), sent[2:], ceiling)["status"]["hard"] == {P: "10"}
    assert as_quota(work(4, "2", 3, "2"), sent, ceiling)["status"]["hard"] == {P: "10"}
    view = as_quota(work(3, "2", 3, "2"), sent, ceiling)
    assert view["spec"]["hard"] == {P: "2"}  # the revision is no name of the guard's


def test_long_work_names_are_hashed_within_kubernetes_limits() -> None:
    long = work_name("n" * 63, "q" * 253)
    assert len(long) <= 253 and long != work_name("n" * 63, "q" * 252)
    assert guard_name("team") == "karmadaquota-team"


PUSH_AND_PULL = st.lists(
    st.one_of(
        st.tuples(st.just("usage"), st.sampled_from(MEMBERS), st.integers(0, 12)),
        st.tuples(st.just("carry"), st.just(PULL), st.booleans()),
        st.tuples(st.just("down"), st.sampled_from(MEMBERS[:2]), st.booleans()),
        st.tuples(st.just("lose"), st.sampled_from(MEMBERS[:2]), st.integers(0, 2)),
        st.tuples(st.just("stuck"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("failover"), st.just(""), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PUSH_AND_PULL)
# a new leader assumes an unreflected Work may hold the whole hard, and "lowered" it to more
# than the spec karmada-agent had still to apply, before member1's lowering was confirmed
@example([("failover", "", 0), ("failover", "", 0), ("usage", PULL, 1), ("carry", PULL, False)])
async def test_push_and_pull_guards_never_hold_more_than_the_hard(
    steps: list[tuple[str, str, int]],
) -> None:
    fleet = Fleet(MEMBERS, {P: 10 * NANO}, lag=True, pull=[PULL], agent_lag=True)
    clock = Clock()
    k = keeper(fleet, clock, confirm_timeout=0.0)
    usage: dict[str, int] = {}
    for kind, c, value in steps:
        if kind == "usage":
            usage[c] = value
        elif kind == "carry":
            fleet.carry(c, reflect=bool(value))
        elif kind == "down":
            fleet.members[c].down = bool(value)
        elif kind == "lose":
            fleet.members[c].lose_replies = value
        elif kind == "stuck":
            fleet.members[c].stuck = bool(value)
        elif kind == "failover":
            k = keeper(fleet, clock, confirm_timeout=0.0)
        clock.now += 5
        await k.sync(kq(), inputs(usage))
    assert fleet.worst.get(P, 0) <= 10 * NANO


async def test_the_guarded_condition_says_a_pull_member_is_guarded_through_karmada() -> None:
    from karmadaquota.controller.recompute import _guarded_condition

    fleet = Fleet(MEMBERS, {P: 10 * NANO}, pull=[PULL])
    k = keeper(fleet)
    await k.sync(kq(), inputs({}))
    ok = _guarded_condition(k.problems(NS, "team"), k.routes(NS, "team"))
    assert ok.status == "True"
    assert f"{PULL} through Karmada (Work karmada-es-{PULL}/{WORK}" in ok.message
    # without Works (no `carried`), a Pull member is named as not guarded, and why
    bare = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, clock=Clock())
    await bare.sync(kq(), inputs({}))
    no = _guarded_condition(bare.problems(NS, "team"), bare.routes(NS, "team"))
    assert no.status == "False" and f"{PULL}: Cluster {PULL} has no apiEndpoint" in no.message
