"""KubeClient against a real local HTTP server: what it sends and how it treats 401 and 429.

A broken client would: send no User-Agent (the API server's audit log then names
`Python/aiohttp`), give up on a rotated token until restarted, or fail a request the API
server only asked to retry later.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web

from karmadaquota import __version__
from karmadaquota.kube.client import KubeClient, KubeError, user_agent


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[web.Request], Callable[..., None]]]:
    """A local API server stand-in; `answer(handler)` sets how it answers."""
    seen: list[web.Request] = []
    handler: list[Callable[[web.Request], web.Response]] = [lambda r: web.json_response({})]

    async def any_path(request: web.Request) -> web.Response:
        seen.append(request)
        return handler[0](request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_path)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def answer(h: Callable[[web.Request], web.Response]) -> None:
        handler[0] = h

    yield f"http://127.0.0.1:{port}", seen, answer
    await runner.cleanup()


def kubeconfig(path: Path, server: str, token: str, ca_data: str = "") -> str:
    cluster = {"server": server, **({"certificate-authority-data": ca_data} if ca_data else {})}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


async def test_requests_name_the_component_and_version(server, tmp_path: Path) -> None:
    base, seen, _ = server
    client = await KubeClient.connect(
        kubeconfig(tmp_path / "k", base, "t"), user_agent=user_agent("webhook")
    )
    try:
        await client.get("/api")
        await client.merge_patch("/api/x", {"a": 1})
    finally:
        await client.close()
    assert [r.headers["User-Agent"] for r in seen] == [f"karmadaquota-webhook/{__version__}"] * 2
    assert seen[0].headers["Authorization"] == "Bearer t"


async def test_a_401_reloads_the_rotated_token_and_retries_once(server, tmp_path: Path) -> None:
    base, seen, answer = server
    path = kubeconfig(tmp_path / "k", base, "old")
    client = await KubeClient.connect(path)

    def only_new(r: web.Request) -> web.Response:
        if r.headers.get("Authorization") != "Bearer new":
            return web.json_response({"reason": "Unauthorized", "message": "no"}, status=401)
        return web.json_response({"ok": True})

    answer(only_new)
    try:
        kubeconfig(tmp_path / "k", base, "new")  # the Secret's file updated in place
        assert await client.get("/api") == {"ok": True}
        assert [r.headers["Authorization"] for r in seen] == ["Bearer old", "Bearer new"]
        assert client.credentials.token == "new"
        # still refused with the current token: one reload, no loop, the server's error
        kubeconfig(tmp_path / "k", base, "newer")
        answer(lambda r: web.json_response({"reason": "Unauthorized", "message": "no"}, status=401))
        seen.clear()
        with pytest.raises(KubeError, match="401 Unauthorized: no"):
            await client.get("/api")
        assert len(seen) == 2
    finally:
        await client.close()


async def test_a_429_waits_its_retry_after_within_the_timeout(server, tmp_path: Path) -> None:
    base, seen, answer = server
    client = await KubeClient.connect(kubeconfig(tmp_path / "k", base, "t"))
    answers = [429, 429, 200]

    def throttled(r: web.Request) -> web.Response:
        status = answers.pop(0)
        headers = {"Retry-After": "0.2"} if status == 429 else {}
        return web.json_response(
            {"reason": "TooManyRequests", "message": "x"}, status=status, headers=headers
        )

    answer(throttled)
    try:
        started = time.monotonic()
        assert await client.get("/api") == {"reason": "TooManyRequests", "message": "x"}
        assert time.monotonic() - started >= 0.4  # both Retry-Afters waited out
        assert len(seen) == 3
        # without Retry-After (an admission webhook's 429), as client-go: the 429 is the answer
        seen.clear()
        answer(
            lambda r: web.json_response(
                {"reason": "TooManyRequests", "message": "busy"}, status=429
            )
        )
        with pytest.raises(KubeError, match="429 TooManyRequests: busy"):
            await client.get("/api")
        assert len(seen) == 1
        # a Retry-After past the request's own timeout: the 429 is the answer, at once
        answer(
            lambda r: web.json_response(
                {"reason": "TooManyRequests", "message": "later"},
                status=429,
                headers={"Retry-After": "30"},
            )
        )
        started = time.monotonic()
        with pytest.raises(KubeError, match="429 TooManyRequests: later"):
            await client.request("GET", "/api", timeout=2.0)
        assert time.monotonic() - started < 1.0
    finally:
        await client.close()


async def test_no_writable_temp_dir_is_a_clear_start_up_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig with inline CA data on a read-only root without an emptyDir at /tmp: the
    webhook used to die with a bare `No usable temporary directory found` traceback."""
    import base64
    import tempfile

    from karmadaquota.kube.client import CredentialsError, load_credentials

    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    path = kubeconfig(tmp_path / "k", "https://127.0.0.1:6443", "t", ca_data=ca)

    def read_only_root(*_: object, **__: object) -> tuple[int, str]:
        raise FileNotFoundError(
            2, "No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp', '/']"
        )

    monkeypatch.setattr(tempfile, "mkstemp", read_only_root)
    with pytest.raises(CredentialsError, match=r"mount an emptyDir at /tmp") as e:
        await load_credentials(path)
    assert path in str(e.value)


async def test_requests_that_never_answer_hold_up_no_watch_and_no_lane() -> None:
    """Issue 46: at Karmada's size the controller's one pool of 64 connections was held by
    watches and by status writes the API server answered slowly; the Lease's renewals waited
    for a connection past their 2 s deadline, the leader lapsed, and nothing was written
    (103 of the cold start's 217 timed-out writes waited in `_wait_for_available_connection`).
    With the pool full of requests that never answer, a watch still connects (watches have a
    pool of their own) and a lane's request (the Lease's) still answers at once."""
    answer = asyncio.Event()
    hanging = 0

    async def slow(_: web.Request) -> web.Response:
        nonlocal hanging
        hanging += 1
        await answer.wait()  # an API server that does not answer, not synchronisation
        return web.json_response({})

    async def lease(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Lease"})

    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        obj = {"metadata": {"name": "q", "resourceVersion": "2"}}
        await resp.write(orjson.dumps({"type": "ADDED", "object": obj}) + b"\n")
        await answer.wait()
        return resp

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/lease", lease)
    app.router.add_get("/quotas", watch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient(f"http://127.0.0.1:{port}", ssl.create_default_context(), {})
    lane = client.lane(2)
    pool = 64  # the requests' pool, full
    hung = [asyncio.create_task(client.request("GET", "/slow", timeout=30)) for _ in range(pool)]
    try:
        deadline = time.monotonic() + 5
        while hanging < pool:
            assert time.monotonic() < deadline, hanging
            await asyncio.sleep(0.01)  # polling the server's count, with a deadline
        async with asyncio.timeout(2):
            assert await lane.get("/lease") == {"kind": "Lease"}
            events = client.watch("/quotas", "1")
            kind, obj = await anext(events)
            assert (kind, obj["metadata"]["name"]) == ("ADDED", "q")
            await events.aclose()
    finally:
        answer.set()
        for t in hung:
            t.cancel()
        await asyncio.gather(*hung, return_exceptions=True)
        await client.close()
        await runner.cleanup()
