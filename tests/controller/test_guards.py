"""The member guards' share policy and write order (karmadaquota.controller.guards), pure.

The property tests play the protocol the I/O shell follows (controller.guard_keeper) against a
model of the members — what each guard really may hold, what the controller knows of it —
through any sequence of usage changes, outages, lost replies, stuck quota controllers and
controller failovers, and check Σ over members of what the guards may hold ≤ the global hard
after every single write.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karmadaquota.controller import guards as gd
from karmadaquota.quantity import NANO

P = "pods"
CPU = "requests.cpu"
MEMBERS = ["member1", "member2", "member3"]


def n(units: float) -> int:
    return int(units * NANO)


def m(name: str, pods: float = 0, oob: float = 0, **kw: object) -> gd.MemberState:
    return gd.MemberState(name, usage={P: n(pods)}, out_of_band={P: n(oob)}, **kw)  # type: ignore[arg-type]


def pods(d: dict[str, gd.Nanos]) -> dict[str, float]:
    return {c: v[P] / NANO for c, v in d.items()}


# ---- the share policy --------------------------------------------------------------------------


def test_headroom_is_split_evenly_on_top_of_each_members_usage() -> None:
    inputs = gd.GuardInputs(hard={P: n(10)}, members=[m("member1", 4), m("member2"), m("member3")])
    assert pods(gd.desired(inputs)) == {"member1": 6, "member2": 2, "member3": 2}


def test_leftover_granules_go_to_the_members_using_most_around_karmada() -> None:
    inputs = gd.GuardInputs(
        hard={P: n(10)}, members=[m("member1", 4), m("member2", 4, oob=4), m("member3")]
    )
    # headroom 2 over 3 members: nobody gets a whole one evenly; member2 needs it most, then
    # member1 by name
    assert pods(gd.desired(inputs)) == {"member1": 5, "member2": 5, "member3": 0}


def test_cpu_is_shared_in_millicores_and_counts_in_whole_units() -> None:
    inputs = gd.GuardInputs(
        hard={CPU: n(1), P: n(2)},
        members=[gd.MemberState(c) for c in MEMBERS],
    )
    got = gd.desired(inputs)
    assert [got[c][CPU] for c in MEMBERS] == [n(0.334), n(0.333), n(0.333)]
    assert [got[c][P] for c in MEMBERS] == [n(1), n(1), 0]
    assert all(v % gd.granule(k) == 0 for g in got.values() for k, v in g.items())


def test_reserved_usage_is_not_handed_out_as_headroom() -> None:
    # 3 pods admitted but not yet placed will land in some member as its usage
    inputs = gd.GuardInputs(hard={P: n(9)}, members=[m(c) for c in MEMBERS], reserved={P: n(3)})
    assert pods(gd.desired(inputs)) == {"member1": 2, "member2": 2, "member3": 2}


def test_cluster_hard_caps_a_member_and_its_unused_share_goes_to_the_others() -> None:
    inputs = gd.GuardInputs(
        hard={P: n(12)},
        members=[m("member1", 1), m("member2"), m("member3")],
        caps={"member1": {P: n(2)}},
    )
    got = pods(gd.desired(inputs))
    assert got["member1"] == 2
    assert got == {"member1": 2, "member2": 5, "member3": 5}


def test_usage_past_a_cap_is_held_to_the_cap() -> None:
    inputs = gd.GuardInputs(
        hard={P: n(10)}, members=[m("member1", 6), m("member2")], caps={"member1": {P: n(3)}}
    )
    assert pods(gd.desired(inputs)) == {"member1": 3, "member2": 7}


def test_an_unreachable_member_keeps_its_share_and_the_others_shrink() -> None:
    before = gd.GuardInputs(hard={P: n(9)}, members=[m(c) for c in MEMBERS])
    assert pods(gd.desired(before)) == {"member1": 3, "member2": 3, "member3": 3}
    during = gd.GuardInputs(
        hard={P: n(9)},
        members=[
            m("member1"),
            m("member2", 3, oob=3),
            m("member3", reachable=False, guard={P: n(3)}),
        ],
    )
    got = pods(gd.desired(during))
    assert "member3" not in got  # nothing is planned for it
    assert got == {"member1": 1, "member2": 5}
    assert got["member1"] + got["member2"] + 3 <= 9


def test_an_unreachable_member_of_unknown_guard_is_assumed_to_hold_all() -> None:
    # not its cap: the cap may have been lowered after its guard was written
    inputs = gd.GuardInputs(
        hard={P: n(10)},
        members=[m("member1", 2), m("member2", reachable=False)],
        caps={"member2": {P: n(4)}},
    )
    assert pods(gd.desired(inputs)) == {"member1": 0}


def test_usage_over_the_budget_is_scaled_down_in_proportion() -> None:
    inputs = gd.GuardInputs(hard={P: n(4)}, members=[m("member1", 6), m("member2", 2)])
    assert pods(gd.desired(inputs)) == {"member1": 3, "member2": 1}


def test_only_names_pods_can_be_charged_are_guarded() -> None:
    names = [
        "count/deployments.apps",
        "pods",
        "requests.cpu",
        "services",
        "requests.nvidia.com/gpu",
    ]
    assert gd.guarded_names(names) == ["pods", "requests.cpu", "requests.nvidia.com/gpu"]


# ---- the order of the writes -------------------------------------------------------------------


def test_decreases_come_first_per_name_then_everything_else() -> None:
    current = {"member1": {P: n(6), CPU: n(1)}, "member2": {P: n(2), CPU: n(1)}, "member3": None}
    wanted = {
        "member1": {P: n(4), CPU: n(2)},  # pods down, cpu up: lowered first on pods only
        "member2": {P: n(3), CPU: n(1)},  # up only
        "member3": {P: n(1), CPU: n(0)},  # created
    }
    t = gd.transition(current, wanted)
    assert t.lower == {"member1": {P: n(4), CPU: n(1)}}
    assert t.final == wanted


def test_nothing_to_write_when_every_guard_is_as_wanted() -> None:
    t = gd.transition({"member1": {P: n(3)}}, {"member1": {P: n(3)}})
    assert t.lower == {} and t.final == {}


# ---- the protocol through any history ----------------------------------------------------------


@dataclass
class Model:
    """What each member's guard really may hold, and what the controller knows of it."""

    hard: dict[str, int]
    actual: dict[str, dict[str, int]] = field(default_factory=dict)  # absent: no guard
    known: dict[str, dict[str, int] | None] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMBERS, 0))
    down: set[str] = field(default_factory=set)
    lossy: set[str] = field(default_factory=set)  # writes apply, replies are lost
    stuck: set[str] = field(default_factory=set)  # lowerings never confirmed
    caps: dict[str, dict[str, int]] = field(default_factory=dict)
    reserved: int = 0
    worst: int = 0
    stale: set[str] = field(default_factory=set)  # a write failed: read it again

    def check(self) -> None:
        total = sum(g.get(P, 0) for g in self.actual.values())
        self.worst = max(self.worst, total)
        assert total <= self.hard[P], (total, self.actual)

    def write(self, c: str, hard: dict[str, int], lowering: bool) -> bool:
        """One guard write as the I/O shell does it; True when it is known to have held."""
        if c in self.down:
            self.stale.add(c)
            return False
        if lowering and c in self.stuck:
            # the spec is lowered but the member keeps enforcing the old status.hard
            self.check()
            self.stale.add(c)
            return False
        self.actual[c] = dict(hard)
        self.check()
        if c in self.lossy:
            self.stale.add(c)
            return False
        return True

    def round(self) -> None:
        """One sync of the controller (guard_keeper.GuardKeeper.sync)."""
        for c in MEMBERS:  # reachable members are read when unknown or after a failed write
            if c not in self.down and (self.known.get(c) is None or c in self.stale):
                self.known[c] = dict(self.actual.get(c, {}))
                self.stale.discard(c)
        states = [
            gd.MemberState(
                c,
                usage={P: self.usage[c]},
                reachable=c not in self.down and self.known.get(c) is not None,
                guard=self.known.get(c),
            )
            for c in MEMBERS
        ]
        inputs = gd.GuardInputs(
            hard=self.hard, members=states, reserved={P: self.reserved}, caps=self.caps
        )
        wanted = gd.desired(inputs)
        plan = gd.transition({c: self.known.get(c) for c in wanted}, wanted)
        ok = True
        for c, low in plan.lower.items():
            if self.write(c, low, lowering=True):
                self.known[c] = dict(low)  # confirmed
            else:
                ok = False  # what it may hold stays what was known (the larger)
        if not ok:
            return
        for c, want in plan.final.items():
            before = self.known.get(c) or {}
            if self.write(c, want, lowering=False):
                self.known[c] = dict(want)
            else:  # unknown outcome: assume it was applied if that is the larger
                self.known[c] = {k: max(before.get(k, 0), want.get(k, 0)) for k in want}


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("usage"), st.sampled_from(MEMBERS), st.integers(0, 12)),
        st.tuples(st.just("down"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("lossy"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("stuck"), st.sampled_from(MEMBERS), st.booleans()),
        st.tuples(st.just("cap"), st.sampled_from(MEMBERS), st.integers(0, 10)),
        st.tuples(st.just("reserved"), st.just(""), st.integers(0, 5)),
        st.tuples(st.just("failover"), st.just(""), st.just(0)),
        st.tuples(st.just("sync"), st.just(""), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS)
def test_the_guards_never_hold_more_than_the_hard_together(
    events: list[tuple[str, str, int]],
) -> None:
    model = Model(hard={P: n(10)})
    for kind, c, value in events:
        if kind == "usage":
            model.usage[c] = n(value)
        elif kind == "down":
            (model.down.add if value else model.down.discard)(c)
        elif kind == "lossy":
            (model.lossy.add if value else model.lossy.discard)(c)
        elif kind == "stuck":
            (model.stuck.add if value else model.stuck.discard)(c)
        elif kind == "cap":
            model.caps[c] = {P: n(value)}
        elif kind == "reserved":
            model.reserved = n(value)
        elif kind == "failover":
            model.known = {}  # a new leader knows nothing until it reads
        model.round()
        # what the controller assumes of a guard is never less than what it may hold
        for member, known in model.known.items():
            if known is not None and member in model.actual:
                assert all(known.get(k, 0) >= v for k, v in model.actual[member].items())
    model.down.clear()
    model.lossy.clear()
    model.stuck.clear()
    model.round()
    model.round()
    # once every member is back (and the controller knows them all), the guards are as wanted
    states = [gd.MemberState(c, usage={P: model.usage[c]}, guard=model.known[c]) for c in MEMBERS]
    wanted = gd.desired(
        gd.GuardInputs(
            hard=model.hard, members=states, reserved={P: model.reserved}, caps=model.caps
        )
    )
    assert {c: model.actual.get(c) for c in MEMBERS} == wanted


@given(
    st.integers(0, 10**6),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.booleans()), max_size=5),
    st.integers(0, 10**5),
)
def test_desired_fits_the_budget_left_by_unreachable_members(
    hard: int, members: list[tuple[int, int, bool]], reserved: int
) -> None:
    states = [
        gd.MemberState(f"m{i}", usage={P: u}, reachable=r, guard={P: g})
        for i, (u, g, r) in enumerate(members)
    ]
    got = gd.desired(gd.GuardInputs(hard={P: hard}, members=states, reserved={P: reserved}))
    fixed = sum(s.guard[P] for s in states if not s.reachable and s.guard is not None)
    assert sum(v[P] for v in got.values()) <= max(0, hard - fixed)
    assert set(got) == {s.name for s in states if s.reachable}


