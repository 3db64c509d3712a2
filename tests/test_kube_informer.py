"""The shared informer: version order, relists as differences, paging, 410 and bookmarks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from karmadaquota.kube.client import JSON, Gone
from karmadaquota.kube.informer import Informer
from karmadaquota.kube.retry import Backoff


def obj(name: str, rv: int, uid: str | None = None, ns: str = "ns", **spec: Any) -> JSON:
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": str(rv)}
    return {"metadata": meta, "spec": spec}


class Record:
    """An informer.Handler that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (call, name, resourceVersion)
        self.relisted_at: list[int] = []

    def _note(self, call: str, o: Mapping[str, Any]) -> None:
        meta = o["metadata"]
        self.calls.append((call, meta["name"], str(meta["resourceVersion"])))

    def added(self, o: Mapping[str, Any]) -> None:
        self._note("added", o)

    def modified(self, o: Mapping[str, Any]) -> None:
        self._note("modified", o)

    def deleted(self, o: Mapping[str, Any]) -> None:
        self._note("deleted", o)

    def relisted(self, resource_version: int) -> None:
        self.relisted_at.append(resource_version)


class Server:
    """Pages of a list, then scripted watch streams (one per watch call)."""

    def __init__(self, items: list[JSON], rv: int = 10) -> None:
        self.items = items
        self.rv = rv
        self.streams: list[list[tuple[str, JSON] | BaseException]] = []
        self.lists: list[Mapping[str, str]] = []
        self.watches: list[tuple[str, str]] = []
        self.idle = asyncio.Event()
        # called with each list request's params before it is answered (may raise)
        self.before_page: Callable[[Mapping[str, str]], None] = lambda params: None

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        params = dict(params or {})
        self.before_page(params)
        self.lists.append(params)
        start, limit = int(params.get("continue", "0")), int(params["limit"])
        meta: JSON = {"resourceVersion": str(self.rv)}
        if start + limit < len(self.items):
            meta["continue"] = str(start + limit)
        return {"items": self.items[start : start + limit], "metadata": meta}

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        self.watches.append((path, resource_version))
        if not self.streams:
            self.idle.set()
            await asyncio.Event().wait()
        for item in self.streams.pop(0):
            if isinstance(item, BaseException):
                raise item
            self.rv = max(self.rv, int(item[1]["metadata"]["resourceVersion"]))
            yield item


def informer(server: Server, handler: Record, **kw: Any) -> Informer:
    return Informer("/things", handler, server, page_size=2, backoff=Backoff(0.001, 0.001), **kw)


def test_an_older_version_never_replaces_a_newer_one() -> None:
    h = Record()
    inf = informer(Server([]), h)
    assert inf.offer("ADDED", obj("a", 5))
    assert not inf.offer("MODIFIED", obj("a", 4))  # late event
    assert not inf.offer("MODIFIED", obj("a", 5))  # the same version again
    assert not inf.offer("DELETED", obj("a", 3))  # a stale deletion
    assert inf.offer("MODIFIED", obj("a", 6))
    assert inf.offer("DELETED", obj("a", 7))
    assert not inf.offer("DELETED", obj("a", 8))  # nothing held any more
    assert h.calls == [("added", "a", "5"), ("modified", "a", "6"), ("deleted", "a", "7")]


def test_our_own_write_is_held_and_its_echo_not_delivered() -> None:
    h = Record()
    inf = informer(Server([]), h)
    inf.offer("ADDED", obj("a", 5))
    assert inf.hold("ns", "a", "uid-a", "9")
    assert not inf.hold("ns", "a", "uid-a", "8")
    assert not inf.offer("MODIFIED", obj("a", 9))
    assert h.calls == [("added", "a", "5")]


def test_a_name_taken_by_another_object_deletes_the_one_held() -> None:
    h = Record()
    inf = informer(Server([]), h)
    inf.offer("ADDED", obj("a", 5, uid="old"))
    inf.offer("ADDED", obj("a", 8, uid="new"))
    assert not inf.offer("MODIFIED", obj("a", 6, uid="old"))  # late: never brought back
    assert h.calls == [("added", "a", "5"), ("deleted", "a", "8"), ("added", "a", "8")]


async def test_relist_delivers_the_difference_in_pages() -> None:
    h = Record()
    server = Server([obj("a", 3), obj("b", 4), obj("c", 5)], rv=10)
    inf = informer(server, h)
    inf.offer("ADDED", obj("a", 3))
    inf.offer("ADDED", obj("gone", 2))
    inf.offer("ADDED", obj("newer", 12))  # newer than the list: kept
    await inf.relist()
    assert [p.get("continue") for p in server.lists] == [None, "2"]
    assert sorted(h.calls[3:]) == [
        ("added", "b", "4"),
        ("added", "c", "5"),
        ("deleted", "gone", "10"),
    ]
    assert h.relisted_at == [10] and inf.synced.is_set()


async def test_each_page_is_delivered_before_the_next_is_fetched() -> None:
    """A list is folded in page by page (the controller never holds 30,000 raw objects)."""
    h = Record()
    server = Server([obj("a", 3), obj("b", 4), obj("c", 5)], rv=10)
    seen_at_fetch: list[int] = []
    server.before_page = lambda params: seen_at_fetch.append(len(h.calls))
    await informer(server, h).relist()
    assert seen_at_fetch == [0, 2]  # a and b delivered before the second page was asked for


async def test_a_list_cut_short_deletes_nothing_and_is_started_again() -> None:
    """An expired continue token mid-list: the pages already delivered stand, nothing held is
    deleted on the strength of the partial list, and the list starts over."""
    h = Record()
    server = Server([obj("a", 3), obj("b", 4), obj("c", 5)], rv=10)
    inf = informer(server, h)
    inf.offer("ADDED", obj("c", 5))
    expired = [True]

    def expire_once(params: Mapping[str, str]) -> None:
        if params.get("continue") and expired:
            expired.clear()
            raise Gone(410, "Expired", "continue token expired")

    server.before_page = expire_once
    await inf.relist()
    assert [p.get("continue") for p in server.lists] == [None, None, "2"]
    assert not [c for c in h.calls if c[0] == "deleted"]
    assert sorted(h.calls) == [("added", "a", "3"), ("added", "b", "4"), ("added", "c", "5")]
    assert h.relisted_at == [10]


async def test_watch_resumes_from_the_last_version_and_relists_on_410() -> None:
    h = Record()
    server = Server([obj("a", 3)], rv=10)
    server.streams = [
        [("ADDED", obj("b", 11)), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
        [Gone(410, "Expired", "too old")],
    ]
    inf = informer(server, h, params={"fieldSelector": "x!=y"})
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(5):
            await server.idle.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert server.watches == [
        ("/things?fieldSelector=x!=y", "10"),
        ("/things?fieldSelector=x!=y", "15"),  # the bookmark's version
        ("/things?fieldSelector=x!=y", "15"),  # from the relist's version
    ]
    assert all(p["fieldSelector"] == "x!=y" for p in server.lists)
    assert inf.relists == 2
    # b was deleted while the watch was down: the relist says so
    assert h.calls == [("added", "a", "3"), ("added", "b", "11"), ("deleted", "b", "15")]


async def test_errors_are_reported_and_retried() -> None:
    h = Record()
    server = Server([obj("a", 3)])
    server.streams = [[OSError("connection reset")]]
    errors: list[str] = []
    inf = informer(server, h, on_error=lambda e: errors.append(str(e)))
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(5):
            await server.idle.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert errors == ["connection reset"] and inf.relists == 2
