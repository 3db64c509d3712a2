"""One informer: list, then watch, of one collection — the only list/watch loop karmadaquota has.

As client-go's reflector does it: a paged LIST (`limit`/`continue`), then a WATCH from the
list's resourceVersion with `allowWatchBookmarks`; a watch that ends is resumed from the last
version seen, one that answers 410 Gone (the version was compacted) lists again, and any other
error lists again after a jittered, capped backoff (`retry.Backoff`). `relist_period` forces a
full list now and then, a safety net against a watch that silently lost events.

The informer keeps each object's resourceVersion (and uid), so that the handler sees events in
version order whatever their source: an object is only replaced by a version at least as new
(resourceVersions compared as integers, which etcd-backed API servers guarantee; a version that
is not a number is always accepted), a version already held is not delivered again (the echo of
our own write), and a relist is delivered as the difference to what is held — additions,
modifications, and deletions of what the list no longer holds unless it is newer than the list.
Writers fold the objects their writes return in with `offer`, so a late watch event never rolls
them back; and the last version of each deleted object is remembered (`gone`), so a write's
answer read after the deletion reached us never brings it back (a KarmadaQuota whose status
write crossed its deletion stayed in the store until the next relist, and the namespace it
named was patched thirty times a second meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from karmadaquota.kube.client import JSON, Gone
from karmadaquota.kube.retry import Backoff
from karmadaquota.kube.versions import parse_rv

log = logging.getLogger("karmadaquota.informer")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


class Lister(Protocol):
    """What an informer needs of a client: `KubeClient`, or a fake in unit tests."""

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON: ...

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]: ...


class Handler(Protocol):
    """Receives an informer's events, in version order, on the event loop (no awaiting)."""

    def added(self, obj: Mapping[str, Any]) -> None: ...

    def modified(self, obj: Mapping[str, Any]) -> None: ...

    def deleted(self, obj: Mapping[str, Any]) -> None:
        """`obj` is the last state (a watch event), or only its metadata (gone from a list)."""
        ...

    def relisted(self, resource_version: int) -> None:
        """A full list has been delivered (the handler's state now mirrors the server's)."""
        ...


RECONNECT = Backoff(0.5, 15.0)  # between failed list/watch attempts
GONE_KEPT = 10_000  # deleted keys remembered against late folds (`Informer.gone`)


