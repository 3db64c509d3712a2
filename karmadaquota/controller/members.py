"""Member clusters' pods, watched through the shared informer as Karmada reaches them.

A `Cluster` (cluster.karmada.io/v1alpha1) gives `spec.apiEndpoint` and `spec.secretRef`
{namespace, name}; that Secret on the Karmada API server holds `token` and `caBundle`
(`spec.insecureSkipTLSVerification` is honoured; `spec.proxyURL` is not supported). Each member
gets one task that lists the non-terminal pods of every namespace, then watches them.

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
        self._api: KubeClient | None = None  # requests of the member guards (not the watch)
        self._synced = False
        self._error = access.problem
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

    @property
    def name(self) -> str:
        return self.access.name

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def error(self) -> str:
        return self._error

    def observed(
        self, namespace: str, names: Collection[str], exprs: tuple[Expression, ...], now: float
    ) -> Observed:
        return self.table.observed(namespace, names, exprs, now)

    def _set_error(self, error: str) -> None:
        if self._metrics is not None:
            self._metrics.member_up.labels(self.name).set(0 if error else 1)
        if error != self._error:
            if error:
                log.warning(
                    "member cluster unreachable; keeping its last figures",
                    extra={"cluster": self.name, "error": error},
                )
            else:
                log.info("member cluster observed", extra={"cluster": self.name})
            self._error = error
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
        self._synced = True
        self._publish(())
        self._set_error("")

    async def run(self) -> None:
        """List and watch until cancelled; errors are reported, never raised."""
        if self.access.problem:
            self._set_error(self.access.problem)
            return
        await self.informer.run()


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
                for g in (self._metrics.member_up, self._metrics.member_pods):
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
