"""Member pod watches: list + watch, relist on 410, unreachable members keep their figures."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

import pytest

from karmadaquota.controller.members import Members, MemberWatch, cluster_access
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.kube.client import JSON, Gone, NotFound
from tests.polling import until
from tests.test_controller_pods import pod


def cluster(name: str = "member1", **spec: Any) -> JSON:
    body = {
        "apiEndpoint": f"https://{name}.example:6443",
        "syncMode": "Push",
        "secretRef": {"namespace": "karmada-cluster", "name": name},
    }
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def secret(token: str = "t0ken", ca: bytes = b"") -> JSON:
    data = {"token": base64.b64encode(token.encode()).decode()}
    if ca:
        data["caBundle"] = base64.b64encode(ca).decode()
    return {"data": data}


class Script:
    """What the fake member API server does, connection after connection."""

    def __init__(self) -> None:
        self.pods: list[JSON] = []
        self.events: asyncio.Queue[tuple[str, JSON] | BaseException] = asyncio.Queue()
        self.down = False
        self.lists = 0
        self.clients: list[tuple[str, str, bytes | None, bool]] = []

    def factory(self, host: str, token: str, ca: bytes | None, insecure: bool) -> Any:
        self.clients.append((host, token, ca, insecure))
        return FakeClient(self)


class FakeClient:
    def __init__(self, script: Script) -> None:
        self.s = script

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        if self.s.down:
            raise OSError("connect: connection refused")
        params = params or {}
        assert params.get("fieldSelector") == "status.phase!=Succeeded,status.phase!=Failed"
        self.s.lists += 1
        start = int(params.get("continue", "0"))
        limit = int(params["limit"])
        meta: JSON = {"resourceVersion": "10"}
        if start + limit < len(self.s.pods):
            meta["continue"] = str(start + limit)
        return {"items": self.s.pods[start : start + limit], "metadata": meta}

    async def watch(
        self, path: str, rv: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        while True:
            item = await self.s.events.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def close(self) -> None:
        return None


class Changes:
    def __init__(self) -> None:
        self.seen: list[Collection[str] | None] = []

    def __call__(self, namespaces: Collection[str] | None) -> None:
        self.seen.append(None if namespaces is None else set(namespaces))


@pytest.fixture
async def watch() -> AsyncIterator[tuple[MemberWatch, Script, Changes]]:
    script = Script()
    changes = Changes()

    async def secrets(ns: str, name: str) -> JSON:
        return secret("abc", b"PEM")

    w = MemberWatch(
        cluster_access(cluster()),
        secrets,
        changes,
        ControllerMetrics(),
        client_factory=script.factory,
        page_size=2,
        min_backoff=0.01,
        max_backoff=0.05,
    )
    tasks: list[asyncio.Task[None]] = []
    script.start = lambda: tasks.append(asyncio.create_task(w.run()))  # type: ignore[attr-defined]
    try:
        yield w, script, changes
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def pods_in(w: MemberWatch, ns: str = "team-a") -> str:
    return str(w.observed(ns, {"pods"}, ()).get("pods"))


async def test_lists_then_follows_the_watch(watch: Any) -> None:
    w, script, changes = watch
    script.pods.extend([pod("a"), pod("b"), pod("c", namespace="other")])  # 2 pages
    script.start()
    await until(lambda: w.synced)
    assert w.error == "" and pods_in(w) == "2" and pods_in(w, "other") == "1"
    assert script.clients == [("https://member1.example:6443", "abc", b"PEM", False)]
    script.events.put_nowait(("ADDED", pod("d")))
    script.events.put_nowait(("MODIFIED", pod("a", phase="Failed")))
    script.events.put_nowait(("BOOKMARK", {"metadata": {"resourceVersion": "20"}}))
    team = lambda: set(w.table._by_ns.get("team-a", {}))  # noqa: E731
    await until(lambda: team() == {"uid-b", "uid-d"})
    assert pods_in(w) == "2" and len(w.table) == 3
    assert {"team-a"} in changes.seen


async def test_410_relists(watch: Any) -> None:
    w, script, _ = watch
    script.pods.append(pod("a"))
    script.start()
    await until(lambda: w.synced)
    script.pods.append(pod("b"))
    script.events.put_nowait(Gone(410, "Expired", "too old"))
    await until(lambda: script.lists >= 2 and pods_in(w) == "2")
    assert w.error == ""


async def test_unreachable_member_keeps_figures_and_recovers(watch: Any) -> None:
    w, script, changes = watch
    script.pods.append(pod("a"))
    script.start()
    await until(lambda: w.synced)
    script.down = True
    script.events.put_nowait(OSError("connection reset by peer"))
    await until(lambda: "connection refused" in w.error)
    assert pods_in(w) == "1" and w.synced  # last figures kept
    assert None in changes.seen  # every quota's condition must be refreshed
    script.down = False
    await until(lambda: w.error == "")


async def test_member_without_credentials_is_reported() -> None:
    changes = Changes()

    async def no_secret(ns: str, name: str) -> JSON:
        raise NotFound(404, "NotFound", f'secrets "{name}" not found')

    w = MemberWatch(
        cluster_access(cluster()), no_secret, changes, min_backoff=0.01, max_backoff=0.01
    )
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: "not found" in w.error)
        assert not w.synced
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_secret_without_token_is_reported() -> None:
    async def empty(ns: str, name: str) -> JSON:
        return {"data": {}}

    w = MemberWatch(cluster_access(cluster()), empty, Changes(), min_backoff=0.01)
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: "has no token" in w.error)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_pull_mode_cluster_cannot_be_observed() -> None:
    access = cluster_access({"metadata": {"name": "edge"}, "spec": {"syncMode": "Pull"}})
    assert "no apiEndpoint/secretRef" in access.problem
    assert cluster_access(cluster(insecureSkipTLSVerification=True)).insecure


async def test_members_restart_only_when_access_changes() -> None:
    script = Script()
    changes = Changes()

    async def secrets(ns: str, name: str) -> JSON:
        return secret()

    m = Members(secrets, changes, ControllerMetrics(), client_factory=script.factory)
    try:
        m.apply(cluster())
        first = m.get("member1")
        await until(lambda: first is not None and first.synced)
        m.apply(cluster())  # a status update: same access
        assert m.get("member1") is first
        m.apply(cluster(apiEndpoint="https://moved:6443"))
        assert m.get("member1") is not first
        m.apply(cluster("member2"))
        assert [v.name for v in m.views()] == ["member1", "member2"]
        m.remove("member1")
        assert [v.name for v in m.views()] == ["member2"]
        assert changes.seen.count(None) >= 3
    finally:
        await m.close()


async def test_disabled_members_are_known_but_not_watched() -> None:
    script = Script()
    m = Members(
        lambda ns, n: None,
        Changes(),
        enabled=False,  # type: ignore[arg-type,return-value]
        client_factory=script.factory,
    )
    m.apply(cluster())
    assert [v.name for v in m.views()] == ["member1"] and not m.views()[0].synced
    assert script.clients == []
    await m.close()
