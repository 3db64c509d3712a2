"""The loop's lag is measured: a loop held by synchronous work shows as its lag."""

from __future__ import annotations

import asyncio
import time

from karmadaquota.loop_lag import watch_lag
from tests.polling import until


async def test_a_loop_held_by_synchronous_work_shows_as_lag() -> None:
    seen: list[float] = []
    task = asyncio.create_task(watch_lag(seen.append, period=0.05))
    try:
        await until(lambda: len(seen) >= 2)
        end = time.monotonic() + 0.4
        while time.monotonic() < end:  # a recompute that never awaits, holding the loop
            pass
        await until(lambda: max(seen) >= 0.3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
