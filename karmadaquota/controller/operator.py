"""kopf wiring: the operator's lifecycle and the member Clusters on the Karmada API server.

kopf runs embedded (`kopf.operator(...)` in our event loop), cluster-wide, standalone (no
KopfPeering CRD: our own Lease elects the writer), with event-watching handlers only — so kopf
never patches the watched objects (no finalizers, no annotations) and posts no k8s Events.
It watches only Clusters (a handful of objects that change rarely); ResourceBindings and
KarmadaQuotas, which change with every admission, reach the controller through the shared
informer (`kube.informer`), without kopf's per-event machinery. Handlers are `async` on
purpose: kopf runs sync handlers in threads, and the controller's state is not thread-safe.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from karmadaquota.controller.members import (
    CLUSTER_GROUP,
    CLUSTER_PLURAL,
    CLUSTER_VERSION,
    Members,
)
from karmadaquota.evictions import Readiness
from karmadaquota.kube.client import Credentials, KubeClient
from karmadaquota.kube.informer import RECONNECT

log = logging.getLogger("karmadaquota.controller.operator")


def connection_info(creds: Credentials) -> kopf.ConnectionInfo:
    """kopf's credentials: the ones the controller's own client was built from."""
    return kopf.ConnectionInfo(
        server=creds.host,
        ca_path=creds.ca_path,
        insecure=creds.insecure,
        scheme=creds.scheme,
        token=creds.token,
        certificate_path=creds.cert_path,
        private_key_path=creds.key_path,
    )


async def login_with(client: KubeClient) -> kopf.ConnectionInfo:
    """kopf's login handler: what the controller's client holds now, loaded again first (kopf
    logs in again after a 401: a rotated token reaches both watch stacks), so kopf and the
    informer run on one credential path — never kopf's own kubeconfig discovery."""
    await client.refresh_credentials()
    return connection_info(client.credentials)


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.posting.enabled = False  # no k8s Events from kopf's own logging
    s.watching.connect_timeout = 10
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    # one retry policy for both watch stacks: the informer's reconnection backoff
    s.networking.error_backoffs = RECONNECT.ceilings()
    s.watching.reconnect_backoff = RECONNECT.base
    s.peering.standalone = True
    s.peering.clusterwide = True
    return s


def registry(
    members: Members, client: KubeClient, readiness: Readiness | None = None
) -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await login_with(client)

    @kopf.on.event(CLUSTER_GROUP, CLUSTER_VERSION, CLUSTER_PLURAL, registry=reg)
    async def on_cluster(event: kopf.RawEvent, **_: Any) -> None:
        obj = event.get("object") or {}
        name = str((obj.get("metadata") or {}).get("name", ""))
        if event.get("type") == "DELETED":
            members.remove(name)
            if readiness is not None:
                readiness.forget(name)
        else:
            members.apply(obj)
            if readiness is not None:
                readiness.observe(obj)

    @kopf.on.cleanup(registry=reg)
    async def cleanup(**_: Any) -> None:
        # Member watch tasks were spawned from handlers: kopf would wait 5 s for them.
        await members.close()

    return reg
