"""Make Karmada retry refused workloads that now fit: the controller's side of waking.

Karmada's resource detector reconciles a resource template at once when anything outside
`status`, `managedFields` and `resourceVersion` changes, and its binding then goes through
admission again. So, on the leader, after a namespace's quotas were recomputed, the waiting
workloads that fit (`waiting.select`) get the annotation `quota.karmada.io/woken-at`
patched onto their template. A template that no longer exists leaves the list: the patch (or a
periodic GET of the templates still waiting) answers 404, or the name now holds another uid.

Only the kinds configured (default apps Deployments and StatefulSets) are touched; the
controller's RBAC grants `get` and `patch` on those alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from karmadaquota import waiting
from karmadaquota.api import KarmadaQuota, WaitingWorkload
from karmadaquota.controller import room
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.evaluate import QuotaView
from karmadaquota.kube.client import JSON, Conflict, KubeError, NotFound
from karmadaquota.resources import plural
from karmadaquota.times import format_time, parse_time

log = logging.getLogger("karmadaquota.wake")

DEFAULT_KINDS = ("apps/Deployment", "apps/StatefulSet")


class Templates(Protocol):
    """What waking needs of the API: read a template, merge-patch its metadata."""

    async def get(self, path: str) -> JSON: ...

    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON: ...


@dataclass(frozen=True)
class Kind:
    """A template kind the controller may wake: `<group>/<Kind>[=<plural>]` on the flag."""

    group: str
    kind: str
    resource: str

    @classmethod
    def parse(cls, text: str) -> Kind:
        spec, _, resource = text.strip().partition("=")
        group, slash, kind = spec.rpartition("/")
        if not slash or not kind or not kind[0].isupper() or "/" in group:
            raise ValueError(
                f"invalid kind {text!r}: use <group>/<Kind>, e.g. apps/Deployment "
                "(core kinds as /Kind), optionally =<resource> for an irregular plural"
            )
        return cls(group, kind, resource or plural(kind))


def kinds(values: Iterable[str]) -> tuple[Kind, ...]:
    return tuple(Kind.parse(v) for v in values)


@dataclass
class WakeConfig:
    kinds: Sequence[Kind] = field(default_factory=lambda: kinds(DEFAULT_KINDS))
    # how often a template still waiting is checked to exist (deleted ones leave the list)
    audit_period: float = 15.0
    # a woken workload neither admitted nor refused again within this long may be woken again
    woken_grace: float = 60.0
    patch_timeout: float = 5.0


def template_path(namespace: str, w: WaitingWorkload, kind: Kind) -> str:
    """The template's REST path: in the quota's namespace, as bindings are with templates."""
    ref = w.template
    base = f"/apis/{ref.apiVersion}" if "/" in ref.apiVersion else f"/api/{ref.apiVersion}"
    return f"{base}/namespaces/{namespace}/{kind.resource}/{ref.name}"


class Waker:
    """Wakes refused workloads that fit (the waiting list's way of waiting for room,
    `controller.room`); keeps what it woke and which templates are gone."""

    def __init__(
        self, api: Templates, metrics: ControllerMetrics, config: WakeConfig | None = None
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.config = config or WakeConfig()
        self._woken: dict[str, tuple[int, float]] = {}  # key -> (refusals seen, loop time)
        self._checked: dict[str, float] = {}  # key -> loop time its template was last seen
        self._gone: dict[str, set[str]] = {}  # namespace -> keys whose template is gone
        self._orphans: dict[str, list[WaitingWorkload]] = {}  # entries of deleted quotas
        self._counts: dict[str, int] = {}

    def gone(self, namespace: str, key: str) -> bool:
        """The template of this waiting workload no longer exists (recompute drops it)."""
        return key in self._gone.get(namespace, ())

    def quota_deleted(self, quota: KarmadaQuota) -> None:
        """A deleted quota's waiting workloads may fit now: keep them to be woken."""
        if quota.status.waiting:
            ns = quota.metadata.namespace
            self._orphans[ns] = waiting.fifo([*self._orphans.get(ns, []), *quota.status.waiting])

    def take(
        self, namespace: str, listed: Collection[str]
    ) -> tuple[set[str], list[WaitingWorkload]]:
        """For one look at `namespace`, whose lists hold the keys `listed`: the keys whose
        template is gone and still listed (kept until the list is written without them; the
        rest were written away), and the deleted quotas' entries (taken: `keep_orphans` puts
        back those not woken)."""
        gone = self._gone.pop(namespace, set()) & set(listed)
        if gone:
            self._gone[namespace] = gone
        return gone, self._orphans.pop(namespace, [])

    def keep_orphans(self, namespace: str, left: list[WaitingWorkload]) -> None:
        """Deleted quotas' entries not woken: no quota lists them, so they wait for the next
        look here."""
        if left:
            self._orphans[namespace] = left

    def woken(self) -> dict[str, int]:
        """Key -> refusals seen when it was woken, of the workloads woken lately."""
        return {k: n for k, (n, _) in self._woken.items()}

    def kind(self, w: WaitingWorkload) -> Kind | None:
        group = w.template.apiVersion.rpartition("/")[0]
        for k in self.config.kinds:
            if k.group == group and k.kind == w.template.kind:
                return k
        return None

    async def wake(
        self, namespace: str, quotas: Sequence[KarmadaQuota], now: datetime
    ) -> float | None:
        """Wake what fits in `namespace`; the loop time to come back (audits), if any."""
        return await room.run(_WakePass(self, namespace, quotas, now), quotas)

    def count(self, namespace: str, n: int) -> None:
        if n:
            self._counts[namespace] = n
        else:
            self._counts.pop(namespace, None)
        self.metrics.waiting.set(sum(self._counts.values()))

    def forget(self, loop_now: float, live: Collection[str]) -> None:
        grace = self.config.woken_grace
        for k, (_, at) in list(self._woken.items()):
            if at < loop_now - grace:
                del self._woken[k]
        for k in list(self._checked):
            if k not in live and self._checked[k] < loop_now - 10 * self.config.audit_period:
                del self._checked[k]

    async def wake_one(
        self, namespace: str, w: WaitingWorkload, now: datetime, loop_now: float
    ) -> bool:
        kind = self.kind(w)
        if kind is None:
            return False
        k = waiting.key(w.template)
        meta: JSON = {"annotations": {waiting.ANNOTATION: format_time(now, micro=True)}}
        if w.template.uid:
            meta["uid"] = w.template.uid  # precondition: never touch a re-created template
        extra = _fields(namespace, w)
        try:
            await self.api.merge_patch(
                template_path(namespace, w, kind),
                {"metadata": meta},
                timeout=self.config.patch_timeout,
            )
        except (NotFound, Conflict) as e:
            self._template_gone(namespace, k, extra, str(e))
            return False
        except (TimeoutError, KubeError, OSError) as e:
            self.metrics.wakeups.labels("error").inc()
            log.warning("waiting workload not woken", extra={**extra, "error": str(e)})
            return False
        self._woken[k] = (w.refusals, loop_now)
        self._checked[k] = loop_now
        self.metrics.wakeups.labels("woken").inc()
        since = parse_time(w.firstRefused)
        log.info(
            "waiting workload woken: quota has room",
            extra={
                **extra,
                "requested": ",".join(f"{n}={q}" for n, q in sorted(w.requested.items())),
                "waited_seconds": round((now - since).total_seconds(), 3) if since else None,
                "refusals": w.refusals,
            },
        )
        return True

    def _template_gone(self, namespace: str, k: str, extra: dict[str, str], why: str) -> None:
        self._gone.setdefault(namespace, set()).add(k)
        self._woken.pop(k, None)
        self.metrics.wakeups.labels("gone").inc()
        log.info("waiting workload left the list: template gone", extra={**extra, "detail": why})

    async def audit(
        self,
        namespace: str,
        entries: Sequence[WaitingWorkload],
        skip: Collection[str],
        loop_now: float,
    ) -> float | None:
        """GET templates not seen for `audit_period`; the loop time of the next audit."""
        period = self.config.audit_period
        due: float | None = None
        for w in entries:
            k = waiting.key(w.template)
            kind = self.kind(w)
            if k in skip or kind is None or self.gone(namespace, k):
                continue
            seen = self._checked.setdefault(k, loop_now)
            if seen + period > loop_now:
                due = min(due or seen + period, seen + period)
                continue
            extra = _fields(namespace, w)
            try:
                obj = await self.api.get(template_path(namespace, w, kind))
            except NotFound as e:
                self._template_gone(namespace, k, extra, str(e))
                continue
            except (TimeoutError, KubeError, OSError):
                self._checked[k] = loop_now
                due = min(due or loop_now + period, loop_now + period)
                continue
            uid = str((obj.get("metadata") or {}).get("uid", ""))
            if w.template.uid and uid != w.template.uid:
                self._template_gone(namespace, k, extra, f"{w.template.name} is now uid {uid}")
                continue
            self._checked[k] = loop_now
            due = min(due or loop_now + period, loop_now + period)
        if self._gone.get(namespace):
            return loop_now + 0.05  # write the list without them at once
        return due


