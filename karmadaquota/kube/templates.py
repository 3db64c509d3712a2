"""One replica of each resource template, as the webhook and the controller charge a binding.

A binding is charged with its template's pod (`karmadaquota.pod_template`): the webhook when it
admits it, the controller when it counts it, so both must find the same template. The store
watches the kinds whose pod template `pod_template` knows, one informer each, and keeps per
template only its `PodCharge` at its last few resourceVersions and its newest replicas (never
the template itself): a binding with no replicas of its own runs the template's in every
member (`charge.unrevised`).

A kind the platform team declared (`karmadaquota.kinds`) is watched and read like the built-in
ones, its pod and replicas at its declared paths.

A binding names the template version it was built from (`spec.resource.resourceVersion`). The
store answers with the most one replica costs over that version and every newer one it holds:
Karmada renders the template as it is now on its next sync of the binding, so a binding is
charged for what its members may run before and after that sync. A template whose pod grows is
admitted at the template (`webhook.template`), which reserves the growth
until the binding's update carries it. When the store holds no version as new as the one a
binding names, it says "not yet": the webhook then reads the
template (`fetch`, a GET whose answer is kept), the controller waits for the watch (`lookup`
returns MISSING; `on_change` says when to look again). A template that does not exist charges
the binding from its own fields (`pod_template` never lowers a charge).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from karmadaquota import pod_template
from karmadaquota.api import BindingResource
from karmadaquota.kinds import BUILTIN, Kinds
from karmadaquota.kube import paths
from karmadaquota.kube.client import NotFound
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.versions import parse_rv
from karmadaquota.pod_template import PodCharge, TemplateKey
from karmadaquota.quantity import QuantityError

log = logging.getLogger("karmadaquota.templates")

# (group, kind) -> the API path of its collection
_COLLECTIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("apps", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("apps", "StatefulSet"): ("/apis/apps/v1", "statefulsets"),
    ("apps", "ReplicaSet"): ("/apis/apps/v1", "replicasets"),
    ("batch", "Job"): ("/apis/batch/v1", "jobs"),
    ("", "Pod"): ("/api/v1", "pods"),
    ("", "ReplicationController"): ("/api/v1", "replicationcontrollers"),
}
assert set(_COLLECTIONS) == set(pod_template.POD_SPEC_PATHS)
_KEEP = 3  # pods kept per template: the one a binding names and those after it
_GONE_FOR = 600.0  # seconds a deleted template's versions are kept (its binding goes first)
_GONE_MAX = 1024  # deleted templates remembered before the old ones are forgotten


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
Key = TemplateKey


@dataclass(frozen=True, slots=True)
class _Version:
    """A run of template versions whose pod is the same (status writes, labels: most of a
    template's versions change nothing of its pod), from `rv` to `last`."""

    rv: int
    pod: PodCharge | None  # None: the quantities were unreadable
    last: int = 0


def collections(kinds: Kinds) -> dict[tuple[str, str], tuple[str, str]]:
    """(group, kind) -> the API path of its collection: the built-in kinds with a known pod and
    the declared ones (kinds.Declared)."""
    declared = {
        key: (f"/apis/{d.api_version}" if d.group else f"/api/{d.api_version}", d.resource)
        for key, d in kinds.declared.items()
    }
    return {**_COLLECTIONS, **declared}


class TemplateStore:
    """PodCharges of the templates of every kind with a known pod (module docstring)."""

    def __init__(
        self, client: Lister | None = None, *, page_size: int = 500, kinds: Kinds = BUILTIN
    ) -> None:
        self.client = client
        # the kinds a binding is charged pods for: the store watches the declared ones too
        self.kinds = kinds
        self._collections = collections(kinds)
        self._by_key: dict[Key, list[_Version]] = {}
        # seen deleted, when (its versions are kept a while: its binding lingers until Karmada's
        # garbage collector deletes it, and the name may be re-created meanwhile)
        self._gone: dict[Key, float] = {}
        self._uids: dict[Key, str] = {}
        # the newest version's replicas (resourceVersion, replicas): Karmada renders them into
        # every member while the binding has none (charge.unrevised)
        self._replicas: dict[Key, tuple[int, int]] = {}
        self._listeners: list[Callable[[Key, bool], None]] = []
        self.informers = [
            Informer(
                f"{base}/{plural}",
                _Feed(self, group, kind),
                client,
                page_size=page_size,
                name=f"{plural}.{group}" if group else plural,
            )
            for (group, kind), (base, plural) in self._collections.items()
        ]
        self.reads = 0  # GETs `fetch` made

    def __len__(self) -> int:
        return len(self._by_key)

    def on_change(self, listener: Callable[[Key, bool], None]) -> None:
        """Call `listener(key, pod_changed)` whenever a template's version arrives or goes;
        `pod_changed`: its newest pod is not what it was (requests, limits, or its replicas)."""
        self._listeners.append(listener)

    def put(self, key: Key, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        rv = parse_rv(meta.get("resourceVersion"))
        try:
            pod = pod_template.of_template(obj, self.kinds.pod_paths(key[0], key[1]))
        except QuantityError as e:
            log.warning("template quantities unreadable", extra={"template": key, "error": str(e)})
            pod = None
        self._gone.pop(key, None)
        self._uids[key] = str(meta.get("uid") or "")
        newest = self._replicas.get(key)
        scaled = False
        if newest is None or rv >= newest[0]:
            paths = self.kinds.pod_paths(key[0], key[1])
            replicas = pod_template.replicas_of(obj, paths[1] if paths else None) or 0
            scaled = newest is not None and newest[1] != replicas
            self._replicas[key] = (rv, replicas)
        held = self._by_key.get(key, [])
        before = held[0].pod if held else MISSING
        if held and held[0].pod == pod and rv >= held[0].rv:
            versions = [_Version(held[0].rv, pod, max(rv, held[0].last)), *held[1:]]
        else:
            versions = [v for v in held if v.rv != rv]
            versions.append(_Version(rv, pod, rv))
            versions.sort(key=lambda v: v.rv, reverse=True)
        self._by_key[key] = versions[:_KEEP]
        self._changed(key, scaled or self._by_key[key][0].pod != before)

    def drop(self, key: Key) -> None:
        """The template is deleted: its versions still charge the binding that lingers."""
        now = time.monotonic()
        self._gone[key] = now
        if len(self._gone) > _GONE_MAX:
            for old in [k for k, t in self._gone.items() if t < now - _GONE_FOR]:
                del self._gone[old]
                self._by_key.pop(old, None)
                self._uids.pop(old, None)
                self._replicas.pop(old, None)
        self._changed(key, False)

    def replaced(self, key: Key, uid: str) -> bool:
        """Whether a template created as `uid` takes the name of one deleted lately (or not yet
        seen deleted): Karmada may render it through the old one's lingering binding."""
        return key in self._gone or self._uids.get(key, uid) != uid

    def _changed(self, key: Key, pod_changed: bool) -> None:
        for listener in self._listeners:
            listener(key, pod_changed)

    def key_of(self, ref: BindingResource, namespace: str) -> Key | None:
        """The template a binding is charged with: one of a known kind whose version it names."""
        group = ref.apiVersion.rpartition("/")[0]
        if not ref.resourceVersion or (group, ref.kind) not in self._collections:
            return None
        return (group, ref.kind, ref.namespace or namespace, ref.name)

    def resolve(self, ref: BindingResource, namespace: str) -> PodCharge | Key | None:
        """`lookup` for a binding's template, its key while the store does not hold the
        version; None (charge the binding's own fields) for a kind without a known pod, a
        binding that names no template version (not built by Karmada's detector, e.g. by
        hand) or a template seen deleted."""
        key = self.key_of(ref, namespace)
        if key is None:
            return None
        found = self.lookup(key, ref.resourceVersion)
        if isinstance(found, _Missing):
            return key
        return found

    def lookup(self, key: Key, resource_version: str) -> PodCharge | _Missing | None:
        """The most one replica costs over the template versions from the one a binding names
        on (`pod_template.most`), with at least the template's newest replicas:
        what Karmada may run for it now and after its next sync; MISSING when the store holds
        no such version (yet)."""
        versions = self._by_key.get(key)
        want = parse_rv(resource_version)
        if not versions or versions[0].last < want:
            # a deleted template's binding is charged from its own fields; else not yet
            return None if key in self._gone else MISSING
        pod = pod_template.most([v.pod for v in versions if v.last >= want])
        newest = self._replicas.get(key, (0, 0))[1]
        return replace(pod, replicas=newest) if pod is not None and newest > pod.replicas else pod

    async def fetch(
        self, ref: BindingResource, namespace: str, fresh: bool = False
    ) -> PodCharge | None:
        """`lookup`, reading the template when the store holds no such version (`fresh`:
        always, so that its newest replicas are the API server's): None when the kind has no
        known pod or the template does not exist (charged from the binding's own fields).
        Raises KubeError when the template cannot be read."""
        found = self.resolve(ref, namespace)
        if found is None or (isinstance(found, PodCharge) and not fresh):
            return found
        key = self.key_of(ref, namespace)
        assert key is not None and self.client is not None
        base, plural = self._collections[key[:2]]
        path = f"{base}/namespaces/{paths.namespace_name(key[2])}/{plural}/"
        self.reads += 1
        try:
            obj = await self.client.get(path + paths.object_name(key[3]))
        except NotFound:
            self.drop(key)
            gone = self.lookup(key, ref.resourceVersion)
            return None if isinstance(gone, _Missing) else gone
        self.put(key, obj)
        held = self.lookup(key, ref.resourceVersion)
        # a template older than the binding names cannot be: the binding was built from it
        return None if isinstance(held, _Missing) else held


class _Feed:
    """One kind's informer events into the store."""

    def __init__(self, store: TemplateStore, group: str, kind: str) -> None:
        self.store, self.group, self.kind = store, group, kind

    def _key(self, obj: Mapping[str, Any]) -> Key:
        meta = obj.get("metadata") or {}
        return (self.group, self.kind, str(meta.get("namespace", "")), str(meta.get("name", "")))

    def added(self, obj: Mapping[str, Any]) -> None:
        self.store.put(self._key(obj), obj)

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        self.store.drop(self._key(obj))

    def relisted(self, resource_version: int) -> None:
        pass
