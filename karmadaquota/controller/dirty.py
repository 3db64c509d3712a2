"""Per-namespace coalescing of recomputes: a dirty set with a short trailing debounce.

`mark(ns)` says "something this namespace's quotas depend on changed". A namespace is flushed
once it has been quiet for `quiet` seconds, or at the latest `max_delay` seconds after it was
first marked — so a storm of 500 binding events becomes a few recomputes/writes while a lone
delete is reflected within tens of milliseconds. One flush per namespace runs at a time (a mark
during a flush schedules another one after it); different namespaces flush concurrently, up to
`concurrency`. `mark_at(ns, when)` schedules a flush at a loop time (a reservation expiry).
`sweep(keys)` marks many keys at once (a relist, a member's state, a new leader): a key an event
marked (`mark`, and the timers) takes the next free slot before every swept one (`slots`), so a
release never waits for a sweep of thousands.

Each queue is its job's only retry path, with client-go's workqueue contract: a flush that
raises, or that calls `retry(ns)` (AddRateLimited), runs again after that key's backoff
(`RateLimiter`: doubling per retry in a row from `retry_delay`, at most `retry_cap`); a flush
that ends without either forgets the key (Forget), so its next failure waits `retry_delay`
again. A job never retries by marking another job's queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from karmadaquota.controller.slots import Slots
from karmadaquota.kube.retry import Backoff

log = logging.getLogger("karmadaquota.controller.dirty")


@dataclass(slots=True)
class _Marked:
    first: float
    last: float

    def due(self, quiet: float, max_delay: float) -> float:
        return min(self.first + max_delay, self.last + quiet)


class RateLimiter:
    """Per-key exponential failure backoff, client-go's `ItemExponentialFailureRateLimiter`:
    the n-th retry in a row of a key waits `backoff.ceiling(n - 1)` (base doubling, capped, no
    jitter: each key has its own count, so keys do not retry in lockstep), until `forget`.

    The one retry policy of the controller's jobs (their queues) and of the member guards
    (per member); it gives delays, the caller's clock turns them into times."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        """How long to wait before retrying `key` (AddRateLimited: counts one more failure)."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return self.backoff.ceiling(n)

    def forget(self, key: str) -> None:
        """`key` succeeded: its next failure waits the base delay again."""
        self._failures.pop(key, None)

    def retries(self, key: str) -> int:
        """Failures of `key` in a row so far (client-go's NumRequeues)."""
        return self._failures.get(key, 0)


# the longest a job's queue waits before retrying a key (its first retry: `retry_delay`)
RETRY_CAP = 10.0


