"""The waiting list (pure): merge, bounds, removal, and who is woken when room appears."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import waiting
from karmadaquota.api import KarmadaQuota, ObjectReference, WaitingWorkload
from karmadaquota.evaluate import QuotaView
from karmadaquota.scopes import BindingTraits
from karmadaquota.times import format_time
from tests.conftest import NOW, rl, view

PLAIN = BindingTraits(has_replicas=True, best_effort=False, priority_class="")


def refusal(name: str, pods: int, seconds: float = 0, quota: str = "team-a") -> waiting.Refusal:
    return waiting.Refusal(
        template=ObjectReference(
            apiVersion="apps/v1", kind="Deployment", name=name, namespace="ns", uid=f"uid-{name}"
        ),
        binding=f"{name}-deployment",
        binding_uid=f"rb-{name}",
        requested=rl(pods=str(pods)),
        traits=PLAIN,
        quota=quota,
        at=NOW + timedelta(seconds=seconds),
    )


def names(entries: list[WaitingWorkload]) -> list[str]:
    return [w.template.name for w in entries]


def pods_quota(used: int, hard: int = 4, reserved: int = 0) -> QuotaView:
    v = view("team-a", {"pods": str(hard)}, {"pods": str(used)})
    return v.with_reserved(rl(pods=str(reserved))) if reserved else v


# ---------------------------------------------------------------------------------------------
# the list


def test_refused_again_keeps_its_place_and_first_time_and_counts_refusals() -> None:
    entries = waiting.record([], [refusal("x", 2, 0), refusal("y", 1, 1)])
    again = waiting.record(entries, [refusal("x", 3, 5)])
    assert names(again) == ["x", "y"]
    assert again[0].firstRefused == format_time(NOW, micro=True)
    assert again[0].lastRefused == format_time(NOW + timedelta(seconds=5), micro=True)
    assert again[0].refusals == 2
    assert again[0].requested == {"pods": "3"}  # the latest request is what must fit


def test_refusals_within_one_second_stay_in_order() -> None:
    entries = waiting.record([], [refusal("b", 1, 0.2), refusal("a", 1, 0.1)])
    assert names(waiting.fifo(entries)) == ["a", "b"]


def test_bounded_per_namespace_oldest_kept() -> None:
    first = waiting.record([], [refusal(f"w{i}", 1, i) for i in range(3)], limit=3)
    assert names(first) == ["w0", "w1", "w2"]
    more = waiting.record(first, [refusal("late", 1, 10), refusal("w1", 1, 11)], limit=3)
    assert names(more) == ["w0", "w1", "w2"]
    assert more[1].refusals == 2
    # entries listed by the namespace's other quotas count toward the same bound
    other = waiting.record([], [refusal("z", 1)], limit=3, elsewhere={"uid-p", "uid-q", "uid-r"})
    assert other == []


def test_remove_and_union_of_a_namespace() -> None:
    entries = waiting.record([], [refusal("x", 1, 0), refusal("y", 1, 1)])
    assert names(waiting.remove(entries, {"uid-x"})) == ["y"]
    q1 = KarmadaQuota.model_validate(
        {"metadata": {"name": "a"}, "status": {"waiting": [e.model_dump() for e in entries[1:]]}}
    )
    earlier_y = waiting.record([], [refusal("y", 1, -5), refusal("z", 1, 3)])
    q2 = KarmadaQuota.model_validate(
        {"metadata": {"name": "b"}, "status": {"waiting": [e.model_dump() for e in earlier_y]}}
    )
    union = waiting.of_namespace([q1, q2])
    assert names(union) == ["y", "z"]
    assert union[0].firstRefused == format_time(NOW - timedelta(seconds=5), micro=True)


def test_a_refused_create_that_lost_to_an_admitted_one_is_settled() -> None:
    [w] = waiting.record([], [refusal("x", 2)])
    assert w.bindingUID == "rb-x"
    assert not waiting.settled(w, {})
    assert not waiting.settled(w, {"x-deployment": {"rb-x"}})  # the refused binding itself
    assert waiting.settled(w, {"x-deployment": {"rb-other"}})  # another binding of that name
    assert not waiting.settled(w.model_copy(update={"bindingUID": ""}), {"x-deployment": {"o"}})


# ---------------------------------------------------------------------------------------------
# who is woken


def test_fifo_room_for_one_wakes_the_first_only() -> None:
    entries = waiting.record([], [refusal("x", 2, 0), refusal("y", 2, 1), refusal("z", 2, 2)])
    assert names(waiting.select(entries, [pods_quota(used=2)])) == ["x"]
    assert names(waiting.select(entries, [pods_quota(used=0)])) == ["x", "y"]
    assert names(waiting.select(entries, [pods_quota(used=4)])) == []


def test_what_does_not_fit_is_skipped_not_a_barrier() -> None:
    entries = waiting.record([], [refusal("big", 3, 0), refusal("small", 1, 1)])
    assert names(waiting.select(entries, [pods_quota(used=2)])) == ["small"]


def test_reserved_counts_like_used() -> None:
    entries = waiting.record([], [refusal("x", 2)])
    assert waiting.select(entries, [pods_quota(used=0, reserved=3)]) == []


def test_woken_but_not_yet_admitted_holds_its_room() -> None:
    entries = waiting.record([], [refusal("x", 2, 0), refusal("y", 2, 1)])
    flying = waiting.in_flight(entries, {"uid-x": 1})
    assert flying == {"uid-x"}
    # x was woken with room 2: y must not take the same room
    assert waiting.select(entries, [pods_quota(used=2)], flying) == []
    # x was admitted (its reservation is in) but is still listed: counted twice, y waits (the
    # safe side) until the admission takes x off the list; then y goes
    assert waiting.select(entries, [pods_quota(used=0, reserved=2)], flying) == []
    left = waiting.remove(entries, {"uid-x"})
    assert names(waiting.select(left, [pods_quota(used=0, reserved=2)], flying)) == ["y"]
    # x refused again since the wake: it waits like the others and goes first
    again = waiting.record(entries, [refusal("x", 2, 9)])
    assert waiting.in_flight(again, {"uid-x": 1}) == set()
    assert names(waiting.select(again, [pods_quota(used=2)])) == ["x"]


def test_scopes_decide_which_quota_a_waiting_workload_needs() -> None:
    high = dataclasses.replace(refusal("h", 2), traits=BindingTraits(True, False, "high"))
    entries = waiting.record([], [high])
    only_high = view(
        "high-only", {"pods": "2"}, {"pods": "2"}, expressions=[("PriorityClass", "In", ["high"])]
    )
    low_room = view("low-only", {"pods": "10"}, {"pods": "0"})
    assert waiting.select(entries, [only_high, low_room]) == []
    assert names(waiting.select(entries, [low_room])) == ["h"]


def test_no_quota_left_everything_fits() -> None:
    entries = waiting.record([], [refusal("x", 50), refusal("y", 50, 1)])
    assert names(waiting.select(entries, [])) == ["x", "y"]


def test_an_unreadable_entry_is_never_woken() -> None:
    bad = waiting.record([], [refusal("x", 1)])[0].model_copy(update={"requested": {"pods": "x"}})
    assert waiting.select([bad], [pods_quota(used=0)]) == []


@settings(max_examples=200, deadline=None)
@given(
    hard=st.integers(0, 12),
    used=st.integers(0, 12),
    asks=st.lists(st.integers(0, 6), min_size=0, max_size=8),
    flying=st.sets(st.integers(0, 7)),
)
def test_never_wakes_more_than_fits(
    hard: int, used: int, asks: list[int], flying: set[int]
) -> None:
    """Whatever the list, what is woken (plus what is in flight) fits in the room left."""
    entries = waiting.record([], [refusal(f"w{i}", n, i) for i, n in enumerate(asks)])
    fly = {f"uid-w{i}" for i in flying if i < len(asks)}
    picked = waiting.select(entries, [pods_quota(used=used, hard=hard)], fly)
    woken = sum(int(w.requested["pods"]) for w in picked)
    in_flight = [int(w.requested["pods"]) for w in entries if waiting.key(w.template) in fly]
    room = max(0, hard - used)
    assert woken <= room
    # in-flight first, in FIFO order, then the picked ones: never more than the room
    held = 0
    for n in in_flight:
        if held + n <= room:
            held += n
    assert held + woken <= room
    # FIFO: the oldest candidate goes whenever it fits in what the in-flight ones leave
    candidates = [w for w in waiting.fifo(entries) if waiting.key(w.template) not in fly]
    if candidates and int(candidates[0].requested["pods"]) <= room - held:
        assert picked[0] == candidates[0]


def test_refusal_times_are_utc_microtime_whatever_the_clock_gives() -> None:
    """A naive clock value means UTC (never the machine's local zone)."""
    naive = NOW.replace(tzinfo=None)
    assert format_time(naive, micro=True) == format_time(NOW, micro=True)
    assert format_time(NOW, micro=True).endswith("Z") and "." in format_time(NOW, micro=True)
