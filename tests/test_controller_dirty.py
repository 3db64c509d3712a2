"""Per-namespace coalescing: bursts become few flushes, a lone change flushes fast."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from karmadaquota.controller.dirty import DirtyQueue
from tests.polling import until


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.active: set[str] = set()
        self.overlap = False
        self.gate: asyncio.Event | None = None
        self.fail_first = False

    async def __call__(self, ns: str) -> None:
        if ns in self.active:
            self.overlap = True
        self.active.add(ns)
        try:
            self.calls.append((ns, time.monotonic()))
            if self.fail_first:
                self.fail_first = False
                raise RuntimeError("boom")
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.active.discard(ns)

    def count(self, ns: str) -> int:
        return sum(1 for n, _ in self.calls if n == ns)


@pytest.fixture
async def queue() -> AsyncIterator[tuple[DirtyQueue, Recorder]]:
    rec = Recorder()
    q = DirtyQueue(rec, quiet=0.02, max_delay=0.2, retry_delay=0.05)
    task = asyncio.create_task(q.run())
    try:
        yield q, rec
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_instant_storm_is_one_flush(queue: tuple[DirtyQueue, Recorder]) -> None:
    q, rec = queue
    for _ in range(500):
        q.mark("a")
    await until(lambda: rec.count("a") == 1 and q.idle())
    assert rec.count("a") == 1


async def test_spread_storm_is_a_few_flushes(queue: tuple[DirtyQueue, Recorder]) -> None:
    q, rec = queue
    started = time.monotonic()
    for _ in range(500):  # ~0.6 s of events, one every ~1 ms
        q.mark("a")
        await asyncio.sleep(0.001)  # producing load over time, not synchronisation
    spent = time.monotonic() - started
    await until(lambda: q.idle() and not q.pending())
    assert 1 <= rec.count("a") <= int(spent / q.max_delay) + 2


async def test_lone_change_flushes_after_the_quiet_time_not_the_max_delay() -> None:
    rec = Recorder()
    q = DirtyQueue(rec, quiet=0.02, max_delay=3600, retry_delay=0.05)
    task = asyncio.create_task(q.run())
    try:
        q.mark("b")
        await until(lambda: rec.count("b") == 1)  # within the deadline, far below max_delay
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_one_flush_per_namespace_at_a_time_and_none_lost(
    queue: tuple[DirtyQueue, Recorder],
) -> None:
    q, rec = queue
    rec.gate = asyncio.Event()
    q.mark("c")
    await until(lambda: rec.count("c") == 1)
    q.mark("c")  # arrives during the flush
    q.mark("d")  # another namespace is not held up
    await until(lambda: rec.count("d") == 1)
    assert rec.count("c") == 1
    rec.gate.set()
    await until(lambda: rec.count("c") == 2)
    assert not rec.overlap


async def test_mark_at_flushes_later(queue: tuple[DirtyQueue, Recorder]) -> None:
    q, rec = queue
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    q.mark_at("e", loop.time() + 0.1)
    q.mark_at("e", loop.time() + 5)  # a later request does not delay the earlier one
    await until(lambda: rec.count("e") == 1)
    assert time.monotonic() - t0 >= 0.09


async def test_failed_flush_is_retried(queue: tuple[DirtyQueue, Recorder]) -> None:
    q, rec = queue
    rec.fail_first = True
    q.mark("f")
    await until(lambda: rec.count("f") == 2)


async def test_cancel_as_a_mark_wakes_the_queue_always_stops_it() -> None:
    """Cancelling the queue in the same loop turn as a mark wakes it must stop it (asyncio's
    wait_for could swallow that cancellation on Python 3.11: a shutdown that never ends)."""

    async def flush(_: str) -> None:
        return None

    for _ in range(300):
        q = DirtyQueue(flush, quiet=10.0, max_delay=10.0)
        task = asyncio.create_task(q.run())
        q.mark("a")
        for _ in range(3):
            await asyncio.sleep(0)  # the queue waits, with a deadline, for "a" to fall due
        q.mark("b")
        task.cancel()
        async with asyncio.timeout(2):
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
