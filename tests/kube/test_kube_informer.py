"""The shared informer: version order, relists as differences, paging, 410 and bookmarks,
against the fake API server (tests/fake_api.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from karmadaquota.kube.client import JSON
from karmadaquota.kube.informer import Informer
from karmadaquota.kube.retry import Backoff
from tests.fake_api import FakeApiServer, Ref
from tests.polling import until

THINGS = "/apis/example.com/v1/things"


def obj(name: str, rv: int, uid: str | None = None, ns: str = "ns", **spec: Any) -> JSON:
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": str(rv)}
    return {"metadata": meta, "spec": spec}


def stored(api: FakeApiServer, *names: str) -> None:
    """Create the things `names` in namespace ns (resourceVersions 1, 2, ... on a new server)."""
    for name in names:
        api.create(THINGS, {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}})


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


def lists(api: FakeApiServer) -> list[dict[str, str]]:
    """The parameters of every LIST request the server is sent, from now on."""
    seen: list[dict[str, str]] = []

    def note(verb: str, ref: Ref, params: Mapping[str, str]) -> None:
        if verb == "LIST":
            seen.append(dict(params))

    api.before_read = note
    return seen


def informer(api: FakeApiServer, handler: Record, **kw: Any) -> Informer:
    return Informer(THINGS, handler, api, page_size=2, backoff=Backoff(0.001, 0.001), **kw)


def test_an_older_version_never_replaces_a_newer_one() -> None:
    h = Record()
    inf = informer(FakeApiServer(), h)
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
    inf = informer(FakeApiServer(), h)
    inf.offer("ADDED", obj("a", 5))
    assert inf.hold("ns", "a", "uid-a", "9")
    assert not inf.hold("ns", "a", "uid-a", "8")
    assert not inf.offer("MODIFIED", obj("a", 9))
    assert h.calls == [("added", "a", "5")]


def test_a_write_answered_after_the_deletion_reached_us_never_brings_the_object_back() -> None:
    """A status write crossed the object's deletion: its answer (version 6) is folded in
    after the DELETED event (version 7). It must not be held (the store would keep a deleted
    quota until the next relist); an object made again under the name (version 9) is."""
    h = Record()
    inf = informer(FakeApiServer(), h)
    inf.offer("ADDED", obj("a", 5))
    inf.offer("DELETED", obj("a", 7))
    assert not inf.hold("ns", "a", "uid-a", "6")
    assert not inf.offer("MODIFIED", obj("a", 6))
    assert not inf.hold("ns", "a", "uid-b", "7")  # older than the deletion, whatever the uid
    assert inf.offer("ADDED", obj("a", 9, uid="uid-b"))
    assert inf.hold("ns", "a", "uid-b", "10")
    assert h.calls == [("added", "a", "5"), ("deleted", "a", "7"), ("added", "a", "9")]


def test_deleted_keys_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("karmadaquota.kube.informer.GONE_KEPT", 2)
    inf = informer(FakeApiServer(), Record())
    for i, name in enumerate("abc"):
        inf.offer("ADDED", obj(name, 10 + i))
        inf.offer("DELETED", obj(name, 20 + i))
    assert list(inf.gone) == [("ns", "b"), ("ns", "c")]
    assert inf.hold("ns", "a", "uid-a", "15")  # forgotten: the oldest goes first


def test_a_name_taken_by_another_object_deletes_the_one_held() -> None:
    h = Record()
    inf = informer(FakeApiServer(), h)
    inf.offer("ADDED", obj("a", 5, uid="old"))
    inf.offer("ADDED", obj("a", 8, uid="new"))
    assert not inf.offer("MODIFIED", obj("a", 6, uid="old"))  # late: never brought back
    assert h.calls == [("added", "a", "5"), ("deleted", "a", "8"), ("added", "a", "8")]


async def test_relist_delivers_the_difference_in_pages() -> None:
    h = Record()
    api = FakeApiServer()
    stored(api, "a", "b", "c")  # versions 1, 2, 3: the list's is 3
    listed = lists(api)
    inf = informer(api, h)
    inf.offer("ADDED", obj("a", 1))
    inf.offer("ADDED", obj("gone", 2))
    inf.offer("ADDED", obj("newer", 12))  # newer than the list: kept
    await inf.relist()
    assert [bool(p.get("continue")) for p in listed] == [False, True]  # two pages of two
    assert sorted(h.calls[3:]) == [
        ("added", "b", "2"),
        ("added", "c", "3"),
        ("deleted", "gone", "3"),
    ]
    assert h.relisted_at == [3] and inf.synced.is_set()


async def test_the_next_page_is_fetched_while_one_is_delivered_never_more() -> None:
    """A list is folded in page by page (the controller never holds 100,000 raw objects),
    one page ahead at most: the next page is asked for before this one is folded in (the
    server serves it meanwhile), the one after only once this one is delivered."""
    h = Record()
    api = FakeApiServer()
    stored(api, "a", "b", "c", "d", "e")  # pages of two: ab, cd, e
    seen_at_fetch: list[int] = []
    api.before_read = lambda verb, ref, params: seen_at_fetch.append(len(h.calls))
    await informer(api, h, deliver_chunk=1).relist()
    # page 2 asked for while page 1 was half delivered; page 3 only once page 1 was
    assert seen_at_fetch == [0, 1, 3]
    assert [c[1] for c in h.calls] == ["a", "b", "c", "d", "e"]


async def test_a_failed_page_leaves_no_fetch_behind() -> None:
    """A page that fails ends the list with its error, and the page fetched ahead of it is
    not left running (a relist would otherwise race a stray request)."""
    h = Record()
    api = FakeApiServer()
    stored(api, "a", "b", "c", "d", "e")
    fetches: list[asyncio.Task[JSON]] = []
    get = api.get

    async def failing(path: str, params: Mapping[str, str] | None = None) -> JSON:
        if params and params.get("continue") and not fetches:
            fetches.append(asyncio.current_task())  # type: ignore[arg-type]
            await asyncio.sleep(3600)  # the page fetched ahead, still on its way
        return await get(path, params)

    class Boom(Exception):
        pass

    def added(o: Mapping[str, Any]) -> None:
        raise Boom

    h.added = added  # type: ignore[method-assign]
    api.get = failing  # type: ignore[method-assign]
    inf = informer(api, h)
    try:
        await inf.list(api)
    except Boom:
        pass
    else:
        raise AssertionError("the handler's error was swallowed")
    await asyncio.sleep(0)
    assert fetches and fetches[0].cancelled()


async def test_a_list_cut_short_deletes_nothing_and_is_started_again() -> None:
    """An expired continue token mid-list (the server compacted meanwhile): the pages already
    delivered stand, nothing held is deleted on the strength of the partial list, and the
    list starts over."""
    h = Record()
    api = FakeApiServer()
    stored(api, "a", "b", "c")
    inf = informer(api, h)
    inf.offer("ADDED", obj("c", 3))
    listed: list[dict[str, str]] = []

    def compact_once(verb: str, ref: Ref, params: Mapping[str, str]) -> None:
        listed.append(dict(params))
        if params.get("continue") and not api.compacted:
            api.compact()  # the token expires: this page answers 410

    api.before_read = compact_once
    await inf.relist()
    assert [bool(p.get("continue")) for p in listed] == [False, True, False, True]
    assert not [c for c in h.calls if c[0] == "deleted"]
    assert sorted(h.calls) == [("added", "a", "1"), ("added", "b", "2"), ("added", "c", "3")]
    assert h.relisted_at == [3]


async def test_watch_resumes_from_the_last_version_and_relists_on_410() -> None:
    h = Record()
    api = FakeApiServer()
    stored(api, "a")  # version 1
    listed = lists(api)
    inf = informer(api, h, params={"fieldSelector": "x!=y"})
    task = asyncio.create_task(inf.run())
    try:
        await until(lambda: api.watching("things"), what="the first watch")
        stored(api, "b")  # version 2, delivered by the watch
        api.create("/api/v1/namespaces", {"metadata": {"name": "other"}})  # version 3
        api.bookmark()  # at version 3: the watch resumes from there
        await until(lambda: api.drained(), what="the bookmark delivered")
        api.end_watches()
        await until(lambda: len(api.watched) == 2 and api.watching("things"), what="resumed")
        api.hold("things")
        api.delete("/apis/example.com/v1/namespaces/ns/things/b")  # version 4, never delivered
        api.compact()  # the watch answers 410: the informer lists again
        await until(lambda: len(api.watched) == 3 and api.watching("things"), what="relisted")
        api.release("things", deliver=False)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    path = f"{THINGS}?fieldSelector=x!=y"
    assert api.watched == [
        (path, "1"),
        (path, "3"),  # the bookmark's version
        (path, "4"),  # from the relist's version
    ]
    assert len(listed) == 2 and all(p["fieldSelector"] == "x!=y" for p in listed)
    assert inf.relists == 2
    # b was deleted while the watch was down: the relist says so
    assert h.calls == [("added", "a", "1"), ("added", "b", "2"), ("deleted", "b", "4")]


async def test_errors_are_reported_and_retried() -> None:
    h = Record()
    api = FakeApiServer()
    stored(api, "a")
    refused: list[str] = []

    def refuse_one_watch(verb: str, ref: Ref, params: Mapping[str, str]) -> None:
        if verb == "WATCH" and not refused:
            refused.append(verb)
            raise OSError("connection reset")

    api.before_read = refuse_one_watch
    errors: list[str] = []
    inf = informer(api, h, on_error=lambda e: errors.append(str(e)))
    task = asyncio.create_task(inf.run())
    try:
        await until(lambda: inf.relists == 2 and api.watching("things"), what="retried")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert errors == ["connection reset"] and inf.relists == 2
