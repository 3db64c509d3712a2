"""kopf wiring: watch ResourceBindings, KarmadaQuotas and Clusters on the Karmada API server.

kopf runs embedded (`kopf.operator(...)` in our event loop), cluster-wide, standalone (no
KopfPeering CRD: our own Lease elects the writer), with event-watching handlers only — so kopf
never patches the watched objects (no finalizers, no annotations) and posts no k8s Events.
Handlers are `async` on purpose: kopf runs sync handlers in threads, and the index is not
thread-safe. They only fold the event into memory and mark the namespace dirty.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import load_incluster_config, load_kube_config

from karmadaquota import api
from karmadaquota.controller.core import Controller
from karmadaquota.controller.members import (
    CLUSTER_GROUP,
    CLUSTER_PLURAL,
    CLUSTER_VERSION,
    Members,
)

log = logging.getLogger("karmadaquota.controller.operator")


async def connection_info(kubeconfig: str | None) -> kopf.ConnectionInfo:
    """kopf credentials from a kubeconfig file, or the in-cluster service account."""
    cfg = Configuration()
    if kubeconfig:
        await load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken") or None
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    elif token:
        scheme = "Bearer"
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.posting.enabled = False  # no k8s Events from kopf's own logging
    s.watching.connect_timeout = 10
    s.watching.server_timeout = 300
    s.watching.client_timeout = 330
    s.peering.standalone = True
    s.peering.clusterwide = True
    return s


def registry(
    controller: Controller, members: Members, kubeconfig: str | None
) -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection_info(kubeconfig)

    @kopf.on.event(api.BINDING_GROUP, api.BINDING_VERSION, api.BINDING_PLURAL, registry=reg)
    async def on_binding(event: kopf.RawEvent, **_: Any) -> None:
        controller.binding_event(event.get("type"), event.get("object") or {})

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=reg)
    async def on_quota(event: kopf.RawEvent, **_: Any) -> None:
        controller.quota_event(event.get("type"), event.get("object") or {})

    @kopf.on.event(CLUSTER_GROUP, CLUSTER_VERSION, CLUSTER_PLURAL, registry=reg)
    async def on_cluster(event: kopf.RawEvent, **_: Any) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "DELETED":
            members.remove(str((obj.get("metadata") or {}).get("name", "")))
        else:
            members.apply(obj)

    @kopf.on.cleanup(registry=reg)
    async def cleanup(**_: Any) -> None:
        # Member watch tasks were spawned from handlers: kopf would wait 5 s for them.
        await members.close()

    return reg
