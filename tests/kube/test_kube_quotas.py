"""The one quota store both shells read: list, then watch; never rolls back, skips what it
holds, and folds in our own writes (as a model or raw)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from karmadaquota.api import KarmadaQuota, read_quota
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON
from karmadaquota.kube.quotas import QuotaRecord, QuotaStore
from tests.fake_api import FakeApiServer, quota_doc
from tests.polling import until


async def run(api: FakeApiServer, cache: QuotaStore, write: Callable[[], JSON]) -> None:
    """Run the cache on the fake: once it has listed, `write` (our write and others', while
    the watch is slow) returns the object our write returned, which the cache folds in; then
    the watch delivers what it held back."""
    task = asyncio.create_task(cache.run())
    try:
        await until(lambda: cache.synced.is_set() and api.watching("karmadaquotas"))
        api.hold("karmadaquotas")
        ours = write()
        cache.fold_quota(KarmadaQuota.model_validate(ours))  # folded in from the PUT response
        meta = ours["metadata"]
        while api.holding("karmadaquotas"):  # one event at a time: never a step back
            api.release("karmadaquotas", count=1)
            await until(lambda: api.watching("karmadaquotas"))
            (held,) = [
                q for q in cache.quotas(meta["namespace"]) if q.metadata.name == meta["name"]
            ]
            assert int(held.metadata.resourceVersion) >= int(meta["resourceVersion"])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_watch_events_update_delete_and_never_roll_back() -> None:
    api = FakeApiServer()
    api.add_quota(quota_doc("a"))
    api.add_quota(quota_doc("b"))

    def writes() -> JSON:
        api.bump("ns", "a", lambda q: q["spec"].update(hard={"pods": "1"}))  # older (stale)
        newer = api.bump("ns", "a", lambda q: q["spec"].update(hard={"pods": "5"}))  # ours
        api.delete(paths.quota("ns", "b"))
        return newer

    cache = QuotaStore(api)
    await run(api, cache, writes)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == api.quotas[("ns", "a")]["metadata"]["resourceVersion"]
    assert a.spec.hard == {"pods": "5"}


async def test_a_version_the_cache_already_holds_is_not_parsed_again() -> None:
    api = FakeApiServer()
    ours = api.add_quota(quota_doc("a"))

    def write() -> JSON:
        # the watch echoes our own write; a marker in its body shows whether it was applied
        echo = api.bump("ns", "a", lambda q: q["spec"].update(hard={"pods": "1"}))
        ours["metadata"]["resourceVersion"] = echo["metadata"]["resourceVersion"]
        return ours

    cache = QuotaStore(api)
    await run(api, cache, write)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == ours["metadata"]["resourceVersion"]
    assert a.spec.hard == {"requests.cpu": "10", "pods": "100"}


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


def test_overdue_is_the_oldest_pending_charge_past_its_expiry_and_how_many() -> None:
    store = QuotaStore(None)
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    doc = quota_doc("q", rv=3)
    doc["status"]["pending"] = [
        {"charge": {"pods": "1"}, "expires": "2026-01-01T11:58:00Z", "bindings": ["a/u-a"]},
        {"charge": {"pods": "2"}, "expires": "2026-01-01T11:59:30Z", "bindings": ["b/u-b"]},
        {"charge": {"pods": "3"}, "expires": "2026-01-01T12:01:00Z", "bindings": ["c/u-c"]},
    ]
    store.added(doc)
    assert store.overdue(now) == (120.0, 2)
    assert store.overdue(now - timedelta(hours=1)) == (0.0, 0)
    assert store.quotas("ns")  # parsed now: the model says the same
    assert store.overdue(now) == (120.0, 2)


class CountingStore(QuotaStore):
    """A store that counts the quotas it parses."""

    parsed_count = 0

    @staticmethod
    def parse(raw: Mapping[str, Any]) -> KarmadaQuota | None:
        CountingStore.parsed_count += 1
        return read_quota(raw)


def test_overdue_reads_raw_statuses_without_parsing_or_keeping_a_model() -> None:
    # the webhook's metrics read every quota at each scrape: parsing them all kept every
    # model (110 MiB at 5,000 quotas) and held the event loop for seconds
    CountingStore.parsed_count = 0
    store = CountingStore(None)
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    for i in range(3):
        doc = quota_doc("q", namespace=f"ns-{i}", rv=3)
        doc["status"]["pending"] = [
            {"charge": {"pods": "1"}, "expires": "2026-01-01T11:59:00Z", "bindings": ["a/u"]},
            {"charge": {"pods": "1"}, "expires": "not a time", "bindings": ["b/u-b"]},
        ]
        store.added(doc)
    # an unreadable expiry is due at once and counted, with no age
    assert store.overdue(now) == (60.0, 6)
    assert CountingStore.parsed_count == 0


def test_a_store_keeps_the_models_of_the_most_recently_read_quotas_only() -> None:
    CountingStore.parsed_count = 0
    store = CountingStore(None, parsed=2)
    for i in range(3):
        store.added(quota_doc("q", namespace=f"ns-{i}", used={"pods": str(i)}))
    first = store.quotas("ns-0")
    store.quotas("ns-1")
    store.quotas("ns-0")  # read again: the most recent now, ns-1 the least
    assert CountingStore.parsed_count == 2
    store.quotas("ns-2")  # a third model: ns-1's goes
    store.quotas("ns-0")
    assert CountingStore.parsed_count == 3
    again = store.quotas("ns-1")  # parsed again from its raw object: the same quota
    assert CountingStore.parsed_count == 4
    assert again[0].status.used == {"pods": "1"}
    assert store.quotas("ns-0") == first  # still held: read after ns-2
    assert CountingStore.parsed_count == 4
    store.quotas("ns-2")  # dropped by ns-1's parse: made again
    assert CountingStore.parsed_count == 5


def test_a_quota_held_only_as_a_model_keeps_it() -> None:
    # a write of the webhook's, folded as a model: nothing could make it again
    store = QuotaStore(None, parsed=1)
    store.fold_quota(KarmadaQuota.model_validate(quota_doc("a", namespace="ns-a", rv=4)))
    store.added(quota_doc("b", namespace="ns-b"))
    store.added(quota_doc("c", namespace="ns-c"))
    for ns in ("ns-a", "ns-b", "ns-c", "ns-a"):
        (quota,) = store.quotas(ns)
        assert quota.metadata.namespace == ns


async def test_lookup_on_a_miss_reads_live_once_for_concurrent_reviews() -> None:
    api = FakeApiServer()
    store = QuotaStore(api)
    store.synced.set()
    api.add_quota(quota_doc("q", namespace="late"))
    lists = api.calls["LIST karmadaquotas"]
    assert await asyncio.gather(*(store.lookup("late") for _ in range(5))) == [True] * 5
    assert api.calls["LIST karmadaquotas"] == lists + 1
    assert not await store.lookup("empty")


def test_a_record_keeps_the_object_as_json_and_hands_out_a_new_dict_each_read() -> None:
    store = QuotaStore(None)
    doc = quota_doc("q", used={"pods": "3"})
    doc["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    store.added(doc)
    record = store.get("ns", "q")
    assert record is not None
    mine = record.raw
    mine["status"]["used"]["pods"] = "999"  # the caller's copy
    assert record.raw["status"]["used"] == {"pods": "3"}
    assert "managedFields" not in record.raw["metadata"]
    assert record.raw == {
        **doc,
        "metadata": {k: v for k, v in doc["metadata"].items() if k != "managedFields"},
    }


def test_on_exceed_is_kept_when_the_model_is_dropped() -> None:
    # the enforcement label asks it of 100 namespaces at each cluster quota recompute
    CountingStore.parsed_count = 0
    store = CountingStore(None, parsed=1)
    queueing = quota_doc("q", namespace="ns-q")
    queueing["spec"]["onExceed"] = "Queue"
    store.added(queueing)
    store.added(quota_doc("r", namespace="ns-r"))
    broken = quota_doc("x", namespace="ns-x")
    broken["spec"]["hard"] = "not a resource list"
    store.added(broken)
    for _ in range(3):
        answers = [
            (r.name, r.on_exceed) for ns in ("ns-q", "ns-r", "ns-x") for r in store.records(ns)
        ]
        assert answers == [("q", "Queue"), ("r", "Refuse"), ("x", None)]
    assert CountingStore.parsed_count == 3  # each once, though one model is kept
