"""How late the event loop runs what is due: every request's answer waits that long too.

A loop kept busy (a cold start's recomputes, a scrape written in one go) makes each answer wait
for the callbacks ahead of it, past its deadline: the Lease's renewals timed out on a pool of
their own while the API server answered in 0.1 s (docs/benchmarks.md, issue 46). Measured as
the overshoot of a short sleep, observed into a histogram, and logged when over a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("karmadaquota.loop")

PERIOD = 0.5
LOGGED = 1.0  # a lag this long is logged: a 2 s request deadline is at risk


async def watch_lag(observe: Callable[[float], None], period: float = PERIOD) -> None:
    """Observe the loop's lag every `period` seconds until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)  # the probe itself: how late it wakes is the lag
        lag = max(0.0, loop.time() - due)
        observe(lag)
        if lag > LOGGED:
            log.warning("event loop lagged", extra={"seconds": round(lag, 3)})
