"""Member clusters' pods and claims, watched through the shared informer as Karmada reaches them.

A `Cluster` (cluster.karmada.io/v1alpha1) gives `spec.apiEndpoint` and `spec.secretRef`
{namespace, name}; that Secret on the Karmada API server holds `token` and `caBundle`
(`spec.insecureSkipTLSVerification` is honoured; `spec.proxyURL` is not supported). Each member
gets one task that lists the non-terminal pods of every namespace, then watches them, and
beside it one informer that does the same for its PersistentVolumeClaims (`controller.claims`:
the claims a StatefulSet's scale-down or deletion retained are still counted by the member's
own quota, so they are by ours).

The member counts as observed (`synced`) once its pods are listed and its claims are listed
or could not be (a credential that may not list claims must not stop its pods from counting:
its error names the claims, and its claims count as last seen, nothing before their first list).

A member that cannot be reached keeps its last figures, reports the error (the quotas'
MemberObserved condition turns False naming it) and is retried with a capped backoff; nothing
else waits for it. Credentials are re-read from the Secret on every reconnection.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, cast

from karmadaquota.controller.claims import CLAIMS_PATH, ClaimTable
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.pods import NON_TERMINAL_FIELD_SELECTOR, Observed, PodTable
from karmadaquota.kube.client import JSON, KubeClient
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.retry import Backoff
from karmadaquota.scopes import Expression

log = logging.getLogger("karmadaquota.controller.members")

CLUSTER_GROUP = "cluster.karmada.io"
CLUSTER_VERSION = "v1alpha1"
CLUSTER_PLURAL = "clusters"
PODS_PATH = "/api/v1/pods"

SecretReader = Callable[[str, str], Awaitable[JSON]]
# None: "every namespace with quotas" (the member's state changed, so did every condition)
ChangeCallback = Callable[[Collection[str] | None], None]
ClientFactory = Callable[[str, str, bytes | None, bool], KubeClient]


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one member; `problem` says why it cannot be reached at all."""

    name: str
    endpoint: str = ""
    secret_namespace: str = ""
    secret_name: str = ""
    insecure: bool = False
    problem: str = ""
    pull: bool = False  # syncMode Pull: karmada-agent applies its Works (controller.guard_works)


def cluster_access(obj: Mapping[str, Any]) -> ClusterAccess:
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    endpoint = str(spec.get("apiEndpoint") or "")
    ref = spec.get("secretRef") or {}
    if not endpoint or not ref.get("name"):
        mode = spec.get("syncMode", "")
        return ClusterAccess(
            name,
            problem=f"Cluster {name} has no apiEndpoint/secretRef (syncMode {mode or 'unset'}): "
            "its pods cannot be observed",
            pull=mode == "Pull",
        )
    return ClusterAccess(
        name,
        endpoint=endpoint,
        secret_namespace=str(ref.get("namespace") or ""),
        secret_name=str(ref["name"]),
        insecure=bool(spec.get("insecureSkipTLSVerification", False)),
    )


def _secret_value(secret: Mapping[str, Any], key: str) -> bytes | None:
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        text = (secret.get("stringData") or {}).get(key)
        return text.encode() if isinstance(text, str) else None
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return None


