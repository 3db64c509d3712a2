"""The webhook process: its admission handlers assembled (`handlers.assemble`), served over
HTTPS with a reloading certificate (`routes`, `serving`), and a plain metrics port if asked.

`running(config)` starts it all and yields the bound port; `karmadaquota webhook` (cli.py)
runs it until SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from karmadaquota.kube.client import KubeClient, user_agent
from karmadaquota.serving import metrics_auth
from karmadaquota.serving.aux_port import serve_aux
from karmadaquota.serving.certs import CertReloader
from karmadaquota.serving.server import serve
from karmadaquota.webhook.config import WebhookConfig
from karmadaquota.webhook.handlers import Webhook, assemble
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import build_app

log = logging.getLogger("karmadaquota.webhook")


@contextlib.asynccontextmanager
async def running(config: WebhookConfig) -> AsyncIterator[tuple[Webhook, int]]:
    """Start the whole webhook (client, quotas, batcher, HTTPS server); yields the bound port."""
    metrics = WebhookMetrics()
    client = await KubeClient.connect(config.kubeconfig, user_agent=user_agent("webhook"))
    webhook = assemble(client, config, metrics)
    certs = CertReloader(
        config.cert_file,
        config.key_file,
        metrics.serving_certificate_loaded,
        config.client_ca_file,
    )
    authorizer = metrics_auth.authorizer(config.metrics_auth, config.metrics_auth_kubeconfig)
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(webhook.run(), name="webhook-stores"),
        asyncio.create_task(certs.watch(config.cert_check_interval), name="cert-reload"),
    ]
    plain = None  # up before the HTTPS port: once /readyz answers, /metrics does too
    if config.metrics_port is not None:
        plain = await serve_aux(
            metrics.registry,
            authorizer,
            lambda: not webhook.draining and webhook.quotas.synced.is_set(),
            config.metrics_bind_address,
            config.metrics_port,
            config.aux_limits,
        )
        log.info(
            "metrics serving",
            extra={
                "address": config.metrics_bind_address,
                "port": plain.port,
                "auth": config.metrics_auth,
            },
        )
    listener = await serve(
        build_app(webhook, metrics_authorizer=authorizer),
        config.bind_address,
        config.port,
        certs.context,
        config.limits,
        metrics.connection,
    )
    port = listener.port
    log.info("webhook serving", extra={"address": config.bind_address, "port": port})
    try:
        yield webhook, int(port)
    finally:
        if plain is not None:
            await plain.close()
        await listener.close()
        await authorizer.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await webhook.close()
        await client.close()