@dataclass(frozen=True, slots=True)
class Held:
    rv: int
    uid: str


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    """List and watch `path` into `handler`; `run` until cancelled. See the module docstring."""

    def __init__(
        self,
        path: str,
        handler: Handler,
        client: Lister | None = None,
        *,
        connect: Callable[[], Awaitable[Lister]] | None = None,
        disconnect: Callable[[Lister], Awaitable[None]] | None = None,
        params: Mapping[str, str] | None = None,
        page_size: int = 500,
        deliver_chunk: int = 100,
        watch_timeout: int = 300,
        relist_period: float | None = None,
        backoff: Backoff = RECONNECT,
        on_error: Callable[[BaseException], None] | None = None,
        name: str = "",
    ) -> None:
        self.path = path
        self.handler = handler
        self._client = client
        self._connect = connect
        self._disconnect = disconnect
        self.params = dict(params or {})
        self.page_size = page_size
        self.deliver_chunk = deliver_chunk  # objects of a page folded in between yields
        self.watch_timeout = watch_timeout
        self.relist_period = relist_period
        self.backoff = backoff
        self._on_error = on_error
        self.name = name or path
        self.held: dict[tuple[str, str], Held] = {}
        # the last deleted version of each key (oldest first, at most GONE_KEPT): a write of
        # ours answered after the deletion reached us must not bring the object back
        self.gone: dict[tuple[str, str], Held] = {}
        self.synced = asyncio.Event()
        self.relists = 0

    # ---- ordering --------------------------------------------------------------------------

    def hold(self, namespace: str, name: str, uid: str, resource_version: object) -> bool:
        """Record a version a write of ours returned; True when it is newer than the one held
        (the caller then stores it itself: no handler is called)."""
        key, rv = (namespace, name), parse_rv(resource_version)
        have = self.held.get(key) or self.gone.get(key)
        if have is not None and rv and have.rv >= rv:
            return False  # resourceVersions are etcd's one revision: older whatever the uid
        self.held[key] = Held(rv, uid)
        self.gone.pop(key, None)
        return True

    def _gone(self, key: tuple[str, str], have: Held, rv: int) -> None:
        self.gone.pop(key, None)
        self.gone[key] = Held(max(rv, have.rv), have.uid)
        while len(self.gone) > GONE_KEPT:
            del self.gone[next(iter(self.gone))]

    def offer(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Deliver one event unless a newer version is held; True when it was delivered."""
        meta = obj.get("metadata") or {}
        key, rv = _key(meta), parse_rv(meta.get("resourceVersion"))
        have = self.held.get(key)
        if kind == DELETED:
            if have is None:
                return False
            if rv and have.rv > rv:
                return False  # a newer version is held: this deletion is stale
            del self.held[key]
            self._gone(key, have, rv)
            self.handler.deleted(obj)
            return True
        if have is not None and rv and have.rv >= rv:
            return False
        gone = self.gone.get(key) if have is None else None
        if gone is not None and rv and gone.rv >= rv:
            return False  # a write of ours answered after its deletion reached us
        uid = str(meta.get("uid") or "")
        if have is not None and have.uid != uid:
            # the name now belongs to another object: the one held was deleted meanwhile
            del self.held[key]
            self.handler.deleted(_stub(key, have, rv))
            have = None
        self.held[key] = Held(rv, uid)
        self.gone.pop(key, None)
        if have is None:
            self.handler.added(obj)
        else:
            self.handler.modified(obj)
        return True

    async def _deliver_page(self, items: list[JSON], listed: set[tuple[str, str]]) -> None:
        """Deliver one page of a list; `listed` collects the keys seen so far. The loop is
        yielded every `deliver_chunk` objects: folding in 500 bindings takes tens of
        milliseconds, in which the next page's request goes out, its answer is read and
        other tasks run."""
        for i, obj in enumerate(items, 1):
            listed.add(_key(obj.get("metadata") or {}))
            self.offer(MODIFIED, obj)
            if not i % self.deliver_chunk:
                await asyncio.sleep(0)
        await asyncio.sleep(0)  # yield between pages: never hog the loop

    def _finish_list(self, listed: set[tuple[str, str]], list_rv: int) -> None:
        """The list is complete: what is held but was not listed has been deleted meanwhile."""
        for key, have in list(self.held.items()):
            if key not in listed and (not list_rv or not have.rv or have.rv <= list_rv):
                del self.held[key]
                self._gone(key, have, list_rv)
                self.handler.deleted(_stub(key, have, list_rv))
        self.relists += 1
        self.synced.set()
        self.handler.relisted(list_rv)

    # ---- I/O -------------------------------------------------------------------------------

    async def list(self, client: Lister) -> tuple[set[tuple[str, str]], str]:
        """List every object page by page (`limit`/`continue`), delivering each page as it
        arrives; the keys listed and the list's resourceVersion.

        A page is folded in and dropped while the next is fetched, never more: holding a
        whole list of raw objects (100,000 bindings) would cost the controller more memory
        than everything it keeps of them, and Python keeps a process's peak heap for good.
        The next page is asked for before this one is folded in, so that the server's time
        serving it and ours decoding and indexing this one overlap (a list of 200 pages
        otherwise waits on both in turn: docs/benchmarks.md, issue 37's third pass).
        """
        listed: set[tuple[str, str]] = set()
        params = {**self.params, "limit": str(self.page_size)}
        fetch = asyncio.ensure_future(client.get(self.path, params))
        try:
            while True:
                doc = await fetch
                meta = doc.get("metadata") or {}
                token = meta.get("continue")
                if token:
                    params = {**params, "continue": str(token)}
                    fetch = asyncio.ensure_future(client.get(self.path, params))
                    await asyncio.sleep(0)  # the request goes out before this page is indexed
                await self._deliver_page(doc.pop("items", None) or [], listed)
                if not token:
                    return listed, str(meta.get("resourceVersion") or "")
        finally:
            fetch.cancel()  # a page failed or the list was cancelled: no fetch left behind

    async def relist(self, client: Lister | None = None) -> str:
        """List in full and deliver it; returns the list's resourceVersion.

        A list cut short (an expired continue token) is started again; what its pages
        delivered stands (each object only ever moves to a newer version), and deletions are
        only inferred from a complete list.
        """
        client = client or self._client
        assert client is not None, "run() connects before relisting"
        started = time.perf_counter()
        for _attempt in range(5):
            try:
                listed, rv = await self.list(client)
                break
            except Gone:  # a continue token expired mid-list
                log.info("list expired while paging; listing again", extra={"path": self.name})
        else:
            raise RuntimeError(f"could not list {self.name} (continue tokens kept expiring)")
        self._finish_list(listed, parse_rv(rv))
        # when a (re)start's lists end: what a slow cold start is explained with
        log.info(
            "listed",
            extra={
                "path": self.name,
                "objects": len(listed),
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return rv

    async def _watch(self, client: Lister, rv: str) -> str:
        """Follow the watch from `rv` until the server ends it; the last version seen."""
        path = self.path
        if self.params:
            path += "?" + "&".join(f"{k}={v}" for k, v in self.params.items())
        async for kind, obj in client.watch(path, rv, timeout_seconds=self.watch_timeout):
            meta = obj.get("metadata") or {}
            new_rv = str(meta.get("resourceVersion") or rv)
            if kind in (ADDED, MODIFIED, DELETED):
                self.offer(kind, obj)
            rv = new_rv  # BOOKMARK only moves the version on
        return rv

    async def run(self) -> None:
        """List and watch until cancelled; errors are logged (and reported), never raised."""
        attempt = 0
        while True:
            client: Lister | None = None
            try:
                client = await self._connect() if self._connect is not None else self._client
                if client is None:
                    raise RuntimeError(f"{self.name}: no client to list with")
                rv = await self.relist(client)
                attempt = 0
                await self._follow(client, rv)
            except asyncio.CancelledError:
                raise
            except _Relist:
                continue
            except Gone:
                log.info("watch expired; listing again", extra={"path": self.name})
                continue
            except Exception as e:
                if self._on_error is not None:
                    self._on_error(e)
                log.warning(
                    "list/watch failed; listing again", extra={"path": self.name, "error": str(e)}
                )
            finally:
                if client is not None and self._disconnect is not None:
                    await self._disconnect(client)
            await asyncio.sleep(self.backoff.delay(attempt))  # reconnect backoff
            attempt += 1

    async def _follow(self, client: Lister, rv: str) -> None:
        """Watch from `rv`, resuming when the server ends a watch, until the relist period."""
        loop = asyncio.get_running_loop()
        until = None if self.relist_period is None else loop.time() + self.relist_period
        while until is None or loop.time() < until:
            if until is None:
                rv = await self._watch(client, rv)
                continue
            try:
                async with asyncio.timeout_at(until):
                    rv = await self._watch(client, rv)
            except TimeoutError:
                break
        raise _Relist()


class _Relist(Gone):
    """The relist period has passed: list again (handled like 410 Gone)."""

    def __init__(self) -> None:
        super().__init__(410, "Relist", "periodic relist")


def _stub(key: tuple[str, str], have: Held, rv: int) -> JSON:
    """The metadata of an object gone from a list (all a handler gets of it)."""
    return {
        "metadata": {
            "namespace": key[0],
            "name": key[1],
            "uid": have.uid,
            "resourceVersion": str(rv),
        }
    }
