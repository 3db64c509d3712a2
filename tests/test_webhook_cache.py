"""The webhook's quota cache: list, then watch; never rolls back, skips what it holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube.client import JSON, KubeClient
from karmadaquota.webhook.cache import QuotaCache
from tests.fake_api import quota_doc


class FakeApi:
    """One LIST, then one WATCH stream of the given events, then the stream stays open."""

    def __init__(self, items: list[JSON], events: list[tuple[str, JSON]]) -> None:
        self.items = items
        self.events = events
        self.drained = asyncio.Event()
        self.gate = asyncio.Event()  # the watch delivers nothing until this is set
        self.gate.set()

    async def get(self, path: str, params: Any = None) -> JSON:
        return {"items": self.items, "metadata": {"resourceVersion": "10"}}

    async def watch(
        self, path: str, rv: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        await self.gate.wait()
        for e in self.events:
            yield e
        self.drained.set()
        await asyncio.Event().wait()


async def run(api: FakeApi, cache: QuotaCache) -> None:
    task = asyncio.create_task(cache.run())
    await cache.synced.wait()
    await api.drained.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_watch_events_update_delete_and_never_roll_back() -> None:
    newer = quota_doc("a", hard={"pods": "5"}, rv=20)
    stale = quota_doc("a", hard={"pods": "1"}, rv=15)
    gone = quota_doc("b", rv=21)
    api = FakeApi(
        [quota_doc("a", rv=9), quota_doc("b", rv=9)],
        [("MODIFIED", newer), ("MODIFIED", stale), ("DELETED", gone)],
    )
    cache = QuotaCache(cast(KubeClient, api))
    await run(api, cache)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == "20" and a.spec.hard == {"pods": "5"}


async def test_a_version_the_cache_already_holds_is_not_parsed_again() -> None:
    ours = quota_doc("a", rv=30)
    # the watch echoes our own write; a marker in its body shows whether it was applied
    echo = {**ours, "spec": {"hard": {"pods": "1"}}}
    api = FakeApi([quota_doc("a", rv=9)], [("MODIFIED", echo)])
    api.gate.clear()
    cache = QuotaCache(cast(KubeClient, api))
    task = asyncio.create_task(cache.run())
    await cache.synced.wait()
    cache.update(KarmadaQuota.model_validate(ours))  # folded in from the PUT response
    api.gate.set()
    await api.drained.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == "30" and a.spec.hard == {
        "requests.cpu": "10",
        "pods": "100",
    }
