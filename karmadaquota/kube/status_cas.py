"""The one timed, counted compare-and-swap of a quota's status, for both programs' writers.

`retry_on_conflict` (`kube.retry`) with every write timed and counted in the two families both
programs export, declared here once (`StatusWriteMetrics`): `karmadaquota_status_writes_total`
by result and `karmadaquota_status_write_duration_seconds`. The webhook's batcher times each
attempt (its reviews wait on each); the controller's writer times a write with its retries
(nobody waits on it but its queue), docs/operations.md.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Histogram

from karmadaquota.kube.client import Conflict, KubeError, NotFound
from karmadaquota.kube.retry import Backoff, retry_on_conflict

T = TypeVar("T")  # a version of the quota, as read
B = TypeVar("B")  # the body to write
R = TypeVar("R")  # what a successful write returns

# result, and seconds (None: counted, not timed)
Observe = Callable[[str, float | None], None]


class StatusWriteMetrics:
    """The status-write families, one declaration for both programs (each with its own help
    and buckets: what one observation spans differs)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        writes_help: str,
        duration_help: str,
        buckets: Sequence[float],
    ) -> None:
        self.writes = Counter(
            "karmadaquota_status_writes_total", writes_help, ["result"], registry=registry
        )
        self.duration = Histogram(
            "karmadaquota_status_write_duration_seconds",
            duration_help,
            buckets=buckets,
            registry=registry,
        )

    def observe(self, result: str, seconds: float | None) -> None:
        """One write (or lost attempt) by result: ok, conflict, notfound, error."""
        self.writes.labels(result).inc()
        if seconds is not None:
            self.duration.observe(seconds)


async def timed_cas(
    read: Callable[[], Awaitable[T]],
    mutate: Callable[[T], B | None],
    write: Callable[[B], Awaitable[R]],
    *,
    attempts: int,
    backoff: Backoff,
    observe: Observe,
    first: T | None = None,
    on_conflict: Callable[[], None] | None = None,
    retries_timed: bool = False,
) -> R | None:
    """`retry_on_conflict(read, mutate, write)`, each write timed and counted by `observe`.

    By attempt: ok, conflict or notfound, each with its own time. With `retries_timed`, once
    per call — ok, notfound or error, timed with its retries and their backoff (a status
    found already right, nothing written, is neither) — and each lost attempt counted
    `conflict`, untimed. `on_conflict` is told of each lost attempt too."""
    if not retries_timed:

        async def timed(body: B) -> R:
            started = time.perf_counter()
            try:
                result = await write(body)
            except Conflict:
                observe("conflict", time.perf_counter() - started)
                raise
            except NotFound:
                observe("notfound", time.perf_counter() - started)
                raise
            observe("ok", time.perf_counter() - started)
            return result

        return await retry_on_conflict(
            read,
            mutate,
            timed,
            first=first,
            attempts=attempts,
            backoff=backoff,
            on_conflict=on_conflict,
        )

    def lost() -> None:
        observe("conflict", None)
        if on_conflict is not None:
            on_conflict()

    started = time.perf_counter()
    try:
        result = await retry_on_conflict(
            read, mutate, write, first=first, attempts=attempts, backoff=backoff, on_conflict=lost
        )
    except NotFound:
        observe("notfound", time.perf_counter() - started)
        raise
    except (KubeError, aiohttp.ClientError, TimeoutError):
        # a deadline passed (a connection waited for, a slow answer) counts as an error too:
        # before, the cold start's 217 timed-out writes counted nowhere (issue 46)
        observe("error", time.perf_counter() - started)
        raise
    if result is not None:
        observe("ok", time.perf_counter() - started)
    return result