def describe_error(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class MemberWatch:
    """One member cluster's counted pods (a `recompute.MemberView`)."""

    def __init__(
        self,
        access: ClusterAccess,
        secrets: SecretReader,
        on_change: ChangeCallback,
        metrics: ControllerMetrics | None = None,
        client_factory: ClientFactory = KubeClient.from_token,
        page_size: int = 500,
        watch_timeout: int = 60,
        min_backoff: float = 0.5,
        max_backoff: float = 15.0,
    ) -> None:
        self.access = access
        self._secrets = secrets
        self._on_change = on_change
        self._metrics = metrics
        self._client_factory = client_factory
        self.table = PodTable()
        self.claims = ClaimTable()
        self._api: KubeClient | None = None  # requests of the member guards (not the watch)
        self._synced = False
        self._claims_settled = False  # listed once, or failed to
        self._error = access.problem
        self._claims_error = ""
        self.informer = Informer(
            PODS_PATH,
            self,
            connect=self._client,
            disconnect=self._disconnect,
            params={"fieldSelector": NON_TERMINAL_FIELD_SELECTOR},
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=Backoff(min_backoff, max_backoff),
            on_error=self._failed,
            name=f"pods of member {access.name}",
        )
        self.claim_informer = Informer(
            CLAIMS_PATH,
            _ClaimFeed(self),
            connect=self._client,
            disconnect=self._disconnect,
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=Backoff(min_backoff, max_backoff),
            on_error=self._claims_failed,
            name=f"persistentvolumeclaims of member {access.name}",
        )

    @property
    def name(self) -> str:
        return self.access.name

    @property
    def synced(self) -> bool:
        """Its pods are listed, and its claims listed or could not be (module docstring)."""
        return self._synced and self._claims_settled

    @property
    def error(self) -> str:
        if self._error or not self._claims_error:
            return self._error
        return f"persistentvolumeclaims: {self._claims_error}"

    def observed(
        self, namespace: str, names: Collection[str], exprs: tuple[Expression, ...], now: float
    ) -> Observed:
        """What its pods use (`PodTable.observed`), with what its claims hold beside it in
        `running` (never terminating: compared with the placement, `recompute._beyond`)."""
        pods = self.table.observed(namespace, names, exprs, now)
        claims = self.claims.observed(namespace, names, exprs)
        if not claims:
            return pods
        return Observed({**pods.running, **claims}, pods.terminating)

    def _set_error(self, error: str) -> bool:
        return self._report(error, self._claims_error)

    def _set_claims_error(self, error: str) -> bool:
        return self._report(self._error, error)

    def _report(self, error: str, claims_error: str) -> bool:
        """Record the errors; True when what `error` says changed (every quota was told)."""
        was = self.error
        self._error, self._claims_error = error, claims_error
        now = self.error
        if self._metrics is not None:
            self._metrics.member_up.labels(self.name).set(0 if now else 1)
        if now == was:
            return False
        if now:
            log.warning(
                "member cluster unreachable; keeping its last figures",
                extra={"cluster": self.name, "error": now},
            )
        else:
            log.info("member cluster observed", extra={"cluster": self.name})
        self._on_change(None)
        return True

    def _settled(self, was: bool, told: bool) -> None:
        """First observed (pods and claims): every namespace's figures are news."""
        if self.synced and not was and not told:
            self._on_change(None)

    def _publish(self, namespaces: Collection[str]) -> None:
        if self._metrics is not None:
            self._metrics.member_pods.labels(self.name).set(len(self.table))
        if namespaces:
            self._on_change(namespaces)

    async def _client(self) -> KubeClient:
        a = self.access
        secret = await self._secrets(a.secret_namespace, a.secret_name)
        token = _secret_value(secret, "token")
        if not token:
            raise ValueError(f"secret {a.secret_namespace}/{a.secret_name} has no token")
        ca = _secret_value(secret, "caBundle")
        return self._client_factory(a.endpoint, token.decode(), ca, a.insecure)

    async def connect(self) -> KubeClient:
        """A new client for this member, from the Cluster's credentials as they are now (the
        guard keeper's watch of the guards takes one per connection; the caller closes it)."""
        if self.access.problem:
            raise ValueError(self.access.problem)
        return await self._client()

    async def api(self) -> KubeClient:
        """A client for this member's API server (the guards' requests), built from the
        Cluster's credentials and kept until `reset_api` (after an error)."""
        if self.access.problem:
            raise ValueError(self.access.problem)
        if self._api is None:
            self._api = await self._client()
        return self._api

    @property
    def has_api(self) -> bool:
        """The guards' client is built (`reset_api` closes it)."""
        return self._api is not None

    async def reset_api(self) -> None:
        """Forget the guards' client: the next request re-reads the credentials."""
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    async def _disconnect(self, client: Lister) -> None:
        await cast(KubeClient, client).close()

    def _failed(self, e: BaseException) -> None:
        self._set_error(describe_error(e))

    def _claims_failed(self, e: BaseException) -> None:
        was = self.synced
        self._claims_settled = True  # its pods count without them (module docstring)
        self._settled(was, self._set_claims_error(describe_error(e)))

    # ---- informer.Handler ------------------------------------------------------------------

    def added(self, obj: Mapping[str, Any]) -> None:
        ns = self.table.apply("ADDED", obj)
        if ns is not None:
            self._publish((ns,))

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        ns = self.table.apply("DELETED", obj)
        if ns is not None:
            self._publish((ns,))

    def relisted(self, resource_version: int) -> None:
        was = self.synced
        self._synced = True
        self._publish(())
        self._settled(was, self._set_error(""))

    def claims_relisted(self) -> None:
        was = self.synced
        self._claims_settled = True
        self._settled(was, self._set_claims_error(""))

    def claims_changed(self, namespace: str | None) -> None:
        if self._metrics is not None:
            self._metrics.member_claims.labels(self.name).set(len(self.claims))
        if namespace is not None:
            self._on_change((namespace,))

    async def run(self) -> None:
        """List and watch its pods and its claims until cancelled; errors are reported,
        never raised."""
        if self.access.problem:
            self._set_error(self.access.problem)
            return
        await asyncio.gather(self.informer.run(), self.claim_informer.run())


class _ClaimFeed:
    """The claim informer's handler for one member (`informer.Handler`)."""

    def __init__(self, watch: MemberWatch) -> None:
        self.watch = watch

    def added(self, obj: Mapping[str, Any]) -> None:
        self.watch.claims_changed(self.watch.claims.apply("ADDED", obj))

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        self.watch.claims_changed(self.watch.claims.apply("DELETED", obj))

    def relisted(self, resource_version: int) -> None:
        self.watch.claims_relisted()


class Members:
    """Every member cluster the Karmada API server knows, and their pod watches.

    `on_change` (settable: the controller that reads the members is built after them) hears
    of a member's pods changing (their namespaces) or a member coming or going (None)."""

    def __init__(
        self,
        secrets: SecretReader,
        on_change: ChangeCallback = lambda namespaces: None,
        metrics: ControllerMetrics | None = None,
        enabled: bool = True,
        client_factory: ClientFactory = KubeClient.from_token,
    ) -> None:
        self._secrets = secrets
        self.on_change = on_change
        self._metrics = metrics
        self.enabled = enabled
        self._client_factory = client_factory
        self._watches: dict[str, MemberWatch] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _changed(self, namespaces: Collection[str] | None) -> None:
        self.on_change(namespaces)

    def views(self) -> list[MemberWatch]:
        return [self._watches[n] for n in sorted(self._watches)]

    def get(self, name: str) -> MemberWatch | None:
        return self._watches.get(name)

    def apply(self, cluster: Mapping[str, Any]) -> None:
        """A Cluster was seen (listed, added or modified): (re)start its watch if needed."""
        access = cluster_access(cluster)
        have = self._watches.get(access.name)
        if have is not None and have.access == access:
            return
        self._stop(access.name)
        watch = MemberWatch(
            access, self._secrets, self._changed, self._metrics, self._client_factory
        )
        self._watches[access.name] = watch
        log.info(
            "member cluster registered",
            extra={"cluster": access.name, "endpoint": access.endpoint, "watch": self.enabled},
        )
        if self.enabled:
            self._tasks[access.name] = asyncio.create_task(
                watch.run(), name=f"member-pods/{access.name}"
            )
        self.on_change(None)

    def remove(self, name: str) -> None:
        if name in self._watches:
            self._stop(name)
            del self._watches[name]
            if self._metrics is not None:
                for g in (
                    self._metrics.member_up,
                    self._metrics.member_pods,
                    self._metrics.member_claims,
                ):
                    with contextlib.suppress(KeyError):
                        g.remove(name)
            log.info("member cluster removed", extra={"cluster": name})
            self.on_change(None)

    def _stop(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        watch = self._watches.get(name)
        if watch is not None and watch.has_api:
            self._closing.add(asyncio.create_task(watch.reset_api()))

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(w.reset_api() for w in self._watches.values()), *self._closing)
