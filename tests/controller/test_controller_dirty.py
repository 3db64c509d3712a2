"""Per-namespace coalescing: bursts become few flushes, a lone change flushes fast."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator

import pytest

from karmadaquota.controller.dirty import DirtyQueue, RateLimiter
from karmadaquota.kube.retry import Backoff
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


@contextlib.asynccontextmanager
async def running(q: DirtyQueue) -> AsyncIterator[DirtyQueue]:
    task = asyncio.create_task(q.run())
    try:
        yield q
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def queue() -> AsyncIterator[tuple[DirtyQueue, Recorder]]:
    rec = Recorder()
    async with running(DirtyQueue(rec, quiet=0.02, max_delay=0.2, retry_delay=0.05)) as q:
        yield q, rec


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
    await until(lambda: q.idle() and not q.marked())
    assert 1 <= rec.count("a") <= int(spent / q.max_delay) + 2


async def test_lone_change_flushes_after_the_quiet_time_not_the_max_delay() -> None:
    rec = Recorder()
    async with running(DirtyQueue(rec, quiet=0.02, max_delay=3600, retry_delay=0.05)) as q:
        q.mark("b")
        await until(lambda: rec.count("b") == 1)  # within the deadline, far below max_delay


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


def test_the_rate_limiter_doubles_per_key_up_to_its_cap_and_forget_starts_over() -> None:
    """client-go's ItemExponentialFailureRateLimiter: each key its own count of failures in a
    row, base * 2**n capped, reset by Forget."""
    limiter = RateLimiter(Backoff(0.5, 3.0))
    assert [limiter.when("a") for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert limiter.retries("a") == 5
    assert limiter.when("b") == 0.5  # another key is not slowed by a's failures
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == 0.5
    assert limiter.when("b") == 1.0  # forgetting a left b's count alone


async def test_a_job_that_asks_to_retry_runs_again_after_a_growing_backoff_then_forgets() -> None:
    """`retry` (AddRateLimited) runs the key again after base, 2 * base, … at most the cap; a
    run that ends without asking forgets the key, so its next failure waits the base again."""
    runs: list[float] = []
    failing = 4

    async def job(key: str) -> None:
        nonlocal failing
        runs.append(asyncio.get_running_loop().time())
        if failing:
            failing -= 1
            q.retry(key)

    q = DirtyQueue(job, quiet=0.0, max_delay=0.0, retry_delay=0.1, retry_cap=0.4, name="t")
    async with running(q):
        q.mark("k")
        await until(lambda: len(runs) == 5 and q.idle(), timeout=10)
        gaps = [b - a for a, b in itertools.pairwise(runs)]
        for gap, want in zip(gaps, [0.1, 0.2, 0.4, 0.4], strict=True):
            assert gap >= want - 0.005, gaps  # the timer never fires early
        assert gaps[3] < 0.8, gaps  # capped (doubling on would wait 0.8)
        assert q.limiter.retries("k") == 0  # the fifth run succeeded: forgotten
        failing = 1
        q.mark("k")
        await until(lambda: len(runs) == 7 and q.idle())
        assert q.limiter.retries("k") == 0
        assert 0.095 <= runs[6] - runs[5] < 0.4  # the base again, not the cap


async def test_a_raising_job_is_retried_through_the_same_rate_limiter(
    queue: tuple[DirtyQueue, Recorder],
) -> None:
    q, rec = queue
    rec.fail_first = True
    q.mark("g")
    await until(lambda: rec.count("g") == 2 and q.idle())
    (_, failed), (_, retried) = rec.calls
    assert retried - failed >= 0.045  # after the limiter's base delay (retry_delay)
    assert q.limiter.retries("g") == 0  # the retry succeeded: forgotten


async def test_a_job_asking_twice_in_one_run_counts_one_retry() -> None:
    """A job with several failing parts (the orphan audit's charges, the guards of several
    quotas) is one failure of its key, not one per part: the backoff doubles per run."""
    counted: list[int] = []  # the key's failures in a row as each run starts

    async def job(key: str) -> None:
        counted.append(q.limiter.retries(key))
        if len(counted) == 1:
            q.retry(key)
            q.retry(key)

    q = DirtyQueue(job, quiet=0.0, max_delay=0.0, retry_delay=0.05, name="t")
    async with running(q):
        q.mark("k")
        await until(lambda: len(counted) == 2 and q.idle())
        assert counted == [0, 1]
        assert q.limiter.retries("k") == 0


async def test_at_most_concurrency_flushes_run_at_once() -> None:
    running: set[str] = set()
    done: list[str] = []
    most = 0
    gate = asyncio.Event()

    async def flush(ns: str) -> None:
        nonlocal most
        running.add(ns)
        most = max(most, len(running))
        await gate.wait()
        running.discard(ns)
        done.append(ns)

    q = DirtyQueue(flush, quiet=0.0, max_delay=0.0, concurrency=2)
    task = asyncio.create_task(q.run())
    try:
        q.mark_many([f"ns-{i}" for i in range(5)])
        await until(lambda: len(running) == 2)
        gate.set()
        await until(lambda: len(done) == 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert most == 2


async def test_a_key_an_event_marks_goes_before_every_swept_key() -> None:
    """A sweep marks a thousand keys (every quota after a list); a key an event marks after it
    — a binding deleted: quota to release — takes the next free slot, and so does a swept key
    an event marks while it waits (issue 46: a release waited for a whole cold start)."""
    rec = Recorder()
    rec.gate = asyncio.Event()
    async with running(DirtyQueue(rec, quiet=0.0, max_delay=0.0, concurrency=2)) as q:
        q.sweep(f"s{i:04d}" for i in range(1000))
        await until(lambda: len(rec.calls) == 2)  # two slots, both held
        q.mark("release")
        q.mark("s0999")  # swept, waiting last in line: an event makes it urgent
        await asyncio.sleep(0.01)  # every mark taken in, before a slot frees
        rec.gate.set()
        await until(lambda: q.idle() and not q.marked())
    order = [ns for ns, _ in rec.calls]
    assert set(order[2:4]) == {"release", "s0999"}
    assert sorted(order) == sorted({*order}) and len(order) == 1001
