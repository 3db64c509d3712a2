"""Compare-and-swap writes, retried on 409 Conflict, with one jittered backoff policy.

The shape of client-go's `retry.RetryOnConflict`: build the object to write from a version,
write it with that version's resourceVersion, and on Conflict read the object again and build
anew from the fresh version. Every writer of karmadaquota (the webhook's reservations and their
compensation, its waiting list, the controller's recomputed status) goes through
`retry_on_conflict`; the pause before each re-read comes from `Backoff`, also used between
reconnections of a watch.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from karmadaquota.kube.client import Conflict

T = TypeVar("T")  # a version of the object, as read
B = TypeVar("B")  # the body to write
R = TypeVar("R")  # what a successful write returns


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base * 2**n)).

    Full jitter keeps writers that lost the same compare-and-swap from colliding again in
    lockstep, and never waits longer than `cap`.
    """

    base: float
    cap: float
    rand: Callable[[], float] = random.random

    def delay(self, attempt: int) -> float:
        return float(self.rand() * self.ceiling(attempt))

    def ceiling(self, attempt: int) -> float:
        """The longest wait of attempt n (jitter picks below it)."""
        return float(min(self.cap, self.base * 2 ** min(attempt, 32)))

    def ceilings(self) -> tuple[float, ...]:
        """Each attempt's longest wait until the cap: the same policy for a library that takes
        a list of delays (kopf's `networking.error_backoffs`)."""
        out = [self.ceiling(0)]
        while out[-1] < self.cap:
            out.append(self.ceiling(len(out)))
        return tuple(out)


class ConflictsExhausted(Exception):
    """Every attempt lost the compare-and-swap."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"compare-and-swap lost {attempts} times")
        self.attempts = attempts


async def retry_on_conflict(
    read: Callable[[], Awaitable[T]],
    mutate: Callable[[T], B | None],
    write: Callable[[B], Awaitable[R]],
    *,
    attempts: int,
    backoff: Backoff,
    first: T | None = None,
    on_conflict: Callable[[], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> R | None:
    """Write `mutate(version)`; on Conflict wait, `read()` a fresh version and try again.

    Starts from `first` (a cached version) when given, else from `read()`. `mutate` returning
    None means there is nothing to write: the result is None. Raises `ConflictsExhausted` after
    `attempts` lost writes; any other error of `read` or `write` (NotFound, …) propagates.
    """
    version = first if first is not None else await read()
    for attempt in range(attempts):
        body = mutate(version)
        if body is None:
            return None
        try:
            return await write(body)
        except Conflict:
            if on_conflict is not None:
                on_conflict()
        if attempt + 1 == attempts:
            break
        await sleep(backoff.delay(attempt))  # CAS backoff, not synchronisation
        version = await read()
    raise ConflictsExhausted(attempts)
