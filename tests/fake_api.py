"""The fake API server of the unit tests: every kind the code touches on karmada-apiserver,
with etcd's rules, behind the same interface as `KubeClient` (the `Api` and `Lister` protocols),
so that the real informers, controller, leader election, cache and waker run against it.

- One object store keyed by path (`/apis/<group>/<version>[/namespaces/<ns>]/<plural>/<name>`,
  or `/api/v1/...`): no kind is registered, whatever a test writes exists.
- One resourceVersion counter (etcd's revision): every write takes the next value.
- PUT is a compare-and-swap on the body's resourceVersion (409 `Conflict` when it moved, 404
  `NotFound` when the object is gone); so is a merge patch carrying one. A JSON patch applies to
  whatever is stored, all or nothing (422 when one of its tests fails). Writes to `/status`
  change only the status, other writes never change a status; a spec change bumps the
  generation. POST creates (409 when the name is taken, 404 when the namespace does not exist).
  DELETE honours its preconditions (uid, resourceVersion: 409 when they do not hold); a
  DELETE of an object holding finalizers only sets its deletionTimestamp; removing the last
  finalizer of such an object deletes it.
- LIST and WATCH take a `labelSelector` (`k=v`, `k!=v`, `k`, `!k`, comma-separated); an
  object that stops matching is a DELETED event to a selecting watch, as the watch cache
  sends it.
- LIST pages with `limit`/`continue`, every page from the first page's revision (the list's
  resourceVersion); a continue token from before the compaction point answers 410.
- WATCH from a resourceVersion replays the collection's events after it, then follows new ones;
  410 `Gone` when that version is older than the compaction point (`compact()`, which also
  ends every open watch with 410, the way a watch cache that fell behind does). A watch ends
  on its timeout or when the test says (`end_watches()`); `hold(plural)` keeps a kind's events
  from the watches until `release(plural)` (a slow watch; some at a time, or lost);
  `bookmark()` sends every watch a BOOKMARK at the current version. `drained()` and
  `watching(plural)` say when the watches have delivered everything; `watched` logs each
  watch's path and version.
- Reads return copies, so a test never shares state with the code under test by accident.

What the test does to it directly (`add_quota`, `put_binding`, `create`, `update`, `delete`,
`bump`, ...) goes through the same store and the same watch events, as another client would.
`intercept(hook, times, match)` runs a hook before each of the next writes to a matching path
(by default status writes: another writer getting in first, or a slow answer); `interfere(n)`
makes another writer win the next `n` quota status writes; `refuse` fails requests by path,
`fail` all of them, `before_read` runs before each read and may fail it (a page, a watch),
`webhook` stands in for a validating webhook. `calls` counts requests by verb and kind
("GET karmadaquotas": re-reads), `sent` and `writes` log the writes sent and those that
succeeded. A server-side apply (PATCH, `APPLY_PATCH`) creates what is missing and merges its
fields into what exists.

`HttpFront` serves it over HTTP (the install command's tests). `Replica` is one webhook
replica over it: the product's QuotaBackend and QuotaStore, with the faults a test adds to its
status writes.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer
from aiohttp import web

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube import paths
from karmadaquota.kube.client import (
    APPLY_PATCH,
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    Body,
    Conflict,
    Gone,
    KubeError,
    NotFound,
)
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.webhook.backend import KubeQuotaBackend
from tests import conftest

Key = tuple[str, str]  # (namespace, name)
Kind = tuple[str, str]  # (group path, plural), e.g. ("/api/v1", "namespaces")
# the kinds whose status is a subresource: a write of the object keeps the stored status
STATUS_SUBRESOURCE = {
    "karmadaquotas",
    "resourcebindings",
    "deployments",
    "statefulsets",
    "jobs",
    "resourcequotas",
    "works",
}
DELETED_AT = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class Ref:
    """A request path taken apart."""

    group: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    namespace: str = ""  # "" for a cluster-scoped object, or a list across namespaces
    name: str = ""  # "" for the collection
    sub: str = ""  # "status", or ""

    @property
    def kind(self) -> Kind:
        return (self.group, self.plural)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


def parse(path: str) -> Ref:
    segs = path.split("?", 1)[0].strip("/").split("/")
    if segs[0] == "api":
        group, rest = f"/api/{segs[1]}", segs[2:]
    else:
        group, rest = f"/apis/{segs[1]}/{segs[2]}", segs[3:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    rest = [*rest, "", ""]
    return Ref(group, rest[0], namespace, rest[1], rest[2])


QUOTAS: Kind = parse(paths.quotas()).kind
BINDINGS: Kind = parse(paths.bindings()).kind


class _End:
    """What a watch queue carries to end the watch (`gone`: with 410)."""

    def __init__(self, gone: bool) -> None:
        self.gone = gone


def selected(obj: Mapping[str, Any], selector: str) -> bool:
    """The object's labels match a label selector (equality and existence terms)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            ok = labels.get(k) != v
        elif "=" in term:
            k, v = term.split("=", 1)
            ok = labels.get(k.rstrip("=")) == v
        elif term.startswith("!"):
            ok = term[1:] not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


