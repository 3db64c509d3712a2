"""Async helpers for tests that run on an event loop (pytest-asyncio, asyncio_mode=auto).

A test that serves something on the loop (our own webhook, say) must never block it: blocking
calls (kubectl, the sync REST client) run in a worker thread here.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

T = TypeVar("T")


class InvariantViolation(AssertionError):
    """A guarantee broken (two leaders at once, Σ over hard): never "not yet". `eventually`
    re-raises it at once instead of polling on; raise it, not a bare assert, for what must
    hold at every poll."""


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    what: str = ...,
    interval: float = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | None],
    timeout: float = ...,
    what: str = ...,
    interval: float = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    timeout: float = 60.0,
    what: str = "condition",
    interval: float = 0.2,
) -> Any:
    """Poll ``check`` until it returns something truthy and return that.

    ``check`` may be sync (run in a worker thread) or async. An exception (e.g. a failed
    assertion) counts as "not yet" — except `InvariantViolation`, which fails at once; on
    timeout an AssertionError names ``what`` and repeats the last exception, so a failing check
    explains itself."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        result: object = None
        try:
            if inspect.iscoroutinefunction(check):
                result = await check()
            else:
                result = await asyncio.to_thread(check)
                if inspect.isawaitable(result):
                    result = await result
        except InvariantViolation:
            raise
        except Exception as e:
            last = e
            result = None
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"; last error: {last!r}" if last is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        await asyncio.sleep(interval)


@dataclass
class Within:
    """The largest measure the poller saw (with what it was made of), and how many polls."""

    hard: int
    most: int = 0
    polls: int = 0
    seen: list[Any] = field(default_factory=list)


@contextlib.asynccontextmanager
async def within(
    measure: Callable[[], Awaitable[tuple[int, Any]]], hard: int, what: str
) -> AsyncIterator[Within]:
    """Poll `measure` (what the members run) every 100 ms for the block; fail if it ever
    exceeds `hard`."""
    w = Within(hard)

    async def poll() -> None:
        while True:
            total, detail = await measure()
            w.polls += 1
            if total > w.most:
                w.most, w.seen = total, [*w.seen, detail]
            assert total <= hard, f"members run {detail} > {what}={hard}"
            await asyncio.sleep(0.1)  # the poll period, not synchronisation

    task = asyncio.create_task(poll())
    try:
        yield w
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert w.polls > 0
    assert w.most <= hard, w.seen
