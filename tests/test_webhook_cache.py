"""The webhook's quota cache: list, then watch; never rolls back, skips what it holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON
from karmadaquota.webhook.cache import QuotaCache
from tests.fake_api import FakeApiServer, quota_doc
from tests.polling import until


async def run(api: FakeApiServer, cache: QuotaCache, write: Callable[[], JSON]) -> None:
    """Run the cache on the fake: once it has listed, `write` (our write and others', while
    the watch is slow) returns the object our write returned, which the cache folds in; then
    the watch delivers what it held back."""
    task = asyncio.create_task(cache.run())
    try:
        await until(lambda: cache.synced.is_set() and api.watching("karmadaquotas"))
        api.hold("karmadaquotas")
        ours = write()
        cache.update(KarmadaQuota.model_validate(ours))  # folded in from the PUT response
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

    cache = QuotaCache(api)
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

    cache = QuotaCache(api)
    await run(api, cache, write)
    (a,) = cache.quotas("ns")
    assert a.metadata.resourceVersion == ours["metadata"]["resourceVersion"]
    assert a.spec.hard == {"requests.cpu": "10", "pods": "100"}
