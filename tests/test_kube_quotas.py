"""The one quota store both shells read: list, then watch; never rolls back, skips what it
holds, and folds in our own writes (as a model or raw)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube.client import JSON, KubeClient
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore
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


async def run(api: FakeApi, cache: QuotaStore) -> None:
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
    cache = QuotaStore(cast(KubeClient, api))
    await run(api, cache)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == "20" and a.spec.hard == {"pods": "5"}


async def test_a_version_the_cache_already_holds_is_not_parsed_again() -> None:
    ours = quota_doc("a", rv=30)
    # the watch echoes our own write; a marker in its body shows whether it was applied
    echo = {**ours, "spec": {"hard": {"pods": "1"}}}
    api = FakeApi([quota_doc("a", rv=9)], [("MODIFIED", echo)])
    api.gate.clear()
    cache = QuotaStore(cast(KubeClient, api))
    task = asyncio.create_task(cache.run())
    await cache.synced.wait()
    cache.fold_quota(KarmadaQuota.model_validate(ours))  # folded in from the PUT response
    api.gate.set()
    await api.drained.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == "30" and a.spec.hard == {
        "requests.cpu": "10",
        "pods": "100",
    }


def test_a_record_gives_the_form_it_was_not_given() -> None:
    doc = quota_doc("a", rv=7)
    doc["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    raw = QuotaRecord(doc)
    assert "managedFields" not in raw.raw["metadata"]  # megabytes over a thousand quotas
    assert raw.quota is not None and raw.quota.spec.hard == {"requests.cpu": "10", "pods": "100"}
    assert (raw.namespace, raw.name, raw.uid, raw.rv) == ("ns", "a", "a", 7)
    parsed = QuotaRecord(None, KarmadaQuota.model_validate(quota_doc("a", rv=8)))
    assert parsed.rv == 8 and parsed.raw["spec"]["hard"] == {"requests.cpu": "10", "pods": "100"}
    assert parsed.raw["metadata"]["resourceVersion"] == "8"


def test_an_unreadable_quota_is_held_but_never_read() -> None:
    store = QuotaStore(None)
    bad = quota_doc("bad", rv=3)
    bad["spec"]["hard"] = "not a map"
    store.added(bad)
    store.added(quota_doc("good", rv=4))
    assert [r.name for r in store.records("ns")] == ["bad", "good"]
    assert [q.metadata.name for q in store.quotas("ns")] == ["good"]


def test_fold_keeps_the_newer_version_and_reports_what_the_informer_delivers() -> None:
    put: list[tuple[str, int]] = []
    gone: list[str] = []
    store = QuotaStore(
        None, on_put=lambda r: put.append((r.name, r.rv)), on_delete=lambda r: gone.append(r.name)
    )
    store.informer.offer("ADDED", quota_doc("a", rv=5))
    held = store.fold(quota_doc("a", rv=9))  # our write's answer
    assert held is not None and held.rv == 9
    stale = store.fold(quota_doc("a", rv=6))  # a late answer never rolls back
    assert stale is held
    store.informer.offer("MODIFIED", quota_doc("a", rv=9))  # the echo of our write
    assert put == [("a", 5)]  # our own write is not reported, nor its echo delivered
    store.informer.offer("MODIFIED", quota_doc("a", rv=10))  # another writer's change
    assert put == [("a", 5), ("a", 10)]
    store.informer.offer("DELETED", quota_doc("b", rv=10))  # never held: nothing to report
    store.informer.offer("DELETED", quota_doc("a", rv=11))
    assert gone == ["a"] and not store.has("ns") and len(store) == 0