def test_a_moved_workload_waits_in_its_new_member_until_the_old_pods_are_gone() -> None:
    """Issue 42: pods=4 moved from member1 to member2 while its 4 pods stop slowly. member1's
    pods run whatever its guard says, so member2 gets only what they leave: 0 now (4 ran there
    beside the 4 terminating before), all 4 once they are gone."""
    moving = gd.GuardInputs(
        hard={P: n(4)},
        members=[
            gd.MemberState("member1", usage={P: n(4)}, observed={P: n(4)}),  # 4 terminating
            gd.MemberState("member2", usage={P: n(4)}, observed={P: n(0)}),  # 4 placed
        ],
    )
    assert pods(gd.desired(moving)) == {"member1": 4, "member2": 0}
    half = gd.GuardInputs(
        hard={P: n(4)},
        members=[
            gd.MemberState("member1", usage={P: n(1)}, observed={P: n(1)}),
            gd.MemberState("member2", usage={P: n(4)}, observed={P: n(3)}),
        ],
    )
    assert pods(gd.desired(half)) == {"member1": 1, "member2": 3}


@given(
    st.integers(0, 100),
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=4),
)
def test_what_the_members_run_never_passes_the_hard(
    hard: int, members: list[tuple[int, int]]
) -> None:
    """A member runs the pods it has (terminating ones too) and creates new ones only up to its
    guard: Σ max(observed, guard) ≤ hard whenever what they run now fits it."""
    states = [
        gd.MemberState(f"m{i}", usage={P: n(max(p, o))}, observed={P: n(o)})
        for i, (p, o) in enumerate(members)
    ]
    got = gd.desired(gd.GuardInputs(hard={P: n(hard)}, members=states))
    observed = {s.name: (s.observed or {}).get(P, 0) for s in states}
    if sum(observed.values()) <= n(hard):
        assert sum(max(observed[c], v[P]) for c, v in got.items()) <= n(hard)


