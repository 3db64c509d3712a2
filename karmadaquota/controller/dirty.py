"""Per-namespace coalescing of recomputes: a dirty set with a short trailing debounce.

`mark(ns)` says "something this namespace's quotas depend on changed". A namespace is flushed
once it has been quiet for `quiet` seconds, or at the latest `max_delay` seconds after it was
first marked — so a storm of 500 binding events becomes a few recomputes/writes while a lone
delete is reflected within tens of milliseconds. One flush per namespace runs at a time (a mark
during a flush schedules another one after it); different namespaces flush concurrently, up to
`concurrency`. `mark_at(ns, when)` schedules a flush at a loop time (a reservation expiry).
A flush that raises is retried after `retry_delay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger("karmadaquota.controller.dirty")


@dataclass(slots=True)
class _Pending:
    first: float
    last: float

    def due(self, quiet: float, max_delay: float) -> float:
        return min(self.first + max_delay, self.last + quiet)


class DirtyQueue:
    def __init__(
        self,
        flush: Callable[[str], Awaitable[None]],
        quiet: float = 0.03,
        max_delay: float = 0.1,
        concurrency: int = 16,
        retry_delay: float = 1.0,
        name: str = "recompute",
    ) -> None:
        self._flush = flush
        self.name = name  # the job, in task names and logs
        self.quiet = quiet
        self.max_delay = max_delay
        self.retry_delay = retry_delay
        self._pending: dict[str, _Pending] = {}
        self._timers: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self.flushes = 0

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def mark(self, namespace: str) -> None:
        now = self._now()
        p = self._pending.get(namespace)
        if p is None:
            self._pending[namespace] = _Pending(now, now)
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

    def pending(self) -> set[str]:
        return set(self._pending) | set(self._timers)

    def idle(self) -> bool:
        return not self._pending and not self._running

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
                for ns, p in list(self._pending.items()):
                    if ns in self._running:
                        continue  # re-examined when that flush ends
                    due = p.due(self.quiet, self.max_delay)
                    if due <= now:
                        del self._pending[ns]
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
            async with self._slots:
                self.flushes += 1
                await self._flush(namespace)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "flush failed; retrying", extra={"job": self.name, "namespace": namespace}
            )
            self.mark_at(namespace, self._now() + self.retry_delay)
        finally:
            self._running.pop(namespace, None)
            self._wake.set()  # a mark that arrived during the flush is now due
