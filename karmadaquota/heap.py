"""Short garbage-collector pauses: what a process holds for life is taken out of their reach.

A full (generation 2) collection walks every tracked object, and after start-up (kopf,
pydantic, aiohttp, prometheus-client and kubernetes_asyncio's generated client, imported only
for its kubeconfig loader) there are tens of thousands: a pause that every review waiting on
the event loop at that moment pays (measured in docs/benchmarks.md, `bench_batch`).
`gc.freeze()` moves everything allocated so far into a permanent generation that collections
skip; what is allocated later (quotas, bindings, requests) is collected as before.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("karmadaquota.heap")


def freeze_startup_heap() -> int:
    """Collect start-up garbage, then freeze what survives; returns the objects frozen."""
    gc.collect()  # cycles left over from start-up are freed, not kept for ever
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap frozen", extra={"objects": frozen})
    return frozen
