"""One fake API server for unit tests: KarmadaQuotas and ResourceBindings with etcd's rules.

Every write takes the next value of one resourceVersion counter (as etcd's revision), a status
PUT is a compare-and-swap on the object's resourceVersion (409 Conflict when it moved, 404 when
the object is gone), a status JSON patch applies to whatever is stored (422 when one of its
tests fails), and reads return copies, so a test can never share state with the code
under test by accident. `interfere(n)` makes another writer win the next `n` status writes, the
way a second webhook replica or the controller does.

`FakeStore` is one webhook replica's view of it: the batcher's QuotaBackend, with its own cache
that only its own reads and writes refresh (another replica's cache is another FakeStore).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonpointer

from karmadaquota.api import KarmadaQuota
from karmadaquota.kube.client import JSON, Conflict, KubeError, NotFound
from karmadaquota.kube.quotas import QuotaStore
from tests import conftest

Key = tuple[str, str]  # (namespace, name)


class FakeApiServer:
    """The objects, the resourceVersion counter and compare-and-swap writes."""

    def __init__(self) -> None:
        self.rv = 0
        self.quotas: dict[Key, JSON] = {}
        self.bindings: dict[str, JSON] = {}  # uid -> ResourceBinding
        self.puts = 0  # status writes that succeeded
        self.conflicts = 0  # status writes refused with 409
        self.patches = 0  # JSON patches of a status applied
        self.rejected_patches = 0  # JSON patches refused with 422 (a test failed)
        self._interfere = 0

    def _stamp(self, obj: JSON) -> JSON:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    # ---- what a test does directly (another client) -----------------------------------------

    def add_quota(self, doc: JSON) -> JSON:
        """Create (or replace) a quota; the stored copy gets the next resourceVersion."""
        obj = copy.deepcopy(doc)
        self.rv = max(self.rv, int(obj["metadata"].get("resourceVersion") or 0))
        self.quotas[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = self._stamp(obj)
        return copy.deepcopy(obj)

    def quota(self, namespace: str, name: str) -> KarmadaQuota:
        return KarmadaQuota.model_validate(self.quotas[(namespace, name)])

    def bump(self, namespace: str, name: str, mutate: Callable[[JSON], None]) -> None:
        """Another writer changes the quota (new resourceVersion); no cache is told."""
        doc = self.quotas[(namespace, name)]
        mutate(doc)
        self._stamp(doc)

    def interfere(self, writes: int) -> None:
        """Another writer updates the quota just before each of the next `writes` status PUTs."""
        self._interfere = writes

    def put_binding(self, doc: JSON) -> JSON:
        """Create or update a binding (generation +1 on update), as the API server stores it."""
        obj = copy.deepcopy(doc)
        meta = obj["metadata"]
        old = self.bindings.get(meta["uid"])
        meta["generation"] = old["metadata"]["generation"] + 1 if old else 1
        self.bindings[meta["uid"]] = self._stamp(obj)
        return copy.deepcopy(obj)

    def delete_binding(self, uid: str) -> None:
        self.bindings.pop(uid, None)
        self.rv += 1

    # ---- the API ----------------------------------------------------------------------------

    async def get_quota(self, namespace: str, name: str) -> JSON:
        try:
            return copy.deepcopy(self.quotas[(namespace, name)])
        except KeyError:
            raise NotFound(404, "NotFound", f"{name} not found") from None

    async def put_quota_status(self, body: JSON) -> JSON:
        """PUT .../karmadaquotas/<name>/status: compare-and-swap on resourceVersion."""
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        current = self.quotas.get(key)
        if current is None:
            raise NotFound(404, "NotFound", f"{key[1]} not found")
        if self._interfere > 0:
            self._interfere -= 1
            self._stamp(current)
        if current["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.puts += 1
        current["status"] = copy.deepcopy(body["status"])
        return copy.deepcopy(self._stamp(current))

    async def patch_quota_status(self, namespace: str, name: str, ops: list[JSON]) -> JSON:
        """PATCH .../karmadaquotas/<name>/status with a JSON patch: applied to the version
        stored now (no resourceVersion), all or nothing; a failed `test` or a missing path is
        422, as the API server answers. Only the status changes (the status subresource)."""
        current = self.quotas.get((namespace, name))
        if current is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        if self._interfere > 0:
            self._interfere -= 1
            self._stamp(current)
        try:
            patch_status(current, ops)
        except KubeError:
            self.rejected_patches += 1
            raise
        self.patches += 1
        return copy.deepcopy(self._stamp(current))


def patch_status(current: JSON, ops: list[JSON]) -> None:
    """A status JSON patch as the API server applies it: to the object stored now, all or
    nothing (a failed `test` or a missing path is 422), only the status kept (the status
    subresource). Changes `current` in place; the caller stamps its new resourceVersion."""
    try:
        patched = jsonpatch.apply_patch(current, ops)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
        raise KubeError(422, "", str(e)) from None
    current["status"] = copy.deepcopy(patched.get("status", {}))


class FakeStore:
    """One webhook replica: the batcher's QuotaBackend over a (possibly shared) FakeApiServer.

    `before_put` runs before each status write and may change the stored object (simulating
    another writer) so that the write loses the compare-and-swap.
    """

    def __init__(self, *docs: JSON, api: FakeApiServer | None = None) -> None:
        self.api = api or FakeApiServer()
        self.cached: dict[Key, KarmadaQuota] = {}
        self.before_put: Callable[[FakeStore, JSON], None] | None = None
        self.put_delay = 0.0
        # status writes of this replica in flight per quota, and the most ever at once for one
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
        """Create the quota and let this replica's cache see it."""
        self.update(KarmadaQuota.model_validate(self.api.add_quota(doc)))

    def refresh(self) -> None:
        """The cache catches up with the server (its watch delivered everything)."""
        self.cached = {k: KarmadaQuota.model_validate(v) for k, v in self.api.quotas.items()}

    def stored(self, namespace: str = "ns", name: str = "team-a") -> KarmadaQuota:
        return self.api.quota(namespace, name)

    def bump(self, namespace: str, name: str, mutate: Callable[[JSON], None]) -> None:
        self.api.bump(namespace, name, mutate)

    def quota_store(self) -> QuotaStore:
        """A synced QuotaStore holding what this replica's cache holds (what a Webhook reads)."""
        quotas = QuotaStore(None)
        for q in self.cached.values():
            quotas.fold_quota(q)
        quotas.synced.set()
        return quotas

    # QuotaBackend
    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        return [q for (ns, _), q in sorted(self.cached.items()) if ns == namespace]

    def update(self, quota: KarmadaQuota) -> None:
        key = (quota.metadata.namespace, quota.metadata.name)
        have = self.cached.get(key)
        # a cache never goes back to an older version
        if have is None or int(have.metadata.resourceVersion) <= int(
            quota.metadata.resourceVersion
        ):
            self.cached[key] = quota

    async def get(self, namespace: str, name: str) -> JSON:
        return await self.api.get_quota(namespace, name)

    async def put_status(self, quota: JSON) -> JSON:
        key = (quota["metadata"]["namespace"], quota["metadata"]["name"])
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[key])
        try:
            if self.put_delay:
                await asyncio.sleep(self.put_delay)  # models write latency, not synchronisation
            if self.before_put is not None:
                self.before_put(self, quota)
            return await self.api.put_quota_status(quota)
        finally:
            self.in_flight[key] -= 1


def quota_doc(
    name: str = "team-a",
    namespace: str = "ns",
    hard: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
    scope_selector: dict[str, Any] | None = None,
    rv: int = 1,
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
    )