@dataclass
class _Watch:
    kind: Kind
    namespace: str
    queue: asyncio.Queue[tuple[str, JSON] | _End] = field(default_factory=asyncio.Queue)
    selector: str = ""

    def put(self, event: str, obj: JSON) -> None:
        if self.selector and not selected(obj, self.selector):
            if event != "MODIFIED":
                return
            event = "DELETED"  # it left the selection (the informer drops what it does not hold)
        self.queue.put_nowait((event, copy.deepcopy(obj)))


Hook = Callable[["Ref", Body], Awaitable[None] | None]  # the status written, the body


class FakeApiServer:
    """The objects, the resourceVersion counter, compare-and-swap writes, lists and watches."""

    def __init__(self, rv: int = 0) -> None:
        self.rv = rv
        self.store: dict[Kind, dict[Key, JSON]] = {}
        self.log: dict[Kind, list[tuple[int, str, JSON]]] = {}  # the events of each kind
        self.compacted = 0  # a watch from an older version answers 410 Gone
        self.watches: list[_Watch] = []
        self.held: dict[Kind, list[tuple[str, JSON]]] = {}  # events kept from the watches
        self.calls: Counter[str] = Counter()  # "GET resourcebindings", "LIST karmadaquotas", ...
        self.puts = 0  # quota status PUTs that succeeded
        self.conflicts = 0  # quota status writes refused with 409
        self.patches = 0  # JSON patches of a quota status applied
        self.rejected_patches = 0  # JSON patches of a quota status refused with 422
        self.fail: BaseException | None = None  # every request raises this (a network error)
        self.refuse: dict[str, BaseException] = {}  # a request whose path has the key raises
        self.sent: list[tuple[str, str, Body]] = []  # (method, path, body) of every write sent
        self.writes: list[tuple[str, str, Body]] = []  # ... of every write that succeeded
        # the writes sent through `request` that lost (409, or 422 for a JSON patch's test):
        # (method, path, the resourceVersion stored when they lost)
        self.lost: list[tuple[str, str, int]] = []
        # runs before a create or an update of an object (not its status), and may refuse it
        # by raising: a validating webhook
        self.webhook: Callable[[str, Ref, JSON], None] | None = None
        # runs before each read ("GET", "LIST" or "WATCH", what is read, the request's
        # parameters) and may raise: a page that fails, a watch refused
        self.before_read: Callable[[str, Ref, Mapping[str, str]], None] | None = None
        self.watched: list[tuple[str, str]] = []  # (path, resourceVersion) of every watch
        self._interfere = 0
        self._hooks: list[tuple[str, Hook]] = []
        self._uids = itertools.count(1)
        # what a list saw at its revision, for its next pages: (kind, namespace, rv) -> items
        self._snapshots: dict[tuple[Kind, str, int], list[JSON]] = {}

    # ---- the store and its events -----------------------------------------------------------

    def objects(self, kind: Kind) -> dict[Key, JSON]:
        """The stored objects of a kind, by (namespace, name) (the live dict: read only)."""
        return self.store.setdefault(kind, {})

    @property
    def quotas(self) -> dict[Key, JSON]:
        return self.objects(QUOTAS)

    @property
    def bindings(self) -> dict[Key, JSON]:
        return self.objects(BINDINGS)

    def _commit(self, ref: Ref, obj: JSON, event: str) -> JSON:
        """Store (or, for DELETED, drop) `obj` at the next resourceVersion and tell the
        watches; returns a copy of what was stored."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        objects = self.objects(ref.kind)
        if event == "DELETED":
            objects.pop(ref.key, None)
        else:
            objects[ref.key] = obj
        self.log.setdefault(ref.kind, []).append((self.rv, event, copy.deepcopy(obj)))
        if ref.kind in self.held:
            self.held[ref.kind].append((event, copy.deepcopy(obj)))
        else:
            self._send(ref.kind, event, obj)
        return copy.deepcopy(obj)

    def _send(self, kind: Kind, event: str, obj: JSON) -> None:
        ns = str(obj["metadata"].get("namespace") or "")
        for w in self.watches:
            if w.kind == kind and w.namespace in ("", ns):
                w.put(event, obj)

    def _stored(self, ref: Ref) -> JSON:
        obj = self.objects(ref.kind).get(ref.key)
        if obj is None:
            raise NotFound(404, "NotFound", f'{ref.plural} "{ref.name}" not found')
        return obj

    # ---- what a test does directly (another client) -----------------------------------------

    def create(self, path: str, doc: JSON) -> JSON:
        """Create `doc` in the collection at `path` (its namespace taken from the doc)."""
        ref = parse(path)
        meta = doc.setdefault("metadata", {})
        ns = str(meta.get("namespace") or ref.namespace)
        return self._create(Ref(ref.group, ref.plural, ns, str(meta["name"])), doc)

    def _create(self, ref: Ref, doc: JSON) -> JSON:
        if ref.key in self.objects(ref.kind):
            raise Conflict(409, "AlreadyExists", f'{ref.plural} "{ref.name}" already exists')
        obj = copy.deepcopy(doc)
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        return self._commit(ref, obj, "ADDED")

    def update(self, path: str, mutate: Callable[[JSON], None], *, generation: bool = True) -> JSON:
        """Another writer changes the stored object (any part of it); a new resourceVersion,
        generation +1 when the spec changed (`generation=False`: not even then, a write the
        real server never makes, for a test proving the spec is not read again)."""
        ref = parse(path)
        current = self._stored(ref)
        obj = copy.deepcopy(current)
        mutate(obj)
        return self._replace(ref, current, obj, generation)

    def _replace(self, ref: Ref, current: JSON, obj: JSON, generation: bool = True) -> JSON:
        if generation and obj.get("spec") != current.get("spec"):
            obj["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._commit(ref, obj, "DELETED")
        return self._commit(ref, obj, "MODIFIED")

    def delete(self, path: str) -> JSON:
        """Delete the object; one holding finalizers only gets its deletionTimestamp."""
        ref = parse(path)
        current = self._stored(ref)
        obj = copy.deepcopy(current)
        if current["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = DELETED_AT
            return self._commit(ref, obj, "MODIFIED")
        return self._commit(ref, obj, "DELETED")

    def get_object(self, path: str) -> JSON:
        return copy.deepcopy(self._stored(parse(path)))

    def compact(self) -> None:
        """Compact the event history: every open watch ends with 410 Gone, and so does a watch
        from any version before now (the informers list again)."""
        self.compacted = self.rv
        self.log.clear()
        self._snapshots.clear()
        for w in self.watches:
            w.queue.put_nowait(_End(gone=True))

    def bookmark(self) -> None:
        """Every open watch gets a BOOKMARK at the current resourceVersion (what the API
        server sends a watch that allows them, so it resumes from there)."""
        for w in self.watches:
            w.queue.put_nowait(("BOOKMARK", {"metadata": {"resourceVersion": str(self.rv)}}))

    def end_watches(self) -> None:
        """Every open watch ends (as on its timeout): the informers resume from their version."""
        for w in self.watches:
            w.queue.put_nowait(_End(gone=False))

    def hold(self, plural: str) -> None:
        """Keep the events of a kind from the watches (a slow watch) until `release`."""
        for kind in self._kinds(plural):
            self.held.setdefault(kind, [])

    def release(self, plural: str, deliver: bool = True, count: int | None = None) -> None:
        """The watches get the events held back (`deliver=False`: they are lost, as by a
        watch that broke, and only a relist finds out); `count`: only the first so many of
        them, the rest stay held."""
        for kind in self._kinds(plural):
            held = self.held.pop(kind, [])
            now, later = (held, []) if count is None else (held[:count], held[count:])
            if later:
                self.held[kind] = later
            for event, obj in now:
                if deliver:
                    self._send(kind, event, obj)

    def holding(self, plural: str) -> int:
        """How many events of the kind are held back."""
        return sum(len(self.held.get(k, [])) for k in self._kinds(plural))

    def _kinds(self, plural: str) -> list[Kind]:
        known = {QUOTAS, BINDINGS, *self.store}
        return [k for k in known if k[1] == plural]

    def watching(self, plural: str) -> bool:
        """A watch of the kind is open and has delivered every event sent to it."""
        mine = [w for w in self.watches if w.kind[1] == plural]
        return bool(mine) and all(w.queue.empty() for w in mine)

    def drained(self) -> bool:
        """Every open watch has delivered every event sent to it."""
        return all(w.queue.empty() for w in self.watches)

    def intercept(self, hook: Hook, times: int = 1, match: str = "/status") -> None:
        """Run `hook(ref, body)` before each of the next `times` writes sent through `request`
        whose path contains `match` (by default status writes), e.g. another writer getting in
        first, or a slow answer."""
        self._hooks = [(match, hook)] * times

    def interfere(self, writes: int) -> None:
        """Another writer updates the quota just before each of the next `writes` status
        writes of a quota."""
        self._interfere = writes

    # quotas and bindings, the kinds most tests write

    def add_quota(self, doc: JSON) -> JSON:
        """Create (or replace) a quota as `doc` has it (status included)."""
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        self.rv = max(self.rv, int(doc["metadata"].get("resourceVersion") or 0))
        obj = copy.deepcopy(doc)
        if (ns, name) in self.quotas:

            def replace(o: JSON) -> None:
                uid = o["metadata"]["uid"]
                o.clear()
                o.update(obj)
                o["metadata"]["uid"] = uid

            return self.update(paths.quota(ns, name), replace)
        generation = obj["metadata"].get("generation")
        created = self.create(paths.quotas(ns), obj)
        if generation:  # as given (a quota some edits old)
            return self.update(
                paths.quota(ns, created["metadata"]["name"]),
                lambda o: o["metadata"].update(generation=generation),
            )
        return created

    def quota(self, namespace: str, name: str) -> KarmadaQuota:
        return KarmadaQuota.model_validate(self.quotas[(namespace, name)])

    def bump(self, namespace: str, name: str, mutate: Callable[[JSON], None]) -> JSON:
        """Another writer changes the quota (new resourceVersion); watches see it."""
        return self.update(paths.quota(namespace, name), mutate)

    def put_binding(self, doc: JSON) -> JSON:
        """Create or update a binding (generation +1 on a spec change), as the API server
        stores what admission allowed."""
        meta = doc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if (ns, name) not in self.bindings:
            return self.create(paths.bindings(ns), doc)
        keep = {k: v for k, v in doc.items() if k != "metadata"}

        def replace(o: JSON) -> None:
            for k in [k for k in o if k not in ("metadata", "status")]:
                del o[k]
            o.update(copy.deepcopy(keep))
            for k, v in meta.items():
                if k not in ("generation", "resourceVersion", "uid"):
                    o["metadata"][k] = copy.deepcopy(v)

        return self.update(f"{paths.bindings(ns)}/{name}", replace)

    def delete_binding(self, namespace: str, name: str) -> JSON:
        return self.delete(f"{paths.bindings(namespace)}/{name}")

    # ---- the API: KubeClient's interface ----------------------------------------------------

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    async def close(self) -> None:
        """A client's close (a member watch closes its client after each connection)."""

    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON:
        return await self.request("PATCH", path, body, timeout=timeout, content_type=MERGE_PATCH)

    async def request(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        await asyncio.sleep(0)  # a request yields to the loop, as a real one does
        if self.fail is not None:
            raise self.fail
        ref = parse(path)
        for needle, error in self.refuse.items():
            if needle in path:
                raise error
        if method != "GET" and self._hooks and self._hooks[0][0] in path:
            done = self._hooks.pop(0)[1](ref, copy.deepcopy(body) if body is not None else {})
            if inspect.isawaitable(done):
                await done
        try:
            return self.handle(method, ref, body, params or {}, content_type)
        except KubeError as e:
            if e.status in (409, 422):  # a compare-and-swap lost: against which version
                stored = self.objects(ref.kind).get(ref.key) or {"metadata": {}}
                version = int(stored["metadata"].get("resourceVersion") or 0)
                self.lost.append((method, path, version))
            raise

    def handle(
        self, method: str, ref: Ref, body: Body | None, params: Mapping[str, str], content_type: str
    ) -> JSON:
        """One request, at once (no await: nothing else runs in between)."""
        if method == "GET" and self.before_read is not None:
            self.before_read("GET" if ref.name else "LIST", ref, params)
        if method == "GET" and not ref.name:
            self.calls[f"LIST {ref.plural}"] += 1
            return self._list(ref, params)
        self.calls[f"{method} {ref.plural}{'/' + ref.sub if ref.sub else ''}"] += 1
        if method == "GET":
            return copy.deepcopy(self._stored(ref))
        write = (method, self._path(ref) + ("/" + ref.sub if ref.sub else ""), body)
        self.sent.append(write)
        done = self._write(method, ref, body, content_type)
        self.writes.append(write)
        return done

    def _write(self, method: str, ref: Ref, body: Body | None, content_type: str) -> JSON:
        if method == "POST":
            assert isinstance(body, dict)
            return self._post(ref, body)
        if content_type == APPLY_PATCH and ref.key not in self.objects(ref.kind):
            assert isinstance(body, dict)
            return self._post(ref, {**body, "metadata": {**body["metadata"], "name": ref.name}})
        if method == "DELETE":
            pre = (body.get("preconditions") or {}) if isinstance(body, dict) else {}
            meta = self._stored(ref)["metadata"]
            for k in ("uid", "resourceVersion"):
                if pre.get(k) and pre[k] != meta.get(k):
                    raise Conflict(409, "Conflict", f"Precondition failed: {k} in precondition")
            return self.delete(self._path(ref))
        assert body is not None and method in ("PUT", "PATCH"), method
        current = self._stored(ref)
        quota_status = ref.kind == QUOTAS and ref.sub == "status"
        if quota_status and self._interfere > 0:
            self._interfere -= 1
            self.update(self._path(ref), lambda _: None)
            current = self._stored(ref)
        try:
            obj = self._written(method, ref, current, body, content_type)
        except Conflict:
            self.conflicts += quota_status
            raise
        except KubeError:
            self.rejected_patches += quota_status
            raise
        if ref.sub == "status":
            obj = {**copy.deepcopy(current), "status": obj.get("status", {})}
        else:
            if ref.plural in STATUS_SUBRESOURCE and "status" in current:
                obj["status"] = copy.deepcopy(current["status"])
            if self.webhook is not None:
                self.webhook(method, ref, obj)
        if quota_status:
            if method == "PUT":
                self.puts += 1
            else:
                self.patches += 1
        return self._replace(ref, current, obj)

    def _path(self, ref: Ref) -> str:
        ns = f"/namespaces/{ref.namespace}" if ref.namespace else ""
        return f"{ref.group}{ns}/{ref.plural}/{ref.name}"

    def _written(self, method: str, ref: Ref, current: JSON, body: Body, content_type: str) -> JSON:
        """The object a PUT or PATCH makes of `current` (not yet stored)."""
        if isinstance(body, list):  # a JSON patch: to what is stored, all or nothing
            assert method == "PATCH" and content_type == JSON_PATCH
            try:
                return dict(jsonpatch.apply_patch(current, body))
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
                raise KubeError(422, "Invalid", str(e)) from None
        pre = body.get("metadata") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"].get("uid"):
            raise Conflict(409, "Conflict", f'{ref.plural} "{ref.name}": uid precondition failed')
        precondition = pre.get("resourceVersion")
        if precondition and precondition != current["metadata"]["resourceVersion"]:
            raise Conflict(
                409,
                "Conflict",
                f'{ref.plural} "{ref.name}": the object has been '
                "modified; please apply your changes to the latest version",
            )
        if method == "PUT":
            obj = copy.deepcopy(body)
        else:  # server-side apply of an existing object: its fields merged in, as a merge patch
            assert content_type in (MERGE_PATCH, APPLY_PATCH), content_type
            obj = merge_patch(current, body)
        meta = obj.setdefault("metadata", {})
        for k in ("uid", "namespace", "name", "creationTimestamp", "deletionTimestamp"):
            if k in current["metadata"]:
                meta[k] = current["metadata"][k]
        meta["generation"] = current["metadata"].get("generation", 1)
        return obj

    def _post(self, ref: Ref, body: JSON) -> JSON:
        meta = body.setdefault("metadata", {})
        ns = str(meta.get("namespace") or ref.namespace)
        if ns and ("", ns) not in self.objects(("/api/v1", "namespaces")):
            raise NotFound(404, "NotFound", f'namespaces "{ns}" not found')
        name = str(meta.get("name") or f"{meta.get('generateName', '')}{next(self._uids)}")
        doc = {**body, "metadata": {**meta, "namespace": ns, "name": name}}
        if ref.plural in STATUS_SUBRESOURCE:
            doc.pop("status", None)  # a create never writes the status subresource
        if not ns:
            doc["metadata"].pop("namespace")
        if self.webhook is not None:
            self.webhook("POST", Ref(ref.group, ref.plural, ns, name), doc)
        return self._create(Ref(ref.group, ref.plural, ns, name), doc)

    def _list(self, ref: Ref, params: Mapping[str, str]) -> JSON:
        """One page of a list. As etcd does it, every page comes from the same revision (the
        first page's, the list's resourceVersion): what is written meanwhile is for the watch
        from that version to deliver. A continue token older than the compaction point has
        expired (410)."""
        token = params.get("continue")
        if token:
            rv, start = (int(x) for x in token.split(":"))
            items = self._snapshots.get((ref.kind, ref.namespace, rv))
            if items is None or rv < self.compacted:  # compacted since
                raise Gone(410, "Expired", "the continue token has expired")
        else:
            rv, start = self.rv, 0
            objects = self.objects(ref.kind)
            keys = sorted(k for k in objects if ref.namespace in ("", k[0]))
            selector = params.get("labelSelector") or ""
            items = [copy.deepcopy(objects[k]) for k in keys if selected(objects[k], selector)]
            self._snapshots[(ref.kind, ref.namespace, rv)] = items
        limit = int(params.get("limit") or 0) or len(items) or 1
        meta: JSON = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = f"{rv}:{start + limit}"
        page = [copy.deepcopy(o) for o in items[start : start + limit]]
        return {"kind": "List", "metadata": meta, "items": page}

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        """Events of the collection after `resource_version`, then new ones as they happen."""
        ref = parse(path)
        self.calls[f"WATCH {ref.plural}"] += 1
        self.watched.append((path, resource_version))
        query = dict(p.split("=", 1) for p in path.partition("?")[2].split("&") if "=" in p)
        if self.fail is not None:  # the connection is refused, as every request is
            raise self.fail
        if self.before_read is not None:
            self.before_read("WATCH", ref, query)
        since = int(resource_version or self.rv)
        if since < self.compacted:
            raise Gone(410, "Expired", f"too old resource version: {since} ({self.compacted})")
        w = _Watch(ref.kind, ref.namespace, selector=query.get("labelSelector", ""))
        for rv, event, obj in self.log.get(ref.kind, []):
            if rv > since and ref.namespace in ("", obj["metadata"].get("namespace")):
                w.put(event, obj)
        self.watches.append(w)
        deadline = asyncio.get_running_loop().time() + timeout_seconds
        try:
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        item = await w.queue.get()
                except TimeoutError:
                    return
                if isinstance(item, _End):
                    if item.gone:
                        raise Gone(410, "Expired", "the watch's resource version was compacted")
                    return
                yield item
        finally:
            self.watches.remove(w)


class HttpFront:
    """A FakeApiServer over HTTP, for code that brings its own HTTP client (the install
    command's KubeClient and its kubeconfig): each request is logged, then answered by
    `api.request` (its body decoded; an error as the API server's Status)."""

    def __init__(self, api: FakeApiServer) -> None:
        self.api = api
        self.requests: list[web.Request] = []  # every request, in order (headers, query)
        self.bodies: dict[str, Any] = {}  # path -> the last body written to it

    @property
    def log(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests]

    def app(self, *routes: web.RouteDef) -> web.Application:
        """The server's routes after `routes` (e.g. another server's on the same port)."""
        app = web.Application()
        app.add_routes(routes)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request)
        raw = await request.read()
        body = json.loads(raw) if raw else None
        if body is not None and request.method != "GET":
            self.bodies[request.path] = body
        try:
            got = await self.api.request(
                request.method,
                request.path,
                body,
                dict(request.query),
                content_type=request.content_type,
            )
        except KubeError as e:
            status = {"kind": "Status", "status": "Failure", "code": e.status}
            return web.json_response(
                {**status, "reason": e.reason, "message": e.message}, status=e.status
            )
        return web.json_response(got)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a JSON merge patch applied to a copy of `target`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Replica(KubeQuotaBackend):
    """One webhook replica as `webhook.handlers.assemble` wires it: the product's QuotaBackend
    over a (possibly shared) FakeApiServer, reading the replica's own QuotaStore (whose informer
    orders versions: a cache never goes back). Only this replica's reads and writes refresh
    that store, until `refresh` (its watch delivered everything); another replica is another
    Replica over the same server.

    The faults a test may add to its status writes: `before_put` runs before each (and may
    change the stored object: another writer, so that the write loses the compare-and-swap),
    `put_delay` is write latency; `in_flight`/`max_in_flight` count this replica's writes
    per quota at once.
    """

    def __init__(self, *docs: JSON, api: FakeApiServer | None = None) -> None:
        self.api = api or FakeApiServer()
        self.store = QuotaStore(self.api)
        self.store.synced.set()
        super().__init__(self.api, self.store)
        self.before_put: Callable[[Replica, JSON], None] | None = None
        self.put_delay = 0.0
        self.in_flight: dict[Key, int] = {}
        self.max_in_flight = 0
        for d in docs:
            self.seed(d)

    @property
    def objects(self) -> dict[Key, JSON]:
        return self.api.quotas

    @property
    def puts(self) -> int:
        return self.api.puts

    @property
    def conflicts(self) -> int:
        return self.api.conflicts

    def seed(self, doc: JSON) -> None:
        """Create the quota and let this replica's store see it."""
        self.store.fold(self.api.add_quota(doc))

    def refresh(self) -> None:
        """The store catches up with the server (its watch delivered everything)."""
        informer = self.store.informer
        for obj in self.api.quotas.values():
            informer.offer("MODIFIED", obj)
        for key in set(informer.held) - set(self.api.quotas):
            meta = {"namespace": key[0], "name": key[1], "resourceVersion": str(self.api.rv)}
            informer.offer("DELETED", {"metadata": meta})

    def stored(self, namespace: str = "ns", name: str = "team-a") -> KarmadaQuota:
        return self.api.quota(namespace, name)

    def bump(self, namespace: str, name: str, mutate: Callable[[JSON], None]) -> None:
        self.api.bump(namespace, name, mutate)

    def quota_store(self) -> QuotaStore:
        """The replica's QuotaStore (what its Webhook reads; a miss is read live)."""
        return self.store

    async def put_status(self, quota: JSON) -> JSON:
        key = (quota["metadata"]["namespace"], quota["metadata"]["name"])
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[key])
        try:
            if self.put_delay:
                await asyncio.sleep(self.put_delay)  # models write latency, not synchronisation
            if self.before_put is not None:
                self.before_put(self, quota)
            return await super().put_status(quota)
        finally:
            self.in_flight[key] -= 1


def quota_doc(
    name: str = "team-a",
    namespace: str = "ns",
    hard: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
    scope_selector: dict[str, Any] | None = None,
    rv: int = 1,
    member_enforcement: str | None = None,
) -> JSON:
    """conftest.quota_doc with the webhook tests' defaults (namespace ns, 10 cpu, 100 pods)."""
    return conftest.quota_doc(
        name,
        hard if hard is not None else {"requests.cpu": "10", "pods": "100"},
        used,
        scope_selector=scope_selector,
        namespace=namespace,
        rv=rv,
        uid=name,
        member_enforcement=member_enforcement,
    )
