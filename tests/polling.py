"""The one way unit tests wait: poll a predicate on the event loop with a deadline.

Never a sleep as synchronisation. (End-to-end tests wait with `e2e.testbed.aio.eventually`,
which also runs blocking checks off the loop.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Return once `pred()` is true; fail the test if it is not by `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not reached before the deadline: {what or pred}"
        await asyncio.sleep(0.005)
