"""The webhook's HTTP routes, the decision log and what each decision answers.

`/validate-resourcebinding`, `/validate-template`, `/validate-overridepolicy`,
`/validate-karmadaquota` (each a handler of `handlers.Webhook`), `/mutate-resourcebinding`
(the queue's patch), `/healthz`, `/readyz` (ready once the quota caches have synced, not while
draining) and `/metrics` (for whom the authorizer allows).
"""

from __future__ import annotations

import base64
import logging
import time

import orjson
from aiohttp import web

from karmadaquota import queueing
from karmadaquota.evaluate import Decision
from karmadaquota.serving import metrics_auth
from karmadaquota.serving.server import MAX_BODY_BYTES
from karmadaquota.webhook import review
from karmadaquota.webhook.admission import (
    REASON_INVALID,
    REASON_NOT_READY,
    REASON_TIMEOUT,
    review_budget,
)
from karmadaquota.webhook.batcher import REASON_TOO_MANY
from karmadaquota.webhook.handlers import Webhook

log = logging.getLogger("karmadaquota.webhook")


def _code(d: Decision) -> int:
    codes = {
        REASON_INVALID: 422,
        REASON_NOT_READY: 503,
        REASON_TOO_MANY: 429,
        REASON_TIMEOUT: 504,
    }
    return codes.get(d.reason, 403)


class DecisionLog:
    """Logs admission decisions without costing the hot path a log line per allowed review.

    Denials (what an operator looks for) are logged one by one at info; allowed reviews at
    debug, plus one info summary of the counts since the previous summary, written by the
    first decision after `interval` seconds (so an idle webhook writes nothing)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._since = time.monotonic()
        self._allowed = 0
        self._denied = 0

    def record(self, req: review.Request, kind: str, decision: Decision, elapsed: float) -> None:
        if decision.allowed:
            self._allowed += 1
        else:
            self._denied += 1
        level = logging.DEBUG if decision.allowed else logging.INFO
        if log.isEnabledFor(level):
            obj_meta = (req.object or {}).get("metadata", {})
            log.log(
                level,
                "admission decision",
                extra={
                    "namespace": req.namespace,
                    kind: obj_meta.get("name", req.name),
                    "uid": obj_meta.get("uid", ""),
                    "operation": req.operation,
                    "dry_run": req.dryRun,
                    "result": "allowed" if decision.allowed else "denied",
                    "reason": decision.reason,
                    "detail": decision.message,
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )
        now = time.monotonic()
        if now - self._since >= self.interval:
            log.info(
                "admission summary",
                extra={
                    "allowed": self._allowed,
                    "denied": self._denied,
                    "seconds": round(now - self._since, 1),
                },
            )
            self._since, self._allowed, self._denied = now, 0, 0


def build_app(
    webhook: Webhook,
    decisions: DecisionLog | None = None,
    metrics_authorizer: metrics_auth.Authorizer | None = None,
) -> web.Application:
    metrics = webhook.metrics
    decisions = decisions or DecisionLog()

    async def handle(request: web.Request, kind: str) -> web.Response:
        started = time.perf_counter()
        api_before: dict[str, float] = {}
        try:
            req = review.parse(await request.read())
            if kind == "binding":
                api_before = webhook.api_spent(req.namespace)
                decision = await webhook.admit_binding(
                    req, review_budget(request.query.get("timeout"))
                )
            elif kind == "override":
                decision = await webhook.admit_override(req)
            elif kind == "template":
                decision = await webhook.admit_template(
                    req, review_budget(request.query.get("timeout"))
                )
            else:
                decision = await webhook.admit_quota(req)
        except review.MalformedReview as e:
            metrics.decisions.labels("malformed", "BadRequest").inc()
            log.warning("malformed admission review", extra={"path": request.path, "error": str(e)})
            return web.Response(status=400, text=f"{e}\n")
        elapsed = time.perf_counter() - started
        api = 0.0
        if api_before:  # a binding's review: the writers it waited on, side by side
            after = webhook.api_spent(req.namespace)
            api = max(after.get(k, v) - v for k, v in api_before.items())
        metrics.observe_decision(
            req.operation, decision.allowed, decision.reason, elapsed, max(0.0, elapsed - api)
        )
        decisions.record(req, kind, decision, elapsed)
        body = review.response(
            req.uid, decision.allowed, decision.message, decision.reason, _code(decision)
        )
        return web.Response(body=review.dump(body), content_type="application/json")

    async def bindings(request: web.Request) -> web.Response:
        return await handle(request, "binding")

    async def mutate(request: web.Request) -> web.Response:
        try:
            req = review.parse(await request.read())
            queue = await webhook.mutate_binding(req)
        except review.MalformedReview as e:
            metrics.decisions.labels("malformed", "BadRequest").inc()
            log.warning("malformed admission review", extra={"path": request.path, "error": str(e)})
            return web.Response(status=400, text=f"{e}\n")
        body = review.response(req.uid, True)
        if queue is not None and req.object is not None:
            patch = queueing.queue_patch(req.object, queue.quota)
            body["response"]["patchType"] = "JSONPatch"
            body["response"]["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
            metrics.queued.labels(queue.reason).inc()
            log.info(
                "binding queued",
                extra={
                    "namespace": req.namespace,
                    "binding": (req.object.get("metadata") or {}).get("name", req.name),
                    "quota": queue.quota,
                    "reason": queue.reason,
                    "detail": queue.message,
                    "dry_run": req.dryRun,
                },
            )
        return web.Response(body=review.dump(body), content_type="application/json")

    async def quotas(request: web.Request) -> web.Response:
        return await handle(request, "quota")

    async def override_policies(request: web.Request) -> web.Response:
        return await handle(request, "override")

    async def templates(request: web.Request) -> web.Response:
        return await handle(request, "template")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if webhook.draining:
            return web.Response(status=503, text="shutting down\n")
        if webhook.quotas.synced.is_set() and (webhook.cluster is None or webhook.cluster.synced()):
            return web.Response(text="ok\n")
        return web.Response(status=503, text="quota cache not synced\n")

    metrics_handler = metrics_auth.metrics_handler(
        metrics.registry, metrics_authorizer or metrics_auth.LoopbackOnly()
    )

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/validate-resourcebinding", bindings)
    app.router.add_post("/mutate-resourcebinding", mutate)
    app.router.add_post("/validate-karmadaquota", quotas)
    app.router.add_post("/validate-overridepolicy", override_policies)
    app.router.add_post("/validate-template", templates)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app