class DirtyQueue:
    def __init__(
        self,
        flush: Callable[[str], Awaitable[None]],
        quiet: float = 0.03,
        max_delay: float = 0.1,
        concurrency: int = 16,
        retry_delay: float = 1.0,
        name: str = "recompute",
        retry_cap: float = RETRY_CAP,
        listed: asyncio.Event | None = None,
    ) -> None:
        self._flush = flush
        # set once what the flushes read is listed in full: the marks a first list makes
        # (100,000 binding events) are a sweep, not events to hurry
        self._listed = listed
        self.name = name  # the job, in task names and logs
        self.quiet = quiet
        self.max_delay = max_delay
        self.limiter = RateLimiter(Backoff(retry_delay, max(retry_delay, retry_cap)))
        self._retried: set[str] = set()  # keys whose running flush asked for a retry
        self._marked: dict[str, _Marked] = {}
        self._again: dict[str, _Marked] = {}  # marked while its flush runs
        self._timers: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self.concurrency = concurrency
        self._slots = Slots(concurrency)
        # keys an event marked since their flush last started (they go first: `slots`)
        self._urgent: set[str] = set()
        # keys whose flush waits for a slot: a mark meanwhile is theirs (nothing read yet)
        self._waiting: set[str] = set()
        self.flushes = 0

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def mark(self, namespace: str) -> None:
        """Something `namespace` depends on changed (an event): flushed before swept keys."""
        if self._listed is not None and not self._listed.is_set():
            self._mark(namespace)
            return
        self._urgent.add(namespace)
        self._slots.promote(namespace)  # its flush may be waiting for a slot already
        self._mark(namespace)

    def sweep(self, namespaces: Iterable[str]) -> None:
        """Mark many keys for a flush that need not hurry (every quota after a list)."""
        for ns in namespaces:
            self._mark(ns)

    def _mark(self, namespace: str) -> None:
        if namespace in self._waiting:
            return  # its flush has not started: it reads what this mark says changed
        now = self._now()
        # a key marked while its flush runs waits aside until that flush ends: the loop then
        # never walks past it (5,000 keys marked again mid-flush made each wake-up walk them all)
        marked = self._again if namespace in self._running else self._marked
        p = marked.get(namespace)
        if p is None:
            marked[namespace] = _Marked(now, now)
        else:
            p.last = now
        self._wake.set()

    def mark_many(self, namespaces: Iterable[str]) -> None:
        for ns in namespaces:
            self.mark(ns)

    def mark_at(self, namespace: str, when: float) -> None:
        """Flush `namespace` at loop time `when` (the earliest of several requests wins)."""
        have = self._timers.get(namespace)
        if have is None or when < have:
            self._timers[namespace] = when
            self._wake.set()

    def retry(self, namespace: str) -> None:
        """Flush `namespace` again after its backoff (AddRateLimited); the running flush of it,
        if any, then ends without forgetting it. Counted once per flush, however often asked."""
        if namespace in self._retried:
            return
        self._retried.add(namespace)
        self.mark_at(namespace, self._now() + self.limiter.when(namespace))

    def marked(self) -> set[str]:
        return set(self._marked) | set(self._again) | set(self._timers)

    def idle(self) -> bool:
        return not self._marked and not self._running

    async def run(self) -> None:
        """Flush due namespaces forever (cancel to stop)."""
        try:
            while True:
                now = self._now()
                for ns, when in list(self._timers.items()):
                    if when <= now:
                        del self._timers[ns]
                        self.mark(ns)
                next_due: float | None = None
                for ns, p in list(self._marked.items()):
                    if ns in self._running:
                        continue  # re-examined when that flush ends
                    due = p.due(self.quiet, self.max_delay)
                    if due <= now:
                        del self._marked[ns]
                        self._start(ns)
                    elif next_due is None or due < next_due:
                        next_due = due
                if self._timers:
                    timer = min(self._timers.values())
                    next_due = timer if next_due is None else min(next_due, timer)
                self._wake.clear()
                timeout = None if next_due is None else max(0.0, next_due - self._now())
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that lands as the wake-up fires, and the queue never stops
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
        finally:
            tasks = list(self._running.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _start(self, namespace: str) -> None:
        self._running[namespace] = asyncio.create_task(
            self._one(namespace), name=f"{self.name}/{namespace}"
        )

    async def _one(self, namespace: str) -> None:
        try:
            self._waiting.add(namespace)
            try:
                await self._slots.acquire(namespace, namespace in self._urgent)
            finally:
                self._waiting.discard(namespace)
            try:
                self._urgent.discard(namespace)  # a mark from now on is for the next flush
                self.flushes += 1
                self._retried.discard(namespace)
                await self._flush(namespace)
            finally:
                self._slots.release()
        except asyncio.CancelledError:
            raise
        except TimeoutError as e:
            # a request's deadline passed: expected under load, and a traceback per flush
            # (formatted on the loop) cost the busy cold start more CPU (issue 46)
            log.warning(
                "flush timed out; retrying",
                extra={"job": self.name, "namespace": namespace, "error": repr(e)},
            )
            self.retry(namespace)
        except Exception:
            log.exception(
                "flush failed; retrying", extra={"job": self.name, "namespace": namespace}
            )
            self.retry(namespace)
        else:
            if namespace not in self._retried:
                self.limiter.forget(namespace)  # done: its next failure starts over
        finally:
            self._retried.discard(namespace)
            again = self._again.pop(namespace, None)
            if again is not None:
                self._marked[namespace] = again
            self._running.pop(namespace, None)
            self._wake.set()  # a mark that arrived during the flush is now due
