"""The fake API server keeps etcd's rules, which the controller tests rely on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from karmadaquota.kube import paths
from karmadaquota.kube.client import APPLY_PATCH, JSON_PATCH, Conflict, Gone, KubeError, NotFound
from karmadaquota.kube.informer import Informer
from tests.conftest import raw_binding
from tests.fake_api import FakeApiServer, quota_doc
from tests.polling import until

Q = paths.quota("ns", "team-a")


class Seen:
    """An informer handler recording what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def added(self, obj: Any) -> None:
        self.events.append(("added", obj["metadata"]["name"]))

    def modified(self, obj: Any) -> None:
        self.events.append(("modified", obj["metadata"]["name"]))

    def deleted(self, obj: Any) -> None:
        self.events.append(("deleted", obj["metadata"]["name"]))

    def relisted(self, resource_version: int) -> None:
        self.events.append(("relisted", ""))


async def test_writes_compare_and_swap_and_only_a_status_write_changes_the_status() -> None:
    api = FakeApiServer()
    q = api.add_quota(quota_doc())
    stale = {**q, "status": {"used": {"pods": "1"}}}
    done = await api.request("PUT", Q + "/status", stale)
    assert done["status"] == {"used": {"pods": "1"}} and done["metadata"]["generation"] == 1
    with pytest.raises(Conflict):
        await api.request("PUT", Q + "/status", stale)  # its version moved
    spec = {**done, "spec": {"hard": {"pods": "2"}}, "status": {}}
    edited = await api.request("PUT", Q, spec)
    assert edited["metadata"]["generation"] == 2 and edited["status"] == done["status"]
    with pytest.raises(KubeError) as failed:
        await api.request(
            "PATCH",
            Q + "/status",
            [{"op": "test", "path": "/status/used/pods", "value": "9"}],
            content_type=JSON_PATCH,
        )
    assert failed.value.status == 422 and api.rejected_patches == 1
    with pytest.raises(NotFound):
        await api.get(paths.quota("ns", "other"))


async def test_pages_of_a_list_are_one_revision_and_an_old_token_expires() -> None:
    api = FakeApiServer()
    for n in ("a", "c", "e"):
        api.put_binding(raw_binding(n, namespace="ns"))
    first = await api.get(paths.bindings(), {"limit": "2"})
    api.put_binding(raw_binding("b", namespace="ns"))  # sorts into the first page
    token = first["metadata"]["continue"]
    rest = await api.get(paths.bindings(), {"limit": "2", "continue": token})
    names = [o["metadata"]["name"] for o in first["items"] + rest["items"]]
    assert names == ["a-deployment", "c-deployment", "e-deployment"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    api.compact()
    with pytest.raises(Gone):
        await api.get(paths.bindings(), {"limit": "2", "continue": token})


async def test_a_watch_replays_from_its_version_resumes_and_answers_410_after_compaction() -> None:
    api = FakeApiServer()
    api.add_quota(quota_doc("a"))
    seen = Seen()
    informer = Informer(paths.quotas(), seen, api, page_size=1)
    task = asyncio.create_task(informer.run())
    try:
        await until(lambda: api.watching("karmadaquotas"))
        api.add_quota(quota_doc("b"))
        api.end_watches()  # the watch times out: resumed from the last version, no relist
        await until(lambda: api.watching("karmadaquotas") and ("added", "b") in seen.events)
        api.bump("ns", "a", lambda q: q["spec"].update(hard={"pods": "1"}))
        await until(lambda: api.watching("karmadaquotas") and len(seen.events) == 4)
        assert seen.events == [("added", "a"), ("relisted", ""), ("added", "b"), ("modified", "a")]
        api.delete(paths.quota("ns", "b"))
        api.compact()  # 410: listed again
        await until(lambda: informer.relists == 2 and api.watching("karmadaquotas"))
        assert seen.events[4:] == [("deleted", "b"), ("relisted", "")]
        assert api.calls["WATCH karmadaquotas"] == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_finalizers_hold_a_deletion_and_preconditions_guard_merge_patches() -> None:
    api = FakeApiServer()
    api.add_quota(quota_doc())
    held = api.update(Q, lambda q: q["metadata"].update(finalizers=["x"]))
    gone = api.delete(Q)
    assert gone["metadata"]["deletionTimestamp"] and (("ns", "team-a") in api.quotas)
    with pytest.raises(Conflict):
        await api.merge_patch(Q, {"metadata": held["metadata"] | {"finalizers": []}})
    body = {"metadata": {"finalizers": [], "resourceVersion": gone["metadata"]["resourceVersion"]}}
    await api.merge_patch(Q, body)
    assert ("ns", "team-a") not in api.quotas
    with pytest.raises(NotFound):
        await api.request("POST", "/api/v1/namespaces/ns/events", {"metadata": {"name": "e"}})


async def test_server_side_apply_creates_then_merges_and_a_create_writes_no_status() -> None:
    api = FakeApiServer()
    api.create("/api/v1/namespaces", {"metadata": {"name": "ns"}})
    path = "/apis/apps/v1/namespaces/ns/deployments/web"
    doc = {"metadata": {"name": "web"}, "spec": {"replicas": 1}, "status": {"replicas": 9}}
    made = await api.request("PATCH", path, doc, content_type=APPLY_PATCH)
    assert made["spec"] == {"replicas": 1} and "status" not in made  # a status subresource
    again = await api.request("PATCH", path, {"spec": {"paused": True}}, content_type=APPLY_PATCH)
    assert again["spec"] == {"replicas": 1, "paused": True}
    with pytest.raises(NotFound):  # as a create, in a namespace that does not exist
        await api.request("PATCH", path.replace("/ns/", "/nope/"), doc, content_type=APPLY_PATCH)


async def test_a_delete_honours_its_preconditions() -> None:
    api = FakeApiServer()
    api.add_quota(quota_doc())
    for pre in ({"uid": "another"}, {"resourceVersion": "999"}):
        with pytest.raises(Conflict):
            await api.request("DELETE", Q, {"preconditions": pre})
    stored = api.get_object(Q)["metadata"]
    pre = {"uid": stored["uid"], "resourceVersion": stored["resourceVersion"]}
    await api.request("DELETE", Q, {"preconditions": pre})
    with pytest.raises(NotFound):
        api.get_object(Q)


async def test_a_watch_takes_a_bookmark_and_is_refused_while_the_server_fails() -> None:
    api = FakeApiServer()
    api.add_quota(quota_doc())
    since = str(api.rv)
    events: list[tuple[str, str]] = []

    async def follow() -> None:
        async for kind, obj in api.watch(paths.quotas(), since):
            events.append((kind, obj["metadata"]["resourceVersion"]))

    task = asyncio.create_task(follow())
    await until(lambda: api.watching("karmadaquotas"))
    api.create("/api/v1/namespaces", {"metadata": {"name": "other"}})  # another kind
    api.bookmark()
    await until(lambda: events == [("BOOKMARK", str(api.rv))], what=f"the bookmark: {events}")
    api.end_watches()
    await task
    assert api.watched == [(paths.quotas(), since)]
    api.fail = OSError("connection refused")
    with pytest.raises(OSError, match="connection refused"):
        await anext(aiter(api.watch(paths.quotas(), since)))
