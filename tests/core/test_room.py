"""Wait for room: the one selection (`karmadaquota.room_selection`) and the controller's one loop
(`controller.room`) that waking refused workloads and admitting queued bindings share."""

from __future__ import annotations

from collections.abc import Sequence

from karmadaquota import room_selection
from karmadaquota.api import KarmadaQuota
from karmadaquota.charge import Charge
from karmadaquota.controller import room as loop
from karmadaquota.evaluate import QuotaView
from karmadaquota.scopes import BindingTraits
from tests.conftest import quota, rl, view

PLAIN = BindingTraits(has_replicas=True, best_effort=False, priority_class="")


def pods(n: int) -> Charge:
    return Charge(total=rl(pods=str(n)), per_cluster={}, traits=PLAIN)


def room_for(free: int, hard: int = 4) -> list[QuotaView]:
    return [view("q", {"pods": str(hard)}, {"pods": str(hard - free)})]


def cand(
    name: str, n: int, queue: str = "", strict: bool = False, held: bool = False
) -> room_selection.Candidate[str]:
    return room_selection.Candidate(name, pods(n), queue=queue, strict=strict, held=held)


def test_each_pick_is_reserved_for_the_ones_after_it_and_a_misfit_is_skipped() -> None:
    cs = [cand("a", 2), cand("big", 3), cand("b", 1), cand("c", 1)]
    assert room_selection.select(cs, room_for(3)) == ["a", "b"]  # big skipped, c finds no room left
    assert room_selection.select(cs, room_for(0)) == []


def test_a_strict_queue_stops_at_its_first_misfit_and_only_that_queue() -> None:
    cs = [
        cand("big", 3, queue="s", strict=True),
        cand("small", 1, queue="s", strict=True),
        cand("other", 1, queue="b"),
    ]
    assert room_selection.select(cs, room_for(2)) == ["other"]
    assert room_selection.select(cs, room_for(3)) == ["big"]


def test_held_entries_take_their_room_first_and_are_not_picked_again() -> None:
    cs = [cand("woken", 2, held=True), cand("next", 2)]
    assert room_selection.select(cs, room_for(2)) == []  # the woken one's room is not counted twice
    assert room_selection.select(cs, room_for(4)) == ["next"]
    # a held entry that no longer fits is already in used + reserved: it holds nothing more
    assert room_selection.select([cand("woken", 5, held=True), cand("next", 2)], room_for(2)) == [
        "next"
    ]


class Look:
    """A way of waiting whose acts fail for the names in `fail`, recording each step."""

    def __init__(self, picks: Sequence[tuple[str, str | None]], fail: set[str]) -> None:
        self.picks = picks
        self.fail = fail
        self.steps: list[str] = []

    async def announce(self) -> bool:
        self.steps.append("announce")
        return bool(self.picks)

    async def select(self, views: Sequence[QuotaView]) -> list[tuple[str, str | None]]:
        self.steps.append(f"select {len(views)}")
        return list(self.picks)

    def strict_queue(self, pick: tuple[str, str | None]) -> str | None:
        return pick[1]

    async def act(self, pick: tuple[str, str | None]) -> bool:
        self.steps.append(f"act {pick[0]}")
        return pick[0] not in self.fail

    async def retry_at(self, let_go: Sequence[tuple[str, str | None]]) -> float | None:
        self.steps.append("retry_at " + ",".join(n for n, _ in let_go))
        return 7.0


QUOTAS: list[KarmadaQuota] = [quota("q", {"pods": "4"}, {"pods": "0"})]


async def test_the_loop_announces_selects_acts_and_asks_when_to_come_back() -> None:
    look = Look([("a", None), ("b", None)], fail={"a"})
    assert await loop.run(look, QUOTAS) == 7.0
    assert look.steps == ["announce", "select 1", "act a", "act b", "retry_at b"]


async def test_a_strict_queue_lets_nothing_past_a_pick_that_was_not_let_go() -> None:
    look = Look([("a", "s"), ("b", "s"), ("c", "t"), ("d", None)], fail={"a"})
    await loop.run(look, QUOTAS)
    assert look.steps[2:] == ["act a", "act c", "act d", "retry_at c,d"]


async def test_nothing_waiting_or_an_unreadable_quota_selects_nothing() -> None:
    idle = Look([], fail=set())
    assert await loop.run(idle, QUOTAS) is None
    assert idle.steps == ["announce"]
    bad = quota("q", {"pods": "4"}, {"pods": "0"})
    bad.spec.hard["pods"] = "lots"
    look = Look([("a", None)], fail=set())
    assert await loop.run(look, [bad]) is None
    assert look.steps == ["announce"]
