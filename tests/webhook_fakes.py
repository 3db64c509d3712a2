"""In-memory fakes for webhook unit tests: an API server store with real CAS semantics."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.kube.client import JSON, Conflict, NotFound


def quota_doc(
    name: str = "team-a",
    namespace: str = "ns",
    hard: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
    scope_selector: dict[str, Any] | None = None,
    rv: int = 1,
) -> JSON:
    hard = hard if hard is not None else {"requests.cpu": "10", "pods": "100"}
    spec: dict[str, Any] = {"hard": hard}
    if scope_selector:
        spec["scopeSelector"] = scope_selector
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv), "uid": name},
        "spec": spec,
        "status": {"used": used if used is not None else {k: "0" for k in hard}},
    }


def binding_doc(
    name: str,
    replicas: int = 1,
    cpu: str | None = "1",
    namespace: str = "ns",
    uid: str | None = None,
    generation: int = 1,
    clusters: list[tuple[str, int]] | None = None,
) -> JSON:
    req = {"cpu": cpu} if cpu is not None else {}
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "generation": generation,
        },
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": req},
            "clusters": [{"name": c, "replicas": r} for c, r in (clusters or [])],
        },
    }


def binding(name: str, **kw: Any) -> ResourceBinding:
    return ResourceBinding.model_validate(binding_doc(name, **kw))


class FakeStore:
    """The batcher's QuotaBackend with resourceVersion compare-and-swap, like the API server.

    `before_put` runs before each status write and may change the stored object (simulating
    another writer) so that the write loses the compare-and-swap.
    """

    def __init__(self, *docs: JSON) -> None:
        self.objects: dict[tuple[str, str], JSON] = {}
        self.cached: dict[tuple[str, str], KarmadaQuota] = {}
        self.puts = 0
        self.conflicts = 0
        self.before_put: Callable[[FakeStore, JSON], None] | None = None
        self.put_delay = 0.0
        for d in docs:
            self.seed(d)

    def seed(self, doc: JSON) -> None:
        key = (doc["metadata"]["namespace"], doc["metadata"]["name"])
        self.objects[key] = copy.deepcopy(doc)
        self.cached[key] = KarmadaQuota.model_validate(doc)

    def stored(self, namespace: str = "ns", name: str = "team-a") -> KarmadaQuota:
        return KarmadaQuota.model_validate(self.objects[(namespace, name)])

    def bump(self, namespace: str, name: str, mutate: Callable[[JSON], None]) -> None:
        """Another writer changes the object (new resourceVersion); the cache is not told."""
        doc = self.objects[(namespace, name)]
        mutate(doc)
        doc["metadata"]["resourceVersion"] = str(int(doc["metadata"]["resourceVersion"]) + 1)

    # QuotaBackend
    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        return [q for (ns, _), q in sorted(self.cached.items()) if ns == namespace]

    def update(self, quota: KarmadaQuota) -> None:
        self.cached[(quota.metadata.namespace, quota.metadata.name)] = quota

    async def get(self, namespace: str, name: str) -> JSON:
        try:
            return copy.deepcopy(self.objects[(namespace, name)])
        except KeyError:
            raise NotFound(404, "NotFound", f"{name} not found") from None

    async def put_status(self, quota: JSON) -> JSON:
        if self.put_delay:
            await asyncio.sleep(self.put_delay)  # models write latency, not synchronisation
        key = (quota["metadata"]["namespace"], quota["metadata"]["name"])
        if self.before_put is not None:
            self.before_put(self, quota)
        if key not in self.objects:
            raise NotFound(404, "NotFound", "gone")
        current = self.objects[key]
        if current["metadata"]["resourceVersion"] != quota["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.puts += 1
        current["status"] = copy.deepcopy(quota["status"])
        current["metadata"]["resourceVersion"] = str(
            int(current["metadata"]["resourceVersion"]) + 1
        )
        return copy.deepcopy(current)
