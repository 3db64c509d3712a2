"""Each member's guards, watched, and the policy that protects them, kept installed (I/O).

For every member it guards, the guard keeper runs one informer (`kube/informer.py`) on the
ResourceQuotas carrying our labels, in all namespaces (a label-selected list and watch, not a
poll): a guard deleted or changed by someone else reaches the keeper within the watch's
latency and is put back at once (`GuardKeeper.observed`). A second, slow loop per member keeps
the ValidatingAdmissionPolicy of `controller.guard_policy` installed where the member serves
it (Kubernetes ≥ 1.30), so that such a change is refused in the first place: checked on start,
every `period` seconds (a member admin may delete it) and at once when a guard write of ours
is refused 403. Where it cannot be installed (an older member, a credential not allowed to)
the member is watched and restored only, which the log and
`karmadaquota_member_guards_protected` say.

The watch and the policy loop each take their own client from the Cluster's credentials
(`MemberWatch.connect`), so that resetting the guard requests' client never cuts the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karmadaquota.controller import guard_policy as gp
from karmadaquota.controller.members import MemberWatch, describe_error
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.kube.client import JSON, Api, KubeClient, KubeError, NotFound
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.retry import Backoff

log = logging.getLogger("karmadaquota.controller.guards")

GUARDS_PATH = "/api/v1/resourcequotas"
RECONNECT = Backoff(0.2, 5.0)  # between failed attempts to list/watch or check the policy
GUARD_SELECTOR = f"{gp.MANAGED_BY_LABEL}={gp.MANAGED_BY},{gp.GUARD_LABEL}"

# (member, the guard as last seen, True when it is gone)
Observer = Callable[[str, Mapping[str, Any], bool], None]


class _Feed:
    """The informer's handler for one member: every event goes to the keeper."""

    def __init__(self, member: str, observer: Observer) -> None:
        self.member = member
        self.observer = observer
        self.synced = False

    def added(self, obj: Mapping[str, Any]) -> None:
        self.observer(self.member, obj, False)

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        self.observer(self.member, obj, True)

    def relisted(self, resource_version: int) -> None:
        self.synced = True


@dataclass
class _Watched:
    source: MemberWatch  # the registration it was started for (a new one restarts it)
    feed: _Feed
    tasks: list[asyncio.Task[None]]
    wake: asyncio.Event = field(default_factory=asyncio.Event)


async def protect(api: Api, identity: str | None = None) -> str:
    """Install or update the guards' policy and binding in one member; "" when they are in
    force, else why the member is watched and restored only."""
    try:
        discovery = await api.get(gp.GROUP_PATH)
    except NotFound:
        discovery = {}
    if not gp.supports_policy(discovery):
        return (
            "the member serves no ValidatingAdmissionPolicy in admissionregistration.k8s.io/v1 "
            "(Kubernetes < 1.30): its guards are watched and restored only"
        )
    who = identity
    if not who:
        review = await api.request(
            "POST",
            gp.SELF_SUBJECT_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        who = gp.username(review)
    try:
        await _apply(api, gp.POLICIES, gp.policy(who))
        await _apply(api, gp.BINDINGS, gp.binding())
    except KubeError as e:
        if e.status != 403:
            raise
        return f"not allowed to install the guards' admission policy ({describe_error(e)})"
    return ""


async def _apply(api: Api, collection: str, want: JSON) -> None:
    path = f"{collection}/{want['metadata']['name']}"
    try:
        have: JSON | None = await api.get(path)
    except NotFound:
        have = None
    if have is None:
        await api.request("POST", collection, want)
    elif not gp.up_to_date(have, want):
        await api.request("PUT", path, gp.replacing(have, want))


class GuardWatches:
    """The guard informer and the policy loop of every member being guarded."""

    def __init__(
        self,
        observer: Observer,
        metrics: ControllerMetrics | None = None,
        *,
        identity: str | None = None,
        period: float = 60.0,
        timeout: float = 10.0,
        watch_timeout: int = 300,
        backoff: Backoff = RECONNECT,
    ) -> None:
        self.observer = observer
        self.metrics = metrics
        self.identity = identity
        self.period = period
        self.timeout = timeout
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self._watched: dict[str, _Watched] = {}
        self.protection: dict[str, str] = {}  # member -> "" (policy in force) or why not

    def synced(self, member: str) -> bool:
        w = self._watched.get(member)
        return w is not None and w.feed.synced

    def ensure(self, views: Sequence[MemberWatch]) -> None:
        """Watch exactly these members (a member registered anew is watched anew)."""
        wanted = {v.name: v for v in views if not v.access.problem}
        for name in [n for n, w in self._watched.items() if wanted.get(n) is not w.source]:
            self._stop(name)
        for name, view in wanted.items():
            if name not in self._watched:
                self._start(view)

    def recheck(self, member: str) -> None:
        """Look at the member's policy now (a guard write of ours was refused)."""
        w = self._watched.get(member)
        if w is not None:
            w.wake.set()

    def _start(self, view: MemberWatch) -> None:
        feed = _Feed(view.name, self.observer)

        async def disconnect(client: Lister) -> None:
            if isinstance(client, KubeClient):
                await client.close()

        informer = Informer(
            GUARDS_PATH,
            feed,
            connect=view.connect,
            disconnect=disconnect,
            params={"labelSelector": GUARD_SELECTOR},
            watch_timeout=self.watch_timeout,
            backoff=self.backoff,
            on_error=lambda e: self._watch_failed(view.name, e),
            name=f"guards in member {view.name}",
        )
        watched = _Watched(view, feed, [])
        watched.tasks = [
            asyncio.create_task(informer.run(), name=f"member-guards/{view.name}"),
            asyncio.create_task(self._protecting(view, watched), name=f"guard-policy/{view.name}"),
        ]
        self._watched[view.name] = watched

    def _watch_failed(self, member: str, e: BaseException) -> None:
        w = self._watched.get(member)
        if w is not None:
            w.feed.synced = False  # the keeper reads the guards itself until it lists again

    def _stop(self, member: str) -> None:
        w = self._watched.pop(member, None)
        if w is not None:
            for t in w.tasks:
                t.cancel()
        self.protection.pop(member, None)
        if self.metrics is not None:
            with contextlib.suppress(KeyError):
                self.metrics.guards_protected.remove(member)

    async def close(self) -> None:
        tasks = [t for w in self._watched.values() for t in w.tasks]
        self._watched.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _protecting(self, view: MemberWatch, watched: _Watched) -> None:
        """Keep the member's policy installed: now, every period, and when woken."""
        attempt = 0
        while True:
            watched.wake.clear()
            try:
                client = await view.connect()
                try:
                    async with asyncio.timeout(self.timeout):
                        why = await protect(client, self.identity)
                finally:
                    await client.close()
                delay, attempt = self.period, 0
            except Exception as e:  # reported and retried: this loop must outlive any error
                why = f"the guards' admission policy could not be checked: {describe_error(e)}"
                delay, attempt = self.backoff.delay(attempt), attempt + 1
            self._report(view.name, why)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # the re-check period, or a wake
                    await watched.wake.wait()

    def _report(self, member: str, why: str) -> None:
        if self.metrics is not None:
            self.metrics.guards_protected.labels(member).set(0 if why else 1)
        if self.protection.get(member) == why:
            return
        self.protection[member] = why
        if why:
            log.warning(
                "member guards are watched and restored, not protected by admission",
                extra={"cluster": member, "reason": why},
            )
        else:
            log.info(
                "member guards protected by a ValidatingAdmissionPolicy",
                extra={"cluster": member, "policy": gp.POLICY_NAME},
            )
