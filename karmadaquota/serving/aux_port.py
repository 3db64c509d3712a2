"""The health and metrics port of both programs (the controller's, the webhook's plain one).

It reveals nothing beyond ok / not ok on `/healthz` and `/readyz` (the kubelet probes them) and
serves `/metrics` only to whom `metrics_auth` allows; it holds nothing either: the listener is
`server.serve` without TLS, with the connection cap, header deadline and idle timeout of
`AUX_LIMITS` — the admission port's own mechanism.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from karmadaquota.serving.metrics_auth import Authorizer, metrics_handler
from karmadaquota.serving.server import AUX_LIMITS, Listener, ServerConfig, serve


def aux_app(
    registry: CollectorRegistry, authorizer: Authorizer, ready: Callable[[], bool]
) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(registry, authorizer))
    return app


async def serve_aux(
    registry: CollectorRegistry,
    authorizer: Authorizer,
    ready: Callable[[], bool],
    host: str,
    port: int,
    limits: ServerConfig = AUX_LIMITS,
    on_connection: Callable[[str], None] | None = None,
) -> Listener:
    """Serve the port on host:port (0 picks a free one) in plain HTTP within `limits`."""
    app = aux_app(registry, authorizer, ready)
    return await serve(app, host, port, None, limits, on_connection)


def limits(args: argparse.Namespace) -> ServerConfig:
    """The port's bounds from either program's flags (`--metrics-read-timeout`,
    `--metrics-max-connections`: karmadaquota.cli)."""
    return ServerConfig(
        read_timeout=args.metrics_read_timeout.total_seconds() or AUX_LIMITS.read_timeout,
        max_connections=args.metrics_max_connections,
        backlog=AUX_LIMITS.backlog,
    )
