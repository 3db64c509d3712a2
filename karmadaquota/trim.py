"""Freed heap handed back to the system, now and then.

glibc's malloc keeps what a burst freed mapped in its heaps (a cold start's list pages, 5,000
status writes' bodies and answers): free chunks below the heap's top are not returned, so a
process's resident size stays near its peak for good. `malloc_trim(0)` returns the free pages
inside the heaps too (madvise), without moving anything. CPython's small-object arenas are not
malloc's to return (they go back when empty). Where there is no glibc (musl, macOS) nothing is
done.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("karmadaquota.trim")

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def rss_bytes() -> int:
    """This process's resident set size (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def trim(malloc_trim: Callable[[int], int] | None = _MALLOC_TRIM) -> int:
    """Return malloc's free pages to the system; the bytes of RSS that went (0: nothing done
    or nothing to return). Logged when it is more than a few MiB, with what it took."""
    if malloc_trim is None:
        return 0
    before, started = rss_bytes(), time.perf_counter()
    malloc_trim(0)
    freed = before - rss_bytes()
    if freed > 8 << 20:
        log.info(
            "heap trimmed",
            extra={
                "rss_before_mib": before >> 20,
                "freed_mib": freed >> 20,
                "seconds": round(time.perf_counter() - started, 4),
            },
        )
    return freed


async def trim_every(period: float) -> None:
    """`trim` every `period` seconds until cancelled (a call costs milliseconds on the event
    loop: it walks malloc's free lists)."""
    while True:
        await asyncio.sleep(period)  # a period, not a synchronisation
        trim()
