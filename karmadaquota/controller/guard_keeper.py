"""Member guards' I/O: one ResourceQuota per member, moved as `controller.guards` decides.

The leader keeps, for every KarmadaQuota with `memberEnforcement: ResourceQuota`, a
ResourceQuota named `guard_name(quota)` in the quota's namespace of every member cluster,
labelled `quota.karmada.io/guard-of=<quota>` and `app.kubernetes.io/managed-by=karmadaquota`.
A ResourceQuota without that label (one Karmada propagated, one a user made) is never touched;
one holding our name is reported instead.

What a guard *may hold* is, per name, the larger of its `spec.hard` and its `status.hard`: the
member's admission enforces `status.hard`, which its quota controller copies from the spec a
moment after each write. A lowering counts as done only once `status.hard` shows it
(`confirm`); until then the old value is assumed. A write whose outcome is unknown (timeout,
connection lost) is assumed to have been applied if it raised, not if it lowered. A member that
fails is unreachable for its backoff (`dirty.RateLimiter` per member: `retry` seconds, doubling
to `max_retry`, on the event loop's clock): it keeps the guard it has, and `guards.desired`
plans around it.

The keeper is also the controller's guard job (`attach`): its own queue (`queue`, per
namespace, fed by each recompute on the leader) moves the guards of the namespace's quotas,
writes the quota's finalizer first, and removes the guards, then the finalizer, where
`memberEnforcement` is off or the quota is being deleted. It retries on that queue alone: at
the time the first member that is down may be tried again, or after the namespace's own
backoff for a finalizer not written; never by marking the recompute.

Guards are watched (`controller.guard_watch`: one informer per member on our labels): a guard
another writer deleted or changed is seen within the watch's latency (`observed`) and the
namespace's guards are synced at once (`on_change`), which puts it back as the share policy
wants; while that watch is listed, the keeper reads guards from it rather than re-reading them
every `reread_period`. Where the member allows it, a ValidatingAdmissionPolicy refuses such
changes in the first place (`controller.guard_policy`).

A guard is only as exact as the member's own quota, and Kubernetes' quota controller may
recount a guard short of the pods that exist (`guards.undercounted`): the member then admits
that many pods past it until its next recount. The keeper compares each guard's `status.used`
with the member's pods not being deleted, as its pod watch has them, and restores a count that
stays short for `mend_delay` (`_mend`): a guard watch event that lowers `status.used` brings the
namespace's guards to the job at once.

Requests to a member, with the credentials Karmada holds for it (the Cluster's secret):
resourcequotas get, create, update, delete in the quota's namespace, and patch of their
`status` (a count restored); resourcequotas list and
watch by our labels; the guards' ValidatingAdmissionPolicy and its binding get, create,
update; a SelfSubjectReview. Nothing else (the pod watch in `controller.members` lists and
watches pods). A Pull-mode member is sent nothing: its guard is a Work on karmada-apiserver
that karmada-agent applies there (`controller.guard_works`, the `carried` target).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import aiohttp

from karmadaquota import resources, scopes
from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import guards as gd
from karmadaquota.controller.dirty import DirtyQueue, RateLimiter
from karmadaquota.controller.guard_watch import GuardWatches
from karmadaquota.controller.members import Members, MemberWatch, describe_error
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.pods import is_pod_observable
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, MERGE_PATCH, Api, Conflict, KubeError, NotFound
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.kube.retry import Backoff, retry_on_conflict
from karmadaquota.kube.versions import parse_rv
from karmadaquota.quantity import Format, Quantity, QuantityError

log = logging.getLogger("karmadaquota.controller.guards")
T = TypeVar("T")

GUARD_LABEL = "quota.karmada.io/guard-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "karmadaquota"
QUOTA_UID_ANNOTATION = "quota.karmada.io/quota-uid"
# on a KarmadaQuota while guards of it may exist in some member: removed once all are deleted
FINALIZER = "quota.karmada.io/member-guards"
# how long a plan of lowerings alone, within the hard, waits (guards.py): a storm's admissions
# and placements then move no guard, where they wrote and confirmed one twice per create
TIGHTEN_DELAY = 2.0
# how long a guard's status.used may count short of the member's pods before the keeper
# restores it (`GuardKeeper._mend`): both watches have caught up by then
MEND_DELAY = 0.25
_PREFIX = "karmadaquota-"


def hashed(text: str, limit: int) -> str:
    """`text`, or past `limit` characters its head and a digest of the whole (names stay
    distinct and within Kubernetes' limits)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{text[: limit - 11].rstrip('.-')}-{digest}"


def guard_name(quota: str) -> str:
    """The guard ResourceQuota's name: `karmadaquota-<quota>` (hashed past 253 characters)."""
    return hashed(_PREFIX + quota, 253)


def label_value(quota: str) -> str:
    """The guard-of label: the quota's name (hashed past 63 characters)."""
    return hashed(quota, 63)


def rq_path(namespace: str, name: str | None = None, subresource: str = "") -> str:
    """A member ResourceQuota's path (its `status` subresource: the member quota's own)."""
    base = f"/api/v1/namespaces/{namespace}/resourcequotas"
    path = base if name is None else f"{base}/{name}"
    return f"{path}/{subresource}" if subresource else path


def _nanos(raw: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, value in raw.items():
        try:
            out[str(name)] = Quantity.parse(str(value)).nanos
        except QuantityError:
            continue
    return out


def _shown(nanos: Mapping[str, int]) -> dict[str, str]:
    """Nano-units as Kubernetes quantities."""
    return resources.format_resource_list(
        {n: Quantity(v, Format.DECIMAL_SI) for n, v in nanos.items()}
    )


def may_hold(obj: Mapping[str, Any] | None) -> dict[str, int]:
    """Per name, the most a guard can let pods use now: max(spec.hard, status.hard)."""
    if obj is None:
        return {}
    spec = _nanos((obj.get("spec") or {}).get("hard"))
    status = _nanos((obj.get("status") or {}).get("hard"))
    return {n: max(spec.get(n, 0), status.get(n, 0)) for n in spec.keys() | status.keys()}


def confirmed(obj: Mapping[str, Any], lowered: Mapping[str, int]) -> bool:
    """The member's quota controller enforces the lowered values (status.hard ≤ them)."""
    status = _nanos((obj.get("status") or {}).get("hard"))
    return all(status.get(n, 0) <= v for n, v in lowered.items())


def is_ours(obj: Mapping[str, Any], quota: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(
        labels.get(GUARD_LABEL) == label_value(quota) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
    )


def guard_body(quota: KarmadaQuota, hard: Mapping[str, int]) -> JSON:
    """The guard ResourceQuota of `quota` with `hard`: the quota's scopes carried over (a
    ResourceQuota supports the same PriorityClass/BestEffort/NotBestEffort scopes)."""
    formats = {}
    for name, value in quota.spec.hard.items():
        try:
            formats[name] = Quantity.parse(str(value)).format
        except QuantityError:
            continue
    rl = {n: Quantity(v, formats.get(n, Format.DECIMAL_SI)) for n, v in hard.items()}
    spec: dict[str, Any] = {"hard": resources.format_resource_list(rl)}
    if quota.spec.scopes:
        spec["scopes"] = list(quota.spec.scopes)
    if quota.spec.scopeSelector is not None and quota.spec.scopeSelector.matchExpressions:
        spec["scopeSelector"] = quota.spec.scopeSelector.model_dump(
            exclude_none=True, exclude_defaults=True
        )
    meta = quota.metadata
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": guard_name(meta.name),
            "namespace": meta.namespace,
            "labels": {GUARD_LABEL: label_value(meta.name), MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {QUOTA_UID_ANNOTATION: meta.uid},
        },
        "spec": spec,
    }


class GuardError(Exception):
    """A guard could not be read or written in one member (it counts as unreachable)."""


class NotOurs(GuardError):
    """Another ResourceQuota holds the guard's name in a member: it is left alone."""


class GuardTarget(Protocol):
    """Where one member's guard is kept, shown to the keeper as a ResourceQuota whose
    `status.hard` is what the member may enforce: on the member's API server (`MemberQuotas`,
    Push mode), or as a Work Karmada applies there (`guard_works.GuardWorks`, Pull mode).
    Which one is I/O only: the keeper plans and orders the writes the same way for both."""

    def where(self, quota: KarmadaQuota) -> str:
        """The guard's object, for messages."""
        ...

    async def read(self, quota: KarmadaQuota) -> JSON | None:
        """The guard as it is now (None: absent), ours or not (`is_ours`)."""
        ...

    def replacing(self, quota: KarmadaQuota, current: JSON | None, body: JSON) -> JSON:
        """What to send so that the guard becomes `body` (`guard_body`) over `current`."""
        ...

    async def send(self, quota: KarmadaQuota, obj: JSON) -> JSON:
        """Create `obj` (no resourceVersion) or replace it (compare-and-swap); the guard as
        written."""
        ...

    async def delete(self, quota: KarmadaQuota, current: JSON) -> None:
        """Delete the guard `current` (its uid a precondition)."""
        ...

    async def reset(self) -> None:
        """A connection failed: the next request starts afresh."""
        ...

    def route(self, namespace: str, quota: str) -> str:
        """How the guard reaches the member, for the quota's `Guarded` condition ("": it is
        written there directly)."""
        ...

    def problem(self, namespace: str, quota: str) -> str:
        """Why the member does not hold the guard as written, as last read ("": nothing
        known against it)."""
        ...


@dataclass(frozen=True)
class MemberQuotas:
    """A Push member's guard: a ResourceQuota on the member's API server, written with the
    credentials Karmada holds for the member."""

    watch: MemberWatch

    def where(self, quota: KarmadaQuota) -> str:
        meta = quota.metadata
        return f"ResourceQuota {meta.namespace}/{guard_name(meta.name)} in {self.watch.name}"

    async def read(self, quota: KarmadaQuota) -> JSON | None:
        meta = quota.metadata
        api = await self.watch.api()
        try:
            return await api.get(rq_path(meta.namespace, guard_name(meta.name)))
        except NotFound:
            return None

    def replacing(self, quota: KarmadaQuota, current: JSON | None, body: JSON) -> JSON:
        if current is None:
            return body
        meta = {**current["metadata"]}
        meta["labels"] = {**(meta.get("labels") or {}), **body["metadata"]["labels"]}
        return {**current, "metadata": meta, "spec": body["spec"]}

    async def send(self, quota: KarmadaQuota, obj: JSON) -> JSON:
        meta = quota.metadata
        api = await self.watch.api()
        if (obj.get("metadata") or {}).get("resourceVersion"):
            return await api.request("PUT", rq_path(meta.namespace, guard_name(meta.name)), obj)
        return await api.request("POST", rq_path(meta.namespace), obj)

    async def mend(self, quota: KarmadaQuota, patch: JSON) -> JSON:
        meta = quota.metadata
        api = await self.watch.api()
        path = rq_path(meta.namespace, guard_name(meta.name), "status")
        return await api.request("PATCH", path, patch, content_type=MERGE_PATCH)

    async def delete(self, quota: KarmadaQuota, current: JSON) -> None:
        meta = quota.metadata
        api = await self.watch.api()
        with contextlib.suppress(NotFound):
            await api.request(
                "DELETE", rq_path(meta.namespace, guard_name(meta.name)), delete_options(current)
            )

    async def reset(self) -> None:
        await self.watch.reset_api()

    def route(self, namespace: str, quota: str) -> str:
        return ""

    def problem(self, namespace: str, quota: str) -> str:
        return ""


def delete_options(current: Mapping[str, Any]) -> JSON:
    """DeleteOptions that delete `current` and nothing made in its place since."""
    options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
    uid = (current.get("metadata") or {}).get("uid")
    if uid:
        options["preconditions"] = {"uid": uid}
    return options


@dataclass(frozen=True)
class _Known:
    hold: dict[str, int]  # what it may hold now; {} when there is no guard
    shown: dict[str, str]  # its spec.hard as written, for the quota's status
    read_at: float
    scoping: tuple[Any, Any] = (None, None)  # its spec.scopes and spec.scopeSelector
    rv: int = 0  # the resourceVersion it was read at (0: unknown); older events are stale
    used: dict[str, int] = field(default_factory=dict)  # its status.used


@dataclass(frozen=True)
class _Intent:
    """What the guard should be as the keeper last wrote or adopted it: anything else the
    watch shows was written by someone else."""

    hard: dict[str, int]
    scoping: tuple[Any, Any] | None  # None: not known in the server's form yet


def scoping(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """What decides which pods a ResourceQuota counts: its scopes and scopeSelector."""
    return (spec.get("scopes") or None, spec.get("scopeSelector") or None)


@dataclass(frozen=True)
class SyncResult:
    changed: bool  # some guard was written (the quota's status should show it)
    retry_at: float | None  # when to try again on the keeper's clock (a member failed), else None


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


class GuardSource(Protocol):
    """What the guard job reads of the controller (`attach`)."""

    def guard_inputs(self, namespace: str, quota: str) -> gd.GuardInputs | None:
        """The last recompute's guard inputs of a quota; None: an invalid spec, leave it."""
        ...

    def may_write(self) -> bool: ...

    def guards_written(self, namespace: str) -> None:
        """Some guard was written: the quota's status should show it (a recompute)."""
        ...


class GuardKeeper:
    """Moves every guard of a quota to what `guards.desired` says, in `guards.transition`'s
    order; forgets nothing it cannot confirm."""

    def __init__(
        self,
        members: Members,
        metrics: ControllerMetrics | None = None,
        *,
        request_timeout: float = 3.0,
        confirm_timeout: float = 5.0,
        poll: float = 0.05,
        retry: float = 2.0,
        max_retry: float = 10.0,
        reread_period: float = 60.0,
        clock: Callable[[], float] = _loop_time,
        watch: bool = False,
        identity: str | None = None,
        protect_period: float = 60.0,
        carried: Callable[[str], GuardTarget] | None = None,
        tighten_delay: float = TIGHTEN_DELAY,
        mend_delay: float = MEND_DELAY,
    ) -> None:
        self.members = members
        # a Pull-mode member's guard, carried by Karmada (`guard_works.GuardWorks` on
        # karmada-apiserver); None: such a member gets no guard
        self._carry = carried
        self._carried: dict[str, GuardTarget] = {}  # member -> its target (they keep state)
        self.metrics = metrics
        self.request_timeout = request_timeout
        self.confirm_timeout = confirm_timeout
        self.poll = poll
        self.retry = retry
        self.reread_period = reread_period
        self.tighten_delay = tighten_delay
        self.mend_delay = mend_delay
        # (ns, quota, member) -> since when its guard's status.used has counted short
        self._short: dict[tuple[str, str, str], float] = {}
        # (ns, quota) -> since when its plan has been lowerings alone within the hard
        self._tightening: dict[tuple[str, str], float] = {}
        self._clock = clock
        self._known: dict[tuple[str, str, str], _Known] = {}  # (ns, quota, member)
        # (ns, quota, member) -> when a ResourceQuota not ours was found holding the guard's name
        self._foreign: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._down: dict[str, float] = {}  # member -> unreachable until this time
        self._backoff = RateLimiter(Backoff(retry, max_retry))  # per member: failures in a row
        self.max_retry = max_retry
        self.errors: dict[str, str] = {}  # member -> why the last request failed
        self._names: dict[tuple[str, str], str] = {}  # (ns, guard's name) -> its quota
        self._intended: dict[tuple[str, str, str], _Intent] = {}  # (ns, quota, member)
        self._diverged: set[tuple[str, str, str]] = set()  # changed by another, not put back
        # the guard job (`attach`): a namespace's guards synced, its retries
        self.queue = DirtyQueue(self._sync_namespace, quiet=0.0, max_delay=0.0, name="guards")
        self._karmada: Api | None = None  # the quotas' API server (finalizers)
        self._quotas: QuotaStore | None = None
        self._controller: GuardSource | None = None
        self._write_timeout = request_timeout
        # a namespace whose guard another writer changed: sync it now (the job's queue)
        self.on_change: Callable[[str], None] = self.queue.mark
        # watch: one informer per member on the guards, and their admission policy kept
        # installed where the member allows it (None: guards are re-read every reread_period)
        self.watches = (
            GuardWatches(self.observed, metrics, identity=identity, period=protect_period)
            if watch
            else None
        )

    # ---- the job ---------------------------------------------------------------------------

    def attach(
        self, api: Api, quotas: QuotaStore, controller: GuardSource, write_timeout: float
    ) -> None:
        """Serve `controller` (the reconciler): `queue` syncs a namespace's guards from the
        quotas in `quotas`, and writes their finalizer through `api`."""
        self._karmada, self._quotas, self._controller = api, quotas, controller
        self._write_timeout = write_timeout

    async def _sync_namespace(self, namespace: str) -> None:
        """Leader: move the member guards of the namespace's quotas; remove them, then the
        finalizer, where memberEnforcement is off or the quota is being deleted. A member that
        failed is retried at the end of its backoff; the others do not wait for it."""
        c, store = self._controller, self._quotas
        if c is None or store is None or not c.may_write():
            return
        for record in store.records(namespace):
            quota = record.quota
            if quota is None:
                continue
            finalizers = list((record.raw.get("metadata") or {}).get("finalizers") or [])
            live = quota.spec.guarded and not quota.metadata.deletionTimestamp
            if not live:
                if FINALIZER not in finalizers:
                    continue
                if await self.remove(quota):
                    others = [f for f in finalizers if f != FINALIZER]
                    if not await self._set_finalizer(record.raw, others):
                        self.queue.retry(namespace)
                else:
                    self.queue.mark_at(
                        namespace, self._next_try(m.name for m in self.members.views())
                    )
                continue
            inputs = c.guard_inputs(namespace, record.name)
            if inputs is None:
                continue  # an invalid spec: the guards stay as they are
            # first the finalizer: a guard must never outlive the quota unnoticed
            if FINALIZER not in finalizers and not await self._set_finalizer(
                record.raw, [*finalizers, FINALIZER]
            ):
                self.queue.retry(namespace)
                continue
            result = await self.sync(quota, inputs, may_write=c.may_write)
            if result.changed:
                c.guards_written(namespace)
            if result.retry_at is not None:
                self.queue.mark_at(namespace, result.retry_at)

    async def _set_finalizer(self, raw: Mapping[str, Any], finalizers: list[str]) -> bool:
        """Write the quota's finalizers, conditional on the version read; False if it lost."""
        assert self._karmada is not None and self._quotas is not None
        meta = raw.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        body = {
            "metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}
        }
        try:
            result = await self._karmada.request(
                "PATCH",
                paths.quota(ns, name),
                body,
                timeout=self._write_timeout,
                content_type="application/merge-patch+json",
            )
        except NotFound:
            return False
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.info(
                "quota finalizer not written; retrying",
                extra={"namespace": ns, "quota": name, "error": str(e)},
            )
            return False
        self._quotas.fold(result)
        log.info(
            "quota finalizer written",
            extra={"namespace": ns, "quota": name, "finalizers": finalizers},
        )
        return True

    # ---- what the status shows -------------------------------------------------------------

    def shown(self, namespace: str, quota: str, member: str) -> Mapping[str, str] | None:
        known = self._known.get((namespace, quota, member))
        return None if known is None or not known.shown else known.shown

    def held(self, namespace: str, quota: str) -> dict[str, int] | None:
        """Σ of what the quota's guards may let pods use now, over every registered member;
        None while some member's guard is not known (a cohort's borrower then uses none of
        this lender's loan in its own guards: controller.loans)."""
        out: dict[str, int] = {}
        for watch in self.members.views():
            known = self._known.get((namespace, quota, watch.name))
            if known is None:
                return None
            for n, v in known.hold.items():
                out[n] = out.get(n, 0) + v
        return out

    def problems(self, namespace: str, quota: str) -> dict[str, str]:
        """Why some member holds no guard of this quota as wanted (member -> reason)."""
        out: dict[str, str] = {}
        for watch in self.members.views():
            m = watch.name
            foreign = self._foreign.get((namespace, quota, m))
            carried = self._carried.get(m) if self._is_carried(watch) else None
            if watch.access.problem and not self._is_carried(watch):
                out[m] = watch.access.problem
            elif foreign is not None:
                out[m] = foreign[1]
            elif m in self.errors:
                out[m] = f"unreachable, keeps the guard it has: {self.errors[m]}"
            elif carried is not None and carried.problem(namespace, quota):
                out[m] = carried.problem(namespace, quota)
        return out

    def routes(self, namespace: str, quota: str) -> dict[str, str]:
        """How the guards of the members not written directly reach them (member -> how)."""
        return {
            m: target.route(namespace, quota)
            for m, target in self._carried.items()
            if self._carried_member(m)
        }

    def after_recompute(self, namespace: str, leader: bool) -> None:
        if leader:
            self.queue.mark(namespace)

    def after_cluster_recompute(
        self, name: str, quota: KarmadaQuota | None, selected: Sequence[str], leader: bool
    ) -> None:
        """A cluster quota keeps no member guards."""

    def forget(self, namespace: str, quota: str) -> None:
        def mine(keys: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
            return [k for k in keys if k[0] == namespace and k[1] == quota]

        for key in mine(self._known):
            del self._known[key]
        for key in mine(self._foreign):
            del self._foreign[key]
        for key in mine(self._intended):
            del self._intended[key]
        for key in mine(self._short):
            del self._short[key]
        self._diverged -= set(mine(self._diverged))
        self._names.pop((namespace, guard_name(quota)), None)
        self._tightening.pop((namespace, quota), None)

    async def close(self) -> None:
        if self.watches is not None:
            await self.watches.close()

    def protection(self) -> dict[str, str]:
        """Per member watched: "" while the admission policy protects its guards, else why
        they are only watched and restored."""
        return dict(self.watches.protection) if self.watches is not None else {}

    # ---- the watch -------------------------------------------------------------------------

    def observed(self, member: str, obj: Mapping[str, Any], gone: bool) -> None:
        """A guard of `member` as its watch shows it now (`gone`: deleted, or no longer
        labelled ours). Folded into what the keeper knows; when someone else changed it,
        the namespace is synced at once."""
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        quota = self._names.get((ns, name))
        if quota is None:
            return  # labelled as ours, but no guard we keep: it guards nothing
        key = (ns, quota, member)
        known = self._known.get(key)
        rv = parse_rv(meta.get("resourceVersion"))
        if known is None or (rv and known.rv and rv <= known.rv):
            return  # not read yet (the first sync reads it), or older than what is known
        if not gone and not is_ours(obj, quota):
            self._known[key] = replace(known, read_at=float("-inf"))  # read it again
            gone = True
        else:
            self._remember(ns, quota, member, None if gone else dict(obj), rv)
            after = self._known.get(key)
            if after is not None and any(v < known.used.get(n, v) for n, v in after.used.items()):
                self.on_change(ns)  # the member's quota controller recounted: check it (`_mend`)
        intent = self._intended.get(key)
        if intent is None:
            return
        spec = obj.get("spec") or {}
        changed = gone or _nanos(spec.get("hard")) != intent.hard
        if not changed and intent.scoping is not None and scoping(spec) != intent.scoping:
            changed = True
        if not changed:
            self._diverged.discard(key)
            return
        if key not in self._diverged:  # counted and logged once until it is put back
            self._diverged.add(key)
            what = "deleted" if gone else "changed"
            if self.metrics is not None:
                self.metrics.guard_restores.labels(member, what).inc()
            log.warning(
                "member guard changed by another writer; restoring it",
                extra={"cluster": member, "namespace": ns, "quota": quota, "change": what},
            )
        self.on_change(ns)

    def _intend(self, key: tuple[str, str, str], obj: Mapping[str, Any] | None) -> None:
        self._diverged.discard(key)
        if obj is None:
            self._intended.pop(key, None)
            return
        spec = obj.get("spec") or {}
        self._intended[key] = _Intent(_nanos(spec.get("hard")), scoping(spec))

    # ---- requests --------------------------------------------------------------------------

    def _reachable(self, member: str) -> bool:
        watch = self.members.get(member)
        if watch is None or (watch.access.problem and not self._is_carried(watch)):
            return False
        return self._down.get(member, 0.0) <= self._clock()

    def _carried_caps(
        self, quota: KarmadaQuota, inputs: gd.GuardInputs
    ) -> Mapping[str, Mapping[str, int]]:
        """The caps, with a carried member held to the quota's own hard: a Work not reflected
        yet is assumed to hold at most that (guard_works), so a borrower's loan goes to the
        members written directly."""
        carried = [m for m in self._carried if self._carried_member(m)]
        if not carried or not (quota.status.borrowed or quota.spec.cohort):
            return inputs.caps
        own = _nanos(quota.spec.hard)
        caps = {c: dict(v) for c, v in inputs.caps.items()}
        for c in carried:
            cap = caps.setdefault(c, {})
            for n in inputs.hard:
                cap[n] = min(cap.get(n, own.get(n, 0)), own.get(n, 0))
        return caps

    def _carried_member(self, member: str) -> bool:
        watch = self.members.get(member)
        return watch is not None and self._is_carried(watch)

    def _is_carried(self, watch: MemberWatch) -> bool:
        """A Pull-mode member whose guard Karmada carries (no credentials of ours reach it)."""
        return watch.access.pull and self._carry is not None

    def _target(self, member: str) -> GuardTarget:
        watch = self.members.get(member)
        if watch is None:
            raise GuardError(f"member {member} is not registered")
        if self._carry is None or not self._is_carried(watch):
            return MemberQuotas(watch)
        if member not in self._carried:
            self._carried[member] = self._carry(member)
        return self._carried[member]

    def _failed(self, member: str, op: str, e: BaseException) -> None:
        if self.watches is not None and isinstance(e, KubeError) and e.status == 403:
            self.watches.recheck(member)  # our write refused: is the policy naming us?
        # doubling up to max_retry: a member that is down costs a namespace's flush one request
        # timeout per period, not per event
        self._down[member] = self._clock() + self._backoff.when(member)
        # what its guards may hold is kept for planning, but read again once it is back
        for key, known in self._known.items():
            if key[2] == member:
                self._known[key] = replace(known, read_at=float("-inf"))
        self.errors[member] = describe_error(e)
        if self.metrics is not None:
            self.metrics.guard_writes.labels(member, op, "error").inc()
        log.warning(
            "member guard request failed; the member keeps the guard it has",
            extra={"cluster": member, "operation": op, "error": describe_error(e)},
        )

    def recovered(self, members: list[str]) -> None:
        """These members' pod watches are healthy again: try their guards at once rather than
        at the end of the backoff."""
        for m in members:
            if m in self._down:
                self._down.pop(m, None)
                self._backoff.forget(m)

    def _ok(self, member: str, op: str) -> None:
        self.errors.pop(member, None)
        self._backoff.forget(member)
        if self.metrics is not None:
            self.metrics.guard_writes.labels(member, op, "ok").inc()

    async def _call(self, member: str, what: Callable[[GuardTarget], Awaitable[T]]) -> T:
        """One request to the member's guard, bounded by `request_timeout`; a connection
        error is a GuardError (the member is unreachable for its backoff)."""
        target = self._target(member)
        try:
            async with asyncio.timeout(self.request_timeout):
                return await what(target)
        except (KubeError, GuardError):
            raise
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            await target.reset()
            raise GuardError(describe_error(e)) from e

    async def _read(self, member: str, quota: KarmadaQuota) -> JSON | None:
        """Our guard in the member, None when absent; NotOurs when another object holds
        its name."""
        obj = await self._call(member, lambda t: t.read(quota))
        if obj is not None and not is_ours(obj, quota.metadata.name):
            raise NotOurs(
                f"{self._target(member).where(quota)} is not managed by karmadaquota: left "
                "alone, no guard there"
            )
        return obj

    def _remember(
        self, namespace: str, quota: str, member: str, obj: JSON | None, rv: int = 0
    ) -> None:
        shown = {
            str(k): str(v) for k, v in (((obj or {}).get("spec") or {}).get("hard") or {}).items()
        }
        spec = (obj or {}).get("spec") or {}
        version = parse_rv(((obj or {}).get("metadata") or {}).get("resourceVersion")) or rv
        have = self._known.get((namespace, quota, member))
        if have is not None and version and have.rv and version < have.rv:
            # older than what the watch already showed: a write's answer read after the event
            # of a later change (the guard written, then deleted before we read the answer)
            return
        used = _nanos(((obj or {}).get("status") or {}).get("used"))
        self._known[(namespace, quota, member)] = _Known(
            may_hold(obj), shown, self._clock(), scoping(spec), version, used
        )

    async def _write(self, member: str, quota: KarmadaQuota, hard: Mapping[str, int]) -> JSON:
        ns, name = quota.metadata.namespace, quota.metadata.name
        body = guard_body(quota, hard)
        key = (ns, name, member)
        # intended before it is written: the watch's echo of this write is not someone else's
        before = self._intended.get(key)
        self._intended[key] = _Intent(
            _nanos(body["spec"]["hard"]), before.scoping if before is not None else None
        )

        async def read() -> JSON | None:
            return await self._read(member, quota)

        def mutate(current: JSON | None) -> JSON:
            return self._target(member).replacing(quota, current, body)

        async def write(obj: JSON) -> JSON:
            return await self._call(member, lambda t: t.send(quota, obj))

        result = await retry_on_conflict(
            read, mutate, write, attempts=4, backoff=Backoff(0.02, 0.2)
        )
        assert result is not None
        self._intend(key, result)
        return result

    async def _confirm(
        self, member: str, quota: KarmadaQuota, lowered: Mapping[str, int], written: JSON
    ) -> JSON:
        """Wait (bounded) until the member's quota controller enforces the lowered values."""
        ns, name = quota.metadata.namespace, quota.metadata.name
        deadline = self._clock() + self.confirm_timeout
        obj = written
        while not confirmed(obj, lowered):
            if self._clock() >= deadline:
                raise GuardError(
                    f"the quota controller of {member} did not take the lowered guard into "
                    f"status.hard within {self.confirm_timeout:g}s"
                )
            await asyncio.sleep(self.poll)  # polling the member with a deadline
            got = await self._read(member, quota)
            if got is None:
                raise GuardError(f"guard {ns}/{guard_name(name)} vanished from {member}")
            obj = got
        return obj

    # ---- one quota -------------------------------------------------------------------------

    async def _refresh(self, quota: KarmadaQuota, member: str) -> None:
        ns, name = quota.metadata.namespace, quota.metadata.name
        known = self._known.get((ns, name, member))
        watched = self.watches is not None and self.watches.synced(member)
        if known is not None and (
            self._clock() - known.read_at < self.reread_period
            or (watched and known.read_at > float("-inf"))
        ):
            return  # known, and the watch (or a recent read) would have told of a change
        foreign = self._foreign.get((ns, name, member))
        if foreign is not None and self._clock() - foreign[0] < self.reread_period:
            return
        try:
            got = await self._read(member, quota)
            self._remember(ns, name, member, got)
            self._intend((ns, name, member), got)
        except NotOurs as e:
            # no guard of ours can be put there: it holds nothing of ours (counted at its
            # usage), reported, and looked at again after the re-read period
            self._foreign[(ns, name, member)] = (self._clock(), describe_error(e))
            self._known.pop((ns, name, member), None)
            log.warning("no guard in this member", extra={"cluster": member, "error": str(e)})
            return
        except (KubeError, GuardError) as e:
            self._failed(member, "read", e)
            return
        self._foreign.pop((ns, name, member), None)
        self._backoff.forget(member)
        self.errors.pop(member, None)

    async def sync(
        self,
        quota: KarmadaQuota,
        inputs: gd.GuardInputs,
        may_write: Callable[[], bool] = lambda: True,
    ) -> SyncResult:
        """Move every reachable member's guard to its share (decreases confirmed first), then
        restore a guard's usage its member counted short (`_mend`).

        `may_write` is asked before each phase: a leader whose Lease is running out raises
        nothing (its successor plans from what the members hold then)."""
        moved = await self._move(quota, inputs, may_write)
        mend_at = await self._mend(quota) if may_write() else None
        if mend_at is None:
            return moved
        retry_at = mend_at if moved.retry_at is None else min(moved.retry_at, mend_at)
        return SyncResult(moved.changed, retry_at)

    async def _move(
        self,
        quota: KarmadaQuota,
        inputs: gd.GuardInputs,
        may_write: Callable[[], bool],
    ) -> SyncResult:
        """`sync`'s moves of the guards' hard."""
        ns, name = quota.metadata.namespace, quota.metadata.name
        self._names[(ns, guard_name(name))] = name
        if self.watches is not None:
            self.watches.ensure(self.members.views())
        registered = {m.name for m in self.members.views()}
        await asyncio.gather(
            *(self._refresh(quota, m) for m in sorted(registered) if self._reachable(m))
        )
        states = []
        for m in inputs.members:
            known = self._known.get((ns, name, m.name))
            if m.name not in registered or (ns, name, m.name) in self._foreign:
                # a cluster we cannot reach at all (not a registered member), or one where our
                # guard's name is taken: it has no guard of ours, and what it holds stays out
                # of everyone else's share
                states.append(replace(m, reachable=False, guard=dict(m.usage)))
                continue
            states.append(
                replace(
                    m,
                    reachable=self._reachable(m.name) and known is not None,
                    guard=None if known is None else known.hold,
                )
            )
        for member in sorted(registered - {m.name for m in inputs.members}):
            if (ns, name, member) in self._foreign:
                states.append(gd.MemberState(member, reachable=False, guard={}))
                continue
            known = self._known.get((ns, name, member))
            states.append(
                gd.MemberState(
                    member,
                    reachable=self._reachable(member) and known is not None,
                    guard=None if known is None else known.hold,
                )
            )
        inputs_now = replace(inputs, members=states, caps=self._carried_caps(quota, inputs))
        wanted = gd.desired(inputs_now)
        current = {
            c: (self._known[(ns, name, c)].hold if (ns, name, c) in self._known else None)
            for c in wanted
        }
        # a carried member enforces whatever spec its agent applies next, not what it may hold
        applied_next = {
            c: _nanos(self._known[(ns, name, c)].shown)
            for c in wanted
            if (ns, name, c) in self._known and self._carried_member(c)
        }
        plan = gd.transition(current, wanted, applied_next)
        scoped = scoping(guard_body(quota, {})["spec"])
        for c, want in wanted.items():
            known = self._known.get((ns, name, c))
            if known is not None and known.hold and known.scoping != scoped:
                plan.final.setdefault(c, dict(want))  # the quota's scopes changed: rewrite
        if plan.lower and not plan.final and gd.within_hard(inputs_now, current):
            # lowerings alone, and Σ ≤ hard as the guards are: they only take back headroom
            # an admission reserved, which its placement gives back (guards.py); wait a moment
            since = self._tightening.setdefault((ns, name), self._clock())
            if self._clock() - since < self.tighten_delay:
                return SyncResult(False, since + self.tighten_delay)
        self._tightening.pop((ns, name), None)
        changed = False
        failed = False

        async def lower(member: str, hard: Mapping[str, int]) -> bool:
            try:
                written = await self._write(member, quota, hard)
                self._remember(ns, name, member, written)  # may still hold the old values
                held = await self._confirm(member, quota, hard, written)
            except (KubeError, GuardError) as e:
                self._failed(member, "lower", e)
                return False
            self._remember(ns, name, member, held)
            self._ok(member, "lower")
            return True

        async def raise_(member: str, hard: Mapping[str, int]) -> bool:
            before = current.get(member) or {}
            op = "raise" if before else "create"
            try:
                written = await self._write(member, quota, hard)
            except NotOurs as e:
                # another ResourceQuota took the name meanwhile (a guard relabelled or deleted
                # and re-made by someone else): it is left alone and reported, as on a read
                self._foreign[(ns, name, member)] = (self._clock(), describe_error(e))
                self._known.pop((ns, name, member), None)
                return False
            except (KubeError, GuardError) as e:
                # the write may have been applied: assume the larger of both
                self._known[(ns, name, member)] = _Known(
                    {n: max(before.get(n, 0), hard.get(n, 0)) for n in set(before) | set(hard)},
                    self._known[(ns, name, member)].shown
                    if (ns, name, member) in self._known
                    else {},
                    self._clock(),
                )
                self._failed(member, op, e)
                return False
            self._remember(ns, name, member, written)
            self._ok(member, op)
            return True

        if (plan.lower or plan.final) and not may_write():
            return SyncResult(False, self._clock() + self.retry)
        if plan.lower:
            results = await asyncio.gather(*(lower(c, h) for c, h in sorted(plan.lower.items())))
            changed = True
            failed = not all(results)
        if plan.final and not failed and not may_write():
            failed = True
        if plan.final and not failed:
            results = await asyncio.gather(*(raise_(c, h) for c, h in sorted(plan.final.items())))
            changed = True
            failed = not all(results)
        if changed and self.metrics is not None:
            self.metrics.guard_rebalances.labels(ns, name).inc()
        if changed:
            log.info(
                "member guards moved",
                extra={
                    "namespace": ns,
                    "quota": name,
                    "lowered": sorted(plan.lower),
                    "raised": sorted(plan.final),
                    "complete": not failed,
                },
            )
        unreachable = any(
            not s.reachable
            for s in states
            if s.name in registered and (ns, name, s.name) not in self._foreign
        )
        return SyncResult(changed, self._next_try(registered) if failed or unreachable else None)

    async def _mend(self, quota: KarmadaQuota) -> float | None:
        """Restore a guard's `status.used` that the member's quota controller recounted short
        of the pods that exist (`guards.undercounted`), once it has stayed short for
        `mend_delay`; when to look again, else None.

        The restore is a merge patch of `status.used` at the resourceVersion that counted
        short, raising only: an admission or a recount in between makes it conflict, and it
        is looked at again. The member's next recount replaces it with its own count."""
        ns, name = quota.metadata.namespace, quota.metadata.name
        again: float | None = None
        for member in sorted(m.name for m in self.members.views()):
            key = (ns, name, member)
            known = self._known.get(key)
            counted = (
                known is not None
                and known.used
                and self._reachable(member)
                and not self._carried_member(member)
            )
            live = self._live(member, quota) if counted else None
            short = gd.undercounted(live, known.used) if live is not None and known else {}
            if not short:
                self._short.pop(key, None)
                continue
            since = self._short.setdefault(key, self._clock())
            due = since + self.mend_delay
            if self._clock() < due:
                again = due if again is None else min(again, due)
                continue
            assert known is not None
            try:
                got = await self._restore(member, quota, known.rv, short)
            except (KubeError, GuardError) as e:
                if self.metrics is not None:
                    self.metrics.guard_writes.labels(member, "mend", "error").inc()
                log.warning(
                    "member guard's usage not restored; looking again",
                    extra={
                        "cluster": member,
                        "namespace": ns,
                        "quota": name,
                        "error": describe_error(e),
                    },
                )
                soon = self._clock() + (self.poll if isinstance(e, Conflict) else self.retry)
                again = soon if again is None else min(again, soon)
                continue
            self._remember(ns, name, member, got)
            self._short.pop(key, None)
            self._ok(member, "mend")
            log.warning(
                "member quota controller counted the guard short of the member's pods; "
                "its used restored",
                extra={
                    "cluster": member,
                    "namespace": ns,
                    "quota": name,
                    "counted": _shown({n: known.used[n] for n in short}),
                    "restored": _shown(short),
                },
            )
        return again

    def _live(self, member: str, quota: KarmadaQuota) -> dict[str, int] | None:
        """What the member's counted pods of the quota that are not being deleted hold, per
        guarded name pods show, as its pod watch has them now (None: not listed yet)."""
        watch = self.members.get(member)
        if watch is None or not watch.synced:
            return None
        names = [n for n in gd.guarded_names(quota.spec.hard) if is_pod_observable(n)]
        pods = watch.table.observed(
            quota.metadata.namespace, names, scopes.expressions(quota.spec), time.time()
        )
        going = pods.terminating
        return {n: q.nanos - (going[n].nanos if n in going else 0) for n, q in pods.running.items()}

    async def _restore(
        self, member: str, quota: KarmadaQuota, rv: int, used: Mapping[str, int]
    ) -> JSON:
        """Merge `used` into the guard's status.used at resourceVersion `rv` (a Push member's)."""
        target = self._target(member)
        assert isinstance(target, MemberQuotas)  # a carried member is never mended
        patch = {
            "metadata": {"resourceVersion": str(rv)},
            "status": {"used": _shown(used)},
        }
        return await self._call(member, lambda _: target.mend(quota, patch))

    def _next_try(self, registered: Iterable[str]) -> float:
        """When the first of these members that is down may be tried again (else `retry`
        from now: one unreachable for a reason no backoff ends, its access)."""
        now = self._clock()
        members = set(registered)
        waits = [t for m, t in self._down.items() if m in members and t > now]
        return min(waits) if waits else now + self.retry

    async def remove(self, quota: KarmadaQuota) -> bool:
        """Delete the quota's guard in every registered member; True once none is left."""
        ns, name = quota.metadata.namespace, quota.metadata.name

        async def one(member: str) -> bool:
            if not self._reachable(member):
                return False
            try:
                try:
                    obj = await self._read(member, quota)
                except NotOurs:
                    obj = None  # not ours to delete: nothing of ours there
                self._intend((ns, name, member), None)  # its deletion is ours
                if obj is not None:
                    current = obj
                    await self._call(member, lambda t: t.delete(quota, current))
                    self._ok(member, "delete")
            except (KubeError, GuardError) as e:
                self._failed(member, "delete", e)
                return False
            self._known.pop((ns, name, member), None)
            return True

        done = await asyncio.gather(*(one(m.name) for m in self.members.views()))
        if all(done):
            self.forget(ns, name)
        return all(done)
