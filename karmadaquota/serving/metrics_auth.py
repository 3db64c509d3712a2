"""Who may read /metrics: controller-runtime's secure metrics serving, without a proxy.

/metrics names every tenant's namespaces, quotas, usage and limits, so it is not for whoever can
reach the port. Two modes (`--metrics-auth`):

* `tokenreview`: the scraper sends `Authorization: Bearer <token>`; the API server named by
  `--metrics-auth-kubeconfig` (default: the pod's own ServiceAccount, i.e. the host cluster)
  authenticates it (TokenReview) and authorizes `get` on the non-resource URL `/metrics`
  (SubjectAccessReview) — the rule kube-prometheus already grants Prometheus. No token or a
  token the API server does not accept: 401; authenticated but not allowed: 403. Verdicts are
  cached per token (a hash of it) briefly, so a scrape every 30 s costs the API server two small
  requests a minute at most; an API server error is never cached and answers 500.
* `none`: /metrics answers only clients connecting from the pod itself (127.0.0.1 / ::1), 403
  otherwise: scrape through `kubectl port-forward` or a sidecar.

The decisions (`bearer`, `review_verdict`, `access_verdict`) are pure; `TokenReviewAuthorizer`
does the two requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from karmadaquota.serving.exposition import exposition

log = logging.getLogger("karmadaquota.metrics_auth")

JSON = dict[str, Any]
METRICS_PATH = "/metrics"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MODES = ("tokenreview", "none")


@dataclass(frozen=True)
class Verdict:
    status: int  # 200 allowed, 401 not authenticated, 403 not authorized, 500 review failed
    message: str
    user: str = ""


@dataclass(frozen=True)
class Identity:
    user: str
    uid: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


class Poster(Protocol):
    async def post(self, path: str, body: JSON) -> JSON: ...


class Authorizer(Protocol):
    async def check(self, request: web.Request) -> Verdict: ...

    async def close(self) -> None: ...


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def token_review(token: str) -> JSON:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }


def review_verdict(review: JSON) -> Identity | Verdict:
    """The identity a TokenReview authenticated, or the 401 it comes to."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Verdict(401, "Unauthorized: token not accepted")
    user = status.get("user") or {}
    return Identity(
        user=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra={str(k): [str(x) for x in v] for k, v in (user.get("extra") or {}).items()},
    )


def access_review(who: Identity, path: str = METRICS_PATH) -> JSON:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": who.user,
            "uid": who.uid,
            "groups": list(who.groups),
            "extra": who.extra,
            "nonResourceAttributes": {"path": path, "verb": "get"},
        },
    }


def access_verdict(review: JSON, who: Identity, path: str = METRICS_PATH) -> Verdict:
    status = review.get("status") or {}
    if status.get("allowed") and not status.get("denied"):
        return Verdict(200, "ok", who.user)
    return Verdict(403, f'Forbidden: user "{who.user}" may not get {path}', who.user)


def is_loopback(peer: object) -> bool:
    """Whether a transport's peername is the pod itself (not a forwarded address: the socket's)."""
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        return ipaddress.ip_address(str(peer[0]).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class LoopbackOnly:
    """`--metrics-auth=none`: only a client inside the pod may read /metrics."""

    async def check(self, request: web.Request) -> Verdict:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if is_loopback(peer):
            return Verdict(200, "ok")
        return Verdict(403, "Forbidden: /metrics is served to 127.0.0.1 only (--metrics-auth=none)")

    async def close(self) -> None:
        return None


class TokenReviewAuthorizer:
    """Bearer token -> TokenReview -> SubjectAccessReview for `get /metrics`, cached per token.

    `connect` makes the API client on first use (and again after a failure): a process whose
    reviewer is unreachable keeps serving probes and answers /metrics 500, never 200.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Poster]],
        allow_ttl: float = 60.0,
        deny_ttl: float = 10.0,
        max_entries: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self._api: Poster | None = None
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._max = max_entries
        self._clock = clock
        # sha256(token) -> (verdict, expiry); bounded, least recently used dropped first
        self._cache: OrderedDict[bytes, tuple[Verdict, float]] = OrderedDict()
        self.reviews = 0  # TokenReviews sent (a test counts what the cache saves)

    async def check(self, request: web.Request) -> Verdict:
        token = bearer(request.headers.get("Authorization"))
        if token is None:
            return Verdict(401, "Unauthorized: a bearer token is required")
        return await self.check_token(token)

    async def check_token(self, token: str) -> Verdict:
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and hit[1] > now:
            self._cache.move_to_end(key)
            return hit[0]
        try:
            verdict = await self._review(token)
        except Exception as e:  # the reviewer's failure is no verdict on the token
            self._api = None
            log.warning("metrics authorization failed", extra={"error": str(e)})
            return Verdict(500, "Internal Server Error: cannot review the token")
        ttl = self._allow_ttl if verdict.status == 200 else self._deny_ttl
        self._cache[key] = (verdict, now + ttl)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return verdict

    async def close(self) -> None:
        close = getattr(self._api, "close", None)
        self._api = None
        if close is not None:
            await close()

    async def _review(self, token: str) -> Verdict:
        if self._api is None:
            self._api = await self._connect()
        self.reviews += 1
        who = review_verdict(await self._api.post(TOKEN_REVIEWS, token_review(token)))
        if isinstance(who, Verdict):
            return who
        return access_verdict(await self._api.post(ACCESS_REVIEWS, access_review(who)), who)


def metrics_handler(
    registry: CollectorRegistry, authorizer: Authorizer
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """/metrics for those `authorizer` allows; the refusal says why, nothing more."""

    async def handle(request: web.Request) -> web.StreamResponse:
        verdict = await authorizer.check(request)
        if verdict.status != 200:
            challenge = verdict.status == 401
            headers = {"WWW-Authenticate": 'Bearer realm="metrics"'} if challenge else {}
            return web.Response(status=verdict.status, text=f"{verdict.message}\n", headers=headers)
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
        await response.prepare(request)
        for piece in exposition(registry):  # never the whole text at once (serving.exposition)
            await response.write(piece)
            # and never the whole scrape in one go of the loop: at 5,000 quotas over 100
            # clusters it held the controller's loop for seconds, Lease renewals included
            # (docs/benchmarks.md, issue 46)
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    return handle


def authorizer(mode: str, kubeconfig: str | None) -> Authorizer:
    """The authorizer of `--metrics-auth` (`--metrics-auth-kubeconfig`: None is in-cluster)."""
    if mode == "none":
        return LoopbackOnly()
    if mode != "tokenreview":
        raise ValueError(f"--metrics-auth must be one of {', '.join(MODES)}, got {mode!r}")
    from karmadaquota.kube.client import KubeClient, user_agent

    async def connect() -> Poster:
        return await KubeClient.connect(kubeconfig, user_agent=user_agent("metrics-auth"))

    return TokenReviewAuthorizer(connect)
