"""A Pull-mode member's guard, carried there by Karmada: a Work on karmada-apiserver (I/O).

A Pull-mode member (`Cluster.spec.syncMode: Pull`) gives the controller no endpoint and no
credentials. Its karmada-agent applies, in the member, the Works of the member's execution
namespace `karmada-es-<cluster>` and reflects each applied object's status into its Work
(`status.manifestStatuses[].status`: Karmada's default interpreter reflects a ResourceQuota's
whole status, `hard` and `used`). So such a member's guard is a Work carrying the same guard
ResourceQuota a Push member gets (`guard_keeper.guard_body`), named
`karmadaquota-guard-<namespace>-<quota>` (hashed past 253 characters), labelled as ours and
created with Karmada's `karmada.io/execution-controller` finalizer, as Karmada's own
controllers create Works: a Work is gone only once the agent has removed its ResourceQuota
from the member, so a Work not found holds nothing there.

**What the member may enforce.** The reflected status is what the member's quota controller
had written when the agent last looked: after a raise and then a lowering it may still show a
value older than both, while the member enforces the raise. So every write carries a
revision, in the manifest's `hard` under `quota.karmada.io/guard-revision` (an integer: no pod
or claim is ever charged it, no quota evaluator matches the name), which the member's quota
controller copies into `status.hard` with the rest. The keeper sees the Work as the
ResourceQuota the member may enforce (`as_quota`): the manifest's spec, and as `status.hard`
the reflected one when it reflects the Work's own revision; else, per name, the largest of
the reflection and of every write sent since the revision it reflects (this process's writes;
when they are not all known — a new leader — the quota's whole hard). A lowering is thus
confirmed (`guard_keeper.confirmed`) only once the agent reflects that very write, and Σ ≤ hard
holds over Push and Pull members alike. A disconnected agent confirms nothing: the member keeps
its share and the increases elsewhere wait, as for a Push member whose quota controller stopped.

Requests, on karmada-apiserver with the controller's own identity: works get, create, update,
delete in `karmada-es-*`, by name. No list or watch: a Work another writer deleted or changed
is found by the keeper's next read (`GuardKeeper.reread_period`) and put back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.guard_keeper import GuardError, delete_options, hashed
from karmadaquota.controller.guards import guarded_names
from karmadaquota.kube.client import JSON, Api, KubeError, NotFound
from karmadaquota.quantity import Quantity, QuantityError

EXECUTION_PREFIX = "karmada-es-"
WORKS = "/apis/work.karmada.io/v1alpha1"
# Karmada's execution controller removes it once the manifests are deleted from the member
EXECUTION_FINALIZER = "karmada.io/execution-controller"
REVISION = "quota.karmada.io/guard-revision"
_NAME_PREFIX = "karmadaquota-guard-"


def work_name(namespace: str, quota: str) -> str:
    """The guard Work's name: `karmadaquota-guard-<namespace>-<quota>` (hashed past 253)."""
    return hashed(f"{_NAME_PREFIX}{namespace}-{quota}", 253)


def work_path(cluster: str, name: str | None = None) -> str:
    base = f"{WORKS}/namespaces/{EXECUTION_PREFIX}{cluster}/works"
    return base if name is None else f"{base}/{name}"


@dataclass(frozen=True)
class Sent:
    """One write of a guard Work, recorded before it is sent (its answer may be lost)."""

    revision: int
    hard: Mapping[str, str]  # the manifest's spec.hard, revision left out
    created: bool  # a create: the member held nothing of ours before it


def _manifest(work: Mapping[str, Any]) -> Mapping[str, Any]:
    manifests = ((work.get("spec") or {}).get("workload") or {}).get("manifests") or [{}]
    first = manifests[0]
    return first if isinstance(first, Mapping) else {}


