"""/metrics behind TokenReview + SubjectAccessReview (or loopback only), and the health and
metrics port's bounds: what an unauthenticated client on the network gets from it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Gauge

from karmadaquota import cli
from karmadaquota.kube.client import JSON, KubeError
from karmadaquota.serving import metrics_auth
from karmadaquota.serving.aux_port import serve_aux
from karmadaquota.serving.metrics_auth import (
    LoopbackOnly,
    TokenReviewAuthorizer,
    bearer,
    is_loopback,
)
from karmadaquota.serving.server import Listener, ServerConfig
from tests.fake_api import FakeApiServer, Ref

GOOD, READER, BAD = "tok-prometheus", "tok-reader", "tok-nobody"
USERS = {
    GOOD: ("system:serviceaccount:monitoring:prometheus", ["system:serviceaccounts"]),
    READER: ("alice", ["tenants"]),
}
ALLOWED = {"system:serviceaccount:monitoring:prometheus"}  # granted get on /metrics


class Reviewer:
    """The API server's authenticator and authorizer, as the fake's admission hook: it fills
    the status of each TokenReview / SubjectAccessReview created."""

    def __init__(self) -> None:
        self.api = FakeApiServer()
        self.api.webhook = self._review
        self.access: list[JSON] = []

    def _review(self, method: str, ref: Ref, doc: JSON) -> None:
        if ref.plural == "tokenreviews":
            user = USERS.get(doc["spec"]["token"])
            doc["status"] = (
                {"authenticated": True, "user": {"username": user[0], "groups": user[1]}}
                if user
                else {"authenticated": False, "error": "invalid bearer token"}
            )
        elif ref.plural == "subjectaccessreviews":
            self.access.append(doc["spec"])
            attrs = doc["spec"]["nonResourceAttributes"]
            ok = doc["spec"]["user"] in ALLOWED and attrs == {"path": "/metrics", "verb": "get"}
            doc["status"] = {"allowed": ok}

    async def post(self, path: str, body: JSON) -> JSON:
        return await self.api.request("POST", path, body)

    def authorizer(self, **kw: Any) -> TokenReviewAuthorizer:
        async def connect() -> Reviewer:
            return self

        return TokenReviewAuthorizer(connect, **kw)


def test_bearer_takes_only_a_bearer_token() -> None:
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic YTpi") is None
    assert bearer("Bearer ") is None
    assert bearer(None) is None


def test_loopback_is_the_socket_peer_only() -> None:
    assert is_loopback(("127.0.0.1", 5555))
    assert is_loopback(("::1", 5555, 0, 0))
    assert not is_loopback(("10.0.0.7", 5555))
    assert not is_loopback(None)
    assert not is_loopback(("not-an-ip", 1))


async def test_token_review_then_access_review_for_get_metrics() -> None:
    r = Reviewer()
    auth = r.authorizer()
    assert (await auth.check_token(GOOD)).status == 200
    assert r.access[-1]["user"] == USERS[GOOD][0]
    assert r.access[-1]["groups"] == USERS[GOOD][1]
    assert r.access[-1]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    denied = await auth.check_token(READER)
    assert denied.status == 403 and '"alice"' in denied.message
    assert (await auth.check_token(BAD)).status == 401
    assert r.api.calls["POST tokenreviews"] == 3
    assert r.api.calls["POST subjectaccessreviews"] == 2  # none for the unauthenticated one


async def test_verdicts_are_cached_briefly_per_token() -> None:
    now = [0.0]
    r = Reviewer()
    auth = r.authorizer(allow_ttl=60, deny_ttl=10, clock=lambda: now[0])
    for _ in range(5):
        assert (await auth.check_token(GOOD)).status == 200
        assert (await auth.check_token(BAD)).status == 401
    assert auth.reviews == 2
    now[0] = 11  # the denial expired, the grant not yet
    assert (await auth.check_token(BAD)).status == 401
    assert (await auth.check_token(GOOD)).status == 200
    assert auth.reviews == 3
    now[0] = 61  # a revoked grant lasts at most allow_ttl
    ALLOWED.discard(USERS[GOOD][0])
    try:
        assert (await auth.check_token(GOOD)).status == 403
    finally:
        ALLOWED.add(USERS[GOOD][0])


async def test_the_cache_is_bounded_against_a_flood_of_random_tokens() -> None:
    auth = Reviewer().authorizer(max_entries=8)
    for i in range(50):
        assert (await auth.check_token(f"random-{i}")).status == 401
    assert len(auth._cache) == 8


async def test_an_api_server_failure_answers_500_and_is_not_cached() -> None:
    r = Reviewer()
    auth = r.authorizer()
    r.api.fail = KubeError(503, "ServiceUnavailable", "etcd down")
    assert (await auth.check_token(GOOD)).status == 500
    r.api.fail = None
    assert (await auth.check_token(GOOD)).status == 200


async def test_tokens_are_not_kept_in_clear() -> None:
    auth = Reviewer().authorizer()
    await auth.check_token(GOOD)
    assert all(GOOD.encode() not in k for k in auth._cache)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="tokenreview, none"):
        metrics_auth.authorizer("open", None)


def test_the_flags_reach_both_programs() -> None:
    parse = cli._parser().parse_args
    w = cli.webhook_config(
        parse(
            [
                *("webhook", "--tls-cert-file=c", "--tls-private-key-file=k"),
                *("--metrics-auth=tokenreview", "--metrics-auth-kubeconfig=/k"),
                *("--metrics-read-timeout=2s", "--metrics-max-connections=7"),
                "--client-ca-file=/ca.crt",
            ]
        )
    )
    assert (w.metrics_auth, w.metrics_auth_kubeconfig, w.client_ca_file) == (
        "tokenreview",
        "/k",
        "/ca.crt",
    )
    assert (w.aux_limits.read_timeout, w.aux_limits.max_connections) == (2.0, 7)
    default = cli.webhook_config(
        parse(["webhook", "--tls-cert-file=c", "--tls-private-key-file=k"])
    )
    assert default.metrics_auth == "none" and default.client_ca_file is None
    from karmadaquota.controller.main import config_from

    c = config_from(parse(["controller", "--metrics-auth=tokenreview"]), {})
    assert c.metrics_auth == "tokenreview" and c.aux_limits.max_connections == 64
    with pytest.raises(SystemExit):
        parse(["controller", "--metrics-max-connections=0"])


# ---- the port ------------------------------------------------------------------------------


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("karmadaquota_quota_hard", "h", ["quota_namespace"], registry=reg).labels("team-a").set(4)
    return reg


async def get(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
        s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r,
    ):
        return r.status, await r.text()


async def test_metrics_answer_401_403_200_and_health_reveals_nothing() -> None:
    r = Reviewer()
    ready = [False]
    listener = await serve_aux(registry(), r.authorizer(), lambda: ready[0], "127.0.0.1", 0)
    try:
        status, text = await get(listener.port, "/metrics")
        assert status == 401 and "team-a" not in text
        status, text = await get(listener.port, "/metrics", BAD)
        assert status == 401 and "team-a" not in text
        status, text = await get(listener.port, "/metrics", READER)
        assert status == 403 and "team-a" not in text
        status, text = await get(listener.port, "/metrics", GOOD)
        assert status == 200 and 'quota_namespace="team-a"' in text
        assert await get(listener.port, "/healthz") == (200, "ok\n")
        assert await get(listener.port, "/readyz") == (503, "not ready\n")
        ready[0] = True
        assert await get(listener.port, "/readyz") == (200, "ok\n")
    finally:
        await listener.close()


async def test_without_auth_metrics_answer_loopback_clients_only() -> None:
    class Remote(LoopbackOnly):
        """The same check, as if the client came from another pod."""

        async def check(self, request: Any) -> metrics_auth.Verdict:
            return await super().check(_Peer(request, ("10.1.2.3", 40000)))

    listener = await serve_aux(registry(), LoopbackOnly(), lambda: True, "127.0.0.1", 0)
    remote = await serve_aux(registry(), Remote(), lambda: True, "127.0.0.1", 0)
    try:
        assert (await get(listener.port, "/metrics"))[0] == 200
        status, text = await get(remote.port, "/metrics")
        assert status == 403 and "team-a" not in text and "127.0.0.1 only" in text
        assert (await get(remote.port, "/healthz"))[0] == 200
    finally:
        await listener.close()
        await remote.close()


class _Peer:
    def __init__(self, request: Any, peer: tuple[str, int]) -> None:
        self.transport = _Transport(peer)
        self.headers = request.headers


class _Transport:
    def __init__(self, peer: tuple[str, int]) -> None:
        self._peer = peer

    def get_extra_info(self, name: str) -> Any:
        return self._peer if name == "peername" else None


async def _closed(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the server closed the connection (EOF); fails after `within`."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        try:
            while await reader.read(1024):
                pass
        except ConnectionResetError:  # closed with our half-sent request unread
            pass
    return time.monotonic() - started


async def start_limited(limits: ServerConfig) -> Listener:
    return await serve_aux(registry(), LoopbackOnly(), lambda: True, "127.0.0.1", 0, limits)


async def test_idle_and_half_sent_connections_are_closed_at_the_header_deadline() -> None:
    listener = await start_limited(ServerConfig(read_timeout=0.5, max_connections=10))
    try:
        idle = await asyncio.open_connection("127.0.0.1", listener.port)
        half = await asyncio.open_connection("127.0.0.1", listener.port)
        half[1].write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        await half[1].drain()
        waited = await asyncio.gather(_closed(idle[0], 5), _closed(half[0], 5))
        assert all(0.3 < w < 3 for w in waited), waited
        assert listener.guard.timed_out == 2
        # a keep-alive connection goes idle after its answer: closed too
        keep = await asyncio.open_connection("127.0.0.1", listener.port)
        keep[1].write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await keep[1].drain()
        assert 0.3 < await _closed(keep[0], 5) < 3
        for _, w in (idle, half, keep):
            w.close()
    finally:
        await listener.close()


async def test_the_connection_cap_holds_and_a_probe_gets_through_after_the_deadline() -> None:
    listener = await start_limited(ServerConfig(read_timeout=1.0, max_connections=4))
    held = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(4)]
    try:
        over = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await _closed(over[0], 2) < 0.5  # closed at once, not queued
        assert listener.guard.refused >= 1
        assert len(listener.runner.server.connections) <= 4  # type: ignore[union-attr]
        over[1].close()
        # the held ones time out; then the port serves again
        await asyncio.gather(*(_closed(r, 5) for r, _ in held))
        assert await get(listener.port, "/healthz") == (200, "ok\n")
    finally:
        for _, w in held:
            w.close()
        await listener.close()


async def test_the_cap_holds_against_a_burst_accepted_in_one_loop_turn() -> None:
    """aiohttp counts a connection from connection_made on: a burst accepted at once passed a
    cap on that count alone (23 of 60 kept with a cap of 20 on the bed)."""
    listener = await start_limited(ServerConfig(read_timeout=1.0, max_connections=20))
    conns = await asyncio.gather(
        *(asyncio.open_connection("127.0.0.1", listener.port) for _ in range(60))
    )
    try:
        waits = await asyncio.gather(*(_closed(r, 5) for r, _ in conns))
        kept = sum(1 for w in waits if w > 0.5)
        assert kept <= 20, f"{kept} connections held with a cap of 20"
        assert listener.guard.refused >= 40
    finally:
        for _, w in conns:
            w.close()
        await listener.close()


async def test_a_large_scrape_never_holds_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: a scrape of 5,000 quotas' series (250,000 samples) was written without
    yielding to the loop (a fast reader never makes `write` wait), and held the controller's
    loop for seconds: its Lease renewals timed out. The loop runs other tasks between the
    pieces of a scrape."""
    registry = CollectorRegistry()
    gauge = Gauge("many", "many series", ["i"], registry=registry)
    for i in range(20_000):
        gauge.labels(str(i)).set(i)
    written: list[bytes] = []

    class Response:  # a reader that never makes the writer wait
        def __init__(self, **_: Any) -> None: ...

        async def prepare(self, _: Any) -> None: ...

        async def write(self, piece: bytes) -> None:
            written.append(piece)

        async def write_eof(self) -> None: ...

    class Allow:
        async def check(self, _: Any) -> Any:
            return metrics_auth.Verdict(200, "")

    monkeypatch.setattr(metrics_auth.web, "StreamResponse", Response)
    handle = metrics_auth.metrics_handler(registry, Allow())  # type: ignore[arg-type]
    scrape = asyncio.ensure_future(handle(None))  # type: ignore[arg-type]
    ticks = 0
    while not scrape.done():
        ticks += 1
        await asyncio.sleep(0)  # counting the loop's turns during the scrape
    await scrape
    assert b"".join(written).count(b"\nmany{") == 20_000
    assert ticks >= 5, ticks  # several turns of the loop while it was written
