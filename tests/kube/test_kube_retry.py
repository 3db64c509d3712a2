"""retry_on_conflict: re-read and rebuild after a lost compare-and-swap; bounded; jittered."""

from __future__ import annotations

import pytest

from karmadaquota.kube.client import Conflict, NotFound
from karmadaquota.kube.retry import Backoff, ConflictsExhausted, retry_on_conflict


class Store:
    def __init__(self, lose: int) -> None:
        self.version = 1
        self.lose = lose  # how many writes another writer wins first
        self.reads = 0
        self.written: list[tuple[int, str]] = []

    async def read(self) -> int:
        self.reads += 1
        return self.version

    async def write(self, body: tuple[int, str]) -> int:
        if self.lose > 0 or body[0] != self.version:
            self.lose -= 1
            self.version += 1
            raise Conflict(409, "Conflict", "modified")
        self.version += 1
        self.written.append(body)
        return self.version


async def no_sleep(_: float) -> None:
    return None


BACKOFF = Backoff(0.01, 0.04, rand=lambda: 1.0)


async def test_rebuilds_from_the_fresh_version_after_a_conflict() -> None:
    s = Store(lose=2)
    conflicts: list[int] = []
    got = await retry_on_conflict(
        s.read,
        lambda v: (v, f"from {v}"),
        s.write,
        first=1,
        attempts=5,
        backoff=BACKOFF,
        on_conflict=lambda: conflicts.append(1),
        sleep=no_sleep,
    )
    assert got == 4 and s.written == [(3, "from 3")] and len(conflicts) == 2 and s.reads == 2


async def test_nothing_to_write_stops_without_writing() -> None:
    s = Store(lose=0)
    got = await retry_on_conflict(
        s.read, lambda v: None, s.write, attempts=3, backoff=BACKOFF, sleep=no_sleep
    )
    assert got is None and s.written == [] and s.reads == 1


async def test_gives_up_after_the_attempts_and_passes_other_errors_on() -> None:
    s = Store(lose=10)
    with pytest.raises(ConflictsExhausted):
        await retry_on_conflict(
            s.read, lambda v: (v, ""), s.write, attempts=3, backoff=BACKOFF, sleep=no_sleep
        )
    assert s.lose == 7

    async def gone() -> int:
        raise NotFound(404, "NotFound", "gone")

    with pytest.raises(NotFound):
        await retry_on_conflict(
            gone, lambda v: (v, ""), s.write, attempts=3, backoff=BACKOFF, sleep=no_sleep
        )


def test_backoff_doubles_up_to_the_cap_with_full_jitter() -> None:
    assert [BACKOFF.delay(n) for n in range(4)] == [0.01, 0.02, 0.04, 0.04]
    assert Backoff(1.0, 8.0, rand=lambda: 0.25).delay(2) == 1.0