class _WakePass:
    """One look at a namespace's waiting workloads (`controller.room`'s loop)."""

    def __init__(
        self, waker: Waker, namespace: str, quotas: Sequence[KarmadaQuota], now: datetime
    ) -> None:
        self.waker = waker
        self.namespace = namespace
        self.now = now
        listed = waiting.of_namespace(quotas)
        self.keys = {waiting.key(w.template) for w in listed}
        gone, orphans = waker.take(namespace, self.keys)
        self.orphans = [w for w in orphans if waiting.key(w.template) not in self.keys | gone]
        self.entries = [
            w for w in waiting.fifo([*listed, *self.orphans]) if waiting.key(w.template) not in gone
        ]
        self.loop_now = 0.0
        self.flying: set[str] = set()
        self.picked: set[str] = set()

    async def announce(self) -> bool:
        self.waker.count(self.namespace, len(self.entries))
        if not self.entries:
            return False
        self.loop_now = asyncio.get_running_loop().time()
        self.waker.forget(self.loop_now, [waiting.key(w.template) for w in self.entries])
        return True

    async def select(self, views: Sequence[QuotaView]) -> list[WaitingWorkload]:
        self.flying = waiting.in_flight(self.entries, self.waker.woken())
        wakeable = [w for w in self.entries if self.waker.kind(w) is not None]
        picked = waiting.select(wakeable, views, self.flying)
        self.picked = {waiting.key(w.template) for w in picked}
        return picked

    def strict_queue(self, pick: WaitingWorkload) -> str | None:
        return None  # BestEffortFIFO by first refusal

    async def act(self, pick: WaitingWorkload) -> bool:
        return await self.waker.wake_one(self.namespace, pick, self.now, self.loop_now)

    async def retry_at(self, let_go: Sequence[WaitingWorkload]) -> float | None:
        ns, waker = self.namespace, self.waker
        orphans = [w for w in self.orphans if not waker.gone(ns, waiting.key(w.template))]
        # orphans not woken have no quota listing them any more: keep them for the next round
        left = [w for w in orphans if waiting.key(w.template) not in self.picked]
        waker.keep_orphans(ns, left)
        still = [w for w in self.entries if waiting.key(w.template) in self.keys]
        return await waker.audit(ns, still, self.flying | self.picked, self.loop_now)


def _fields(namespace: str, w: WaitingWorkload) -> dict[str, str]:
    ref = w.template
    return {"namespace": namespace, "kind": ref.kind, "workload": ref.name, "uid": ref.uid}