def _reflected(work: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ResourceQuota's status as karmada-agent last reflected it ({}: not yet)."""
    for entry in (work.get("status") or {}).get("manifestStatuses") or []:
        if (entry.get("identifier") or {}).get("kind") == "ResourceQuota":
            status = entry.get("status")
            return status if isinstance(status, Mapping) else {}
    return {}


def _revision(raw: Any) -> int | None:
    try:
        return None if raw is None else int(str(raw))
    except ValueError:
        return None


def _since(
    revision: int | None, seen: int | None, sent: Sequence[Sent]
) -> list[Mapping[str, str]] | None:
    """The hards written after the reflected revision `seen`, up to the Work's own
    `revision`; None when they are not all known (not written by this process)."""
    revisions = [s.revision for s in sent]
    if revision not in revisions:
        return None
    end = len(revisions) - 1 - revisions[::-1].index(revision)
    if seen in revisions[:end]:
        start = revisions.index(seen) + 1
    else:  # back to the create of this Work, before which the member held nothing of ours
        creates = [i for i in range(end + 1) if sent[i].created]
        if not creates:
            return None
        start = creates[-1]
    return [s.hard for s in sent[start : end + 1]]


def _largest(hards: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per name, the largest quantity any of `hards` gives (as written)."""
    out: dict[str, tuple[int, str]] = {}
    for hard in hards:
        for name, value in hard.items():
            try:
                nanos = Quantity.parse(str(value)).nanos
            except QuantityError:
                continue
            if name not in out or nanos > out[name][0]:
                out[str(name)] = (nanos, str(value))
    return {n: v for n, (_, v) in out.items()}


def revisions(work: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The Work's revision, and the one its reflected status shows (None: none)."""
    spec = _manifest(work).get("spec") or {}
    return (
        _revision((spec.get("hard") or {}).get(REVISION)),
        _revision((_reflected(work).get("hard") or {}).get(REVISION)),
    )


def enforced(work: Mapping[str, Any]) -> bool:
    """The reflected status shows the Work's own revision: the member enforces its spec."""
    revision, seen = revisions(work)
    return revision is not None and seen == revision


def as_quota(work: Mapping[str, Any], sent: Sequence[Sent], ceiling: Mapping[str, str]) -> JSON:
    """The guard Work as the ResourceQuota the member may enforce (see the module docstring):
    the Work's metadata, the manifest's spec, and a `status.hard` bounding every value the
    member's quota controller may have taken from the Work. `ceiling`: the quota's whole
    hard, for writes not known here."""
    spec = dict(_manifest(work).get("spec") or {})
    spec["hard"] = {n: v for n, v in (spec.get("hard") or {}).items() if n != REVISION}
    reflected = {n: v for n, v in (_reflected(work).get("hard") or {}).items() if n != REVISION}
    revision, seen = revisions(work)
    if enforced(work):
        bound = reflected  # it reflects this very write: what the member enforces
    else:
        since = _since(revision, seen, sent)
        bound = _largest([reflected, ceiling] if since is None else [reflected, *since])
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": dict(work.get("metadata") or {}),
        "spec": spec,
        "status": {"hard": bound},
    }


def applied_problem(work: Mapping[str, Any]) -> str:
    """Why Karmada says it did not apply the Work in the member ("": it did not say so)."""
    for c in (work.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Applied" and c.get("status") == "False":
            return f"Karmada did not apply it: {c.get('reason', '')}: {c.get('message', '')}"
    return ""


class GuardWorks:
    """One Pull-mode member's guards, as Works in its execution namespace (a
    `guard_keeper.GuardTarget`)."""

    def __init__(self, api: Api, cluster: str) -> None:
        self.api = api
        self.cluster = cluster
        # (namespace, quota) -> the writes since the last one the member was seen to enforce
        self._sent: dict[tuple[str, str], list[Sent]] = {}
        self._problems: dict[tuple[str, str], str] = {}  # as Karmada said at the last read
        self._last = 0

    def where(self, quota: KarmadaQuota) -> str:
        meta = quota.metadata
        return (
            f"Work {EXECUTION_PREFIX}{self.cluster}/{work_name(meta.namespace, meta.name)} "
            "on karmada-apiserver"
        )

    def route(self, namespace: str, quota: str) -> str:
        return (
            f"through Karmada (Work {EXECUTION_PREFIX}{self.cluster}/"
            f"{work_name(namespace, quota)}, applied by karmada-agent)"
        )

    def problem(self, namespace: str, quota: str) -> str:
        why = self._problems.get((namespace, quota), "")
        return f"its guard's Work: {why}" if why else ""

    async def reset(self) -> None:
        """karmada-apiserver's client is the controller's own: nothing to reset."""

    def _view(self, quota: KarmadaQuota, work: JSON) -> JSON:
        key = (quota.metadata.namespace, quota.metadata.name)
        self._problems[key] = applied_problem(work)
        names = set(guarded_names(quota.spec.hard))
        ceiling = {n: str(v) for n, v in quota.spec.hard.items() if n in names}
        view = as_quota(work, self._sent.get(key, ()), ceiling)
        if enforced(work):  # the writes before it can no longer come back
            revision = revisions(work)[0]
            self._sent[key] = [s for s in self._sent.get(key, ()) if s.revision == revision]
        return view

    async def read(self, quota: KarmadaQuota) -> JSON | None:
        meta = quota.metadata
        try:
            work = await self.api.get(work_path(self.cluster, work_name(meta.namespace, meta.name)))
        except NotFound:
            self._problems.pop((meta.namespace, meta.name), None)
            return None
        return self._view(quota, work)

    def replacing(self, quota: KarmadaQuota, current: JSON | None, body: JSON) -> JSON:
        """The Work carrying `body` with a new revision; over `current` (a Work seen through
        `as_quota`) its metadata kept: resourceVersion, finalizers, others' labels."""
        self._last = max(self._last + 1, int(time.time() * 1000))  # unique across leaders
        spec = body["spec"]
        manifest = {**body, "spec": {**spec, "hard": {**spec["hard"], REVISION: str(self._last)}}}
        labels = body["metadata"]["labels"]
        if current is None:
            meta: JSON = {
                "name": work_name(quota.metadata.namespace, quota.metadata.name),
                "namespace": f"{EXECUTION_PREFIX}{self.cluster}",
                "labels": dict(labels),
                "annotations": dict(body["metadata"].get("annotations") or {}),
                "finalizers": [EXECUTION_FINALIZER],
            }
        else:
            meta = {**current["metadata"]}
            meta["labels"] = {**(meta.get("labels") or {}), **labels}
        return {
            "apiVersion": "work.karmada.io/v1alpha1",
            "kind": "Work",
            "metadata": meta,
            "spec": {"workload": {"manifests": [manifest]}},
        }

    async def send(self, quota: KarmadaQuota, obj: JSON) -> JSON:
        meta = quota.metadata
        key = (meta.namespace, meta.name)
        hard = dict(_manifest(obj)["spec"]["hard"])
        revision = _revision(hard.pop(REVISION))
        assert revision is not None
        entry = Sent(revision, hard, created=not obj["metadata"].get("resourceVersion"))
        self._sent.setdefault(key, []).append(entry)
        try:
            if entry.created:
                work = await self.api.request("POST", work_path(self.cluster), obj)
            else:
                path = work_path(self.cluster, work_name(meta.namespace, meta.name))
                work = await self.api.request("PUT", path, obj)
        except KubeError:
            self._sent[key].remove(entry)  # refused (a create of a Work that exists): not written
            raise
        return self._view(quota, work)

    async def delete(self, quota: KarmadaQuota, current: JSON) -> None:
        """Delete the Work; GuardError while karmada-agent has yet to remove the guard from
        the member (the Work holds Karmada's finalizer until then)."""
        meta = quota.metadata
        path = work_path(self.cluster, work_name(meta.namespace, meta.name))
        with contextlib.suppress(NotFound):
            answer = await self.api.request("DELETE", path, delete_options(current))
            if (answer.get("metadata") or {}).get("finalizers"):
                raise GuardError(
                    f"karmada-agent has not yet removed the guard from {self.cluster} "
                    f"({self.where(quota)} is being deleted)"
                )
        self._sent.pop((meta.namespace, meta.name), None)
        self._problems.pop((meta.namespace, meta.name), None)