def test_a_member_karmada_reports_not_ready_keeps_no_share_where_its_replicas_are_released() -> (
    None
):
    """A failover under a full quota: member1 is unreachable and not Ready, and the quota
    releases its evicted replicas (the default), so member2 may take the whole hard at once,
    as admission lets the moved replicas in; with `Hold` (not released) member1 keeps its last
    known guard and member2 only what is left."""
    members = [
        gd.MemberState("member1", usage={P: n(4)}, reachable=False, guard={P: n(4)}),
        gd.MemberState("member2", usage={P: n(4)}, observed={P: n(0)}),
    ]
    released = gd.GuardInputs(hard={P: n(4)}, members=members, released=frozenset({"member1"}))
    assert pods(gd.desired(released)) == {"member2": 4}
    held = gd.GuardInputs(hard={P: n(4)}, members=members)
    assert pods(gd.desired(held)) == {"member2": 0}
    # still reachable by the controller (Karmada alone lost it): the same, and not written
    reachable = [replace(members[0], reachable=True, observed={P: n(4)}), members[1]]
    got = gd.desired(replace(released, members=reachable))
    assert pods(got) == {"member2": 4}


def test_a_carried_guard_is_lowered_no_further_than_its_next_applied_spec_then_raised() -> None:
    """Pull mode: the member may hold the whole hard as far as we know (unreflected), but its
    agent will apply the Work's spec, 3, next. Writing 4 there as a 'lowering' would raise
    what it enforces before the other members' lowerings are confirmed."""
    t = gd.transition({"member3": {P: n(10)}}, {"member3": {P: n(4)}}, {"member3": {P: n(3)}})
    assert t.lower == {"member3": {P: n(3)}}
    assert t.final == {"member3": {P: n(4)}}
