"""The controller shell against a fake API server: sync gating, CAS writes, leadership."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karmadaquota.api import KarmadaQuota, ObjectReference, Reservation, format_time
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import Controller, ReconcilerConfig
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, JSON_PATCH, Body, Conflict, KubeError, NotFound
from tests.conftest import raw_binding
from tests.fake_api import patch_status
from tests.polling import until

NS = "team-a"


class FakeKarmada:
    """KarmadaQuotas and ResourceBindings with resourceVersion CAS and paginated lists."""

    def __init__(self) -> None:
        self.rv = 100
        self.quotas: dict[str, JSON] = {}
        self.bindings: dict[str, JSON] = {}
        self.puts = 0
        self.patches = 0  # JSON patches applied
        self.rejected_patches = 0  # JSON patches refused with 422 (a test failed)
        self.before_put: Callable[[JSON], Awaitable[None]] | None = None
        self.keep_hook = 1  # how many PUTs the hook runs before
        self.binding_gets = 0  # GETs of one binding by name (the orphan audit)
        self.quota_gets = 0  # GETs of one quota by name (re-reads after a lost CAS)

    def _bump(self, obj: JSON) -> JSON:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    def add_quota(self, name: str, hard: Mapping[str, str], **status: Any) -> JSON:
        obj = {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": name, "namespace": NS, "uid": f"q-{name}", "generation": 1},
            "spec": {"hard": dict(hard)},
            "status": dict(status),
        }
        self.quotas[name] = self._bump(obj)
        return copy.deepcopy(obj)

    def add_binding(self, name: str, **kw: Any) -> JSON:
        self.rv += 1
        raw = raw_binding(name, namespace=NS, rv=self.rv, **kw)
        have = self.bindings.get(raw["metadata"]["uid"])
        if have is not None and "generation" not in kw and have["spec"] != raw["spec"]:
            # like the API server: a spec change bumps the generation
            raw["metadata"]["generation"] = have["metadata"]["generation"] + 1
        self.bindings[raw["metadata"]["uid"]] = raw
        return copy.deepcopy(raw)

    def add_reservation(
        self,
        name: str,
        uid: str,
        reserved: Mapping[str, str],
        gen: int = 1,
        ttl: float = 60,
        binding: str = "",
    ) -> JSON:
        """The webhook's write: one more pending charge (of binding `binding`, default `uid`),
        in the wire layout (`status.pending`)."""
        q = self.quotas[name]
        status = KarmadaQuota.model_validate(q).status
        status.reservations.append(
            Reservation(
                reservedBy=ObjectReference(
                    apiVersion="work.karmada.io/v1alpha2",
                    kind="ResourceBinding",
                    name=binding or uid,
                    namespace=NS,
                    uid=uid,
                ),
                reserved=dict(reserved),
                expirationTime=format_time(datetime.now(UTC) + timedelta(seconds=ttl), True),
                generation=gen,
            )
        )
        q["status"] = status.model_dump(mode="json", exclude_none=True)
        return copy.deepcopy(self._bump(q))

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    async def request(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        await asyncio.sleep(0)
        params = params or {}
        if method == "GET" and path in (paths.bindings(), paths.quotas()):
            items = list((self.bindings if path == paths.bindings() else self.quotas).values())
            start = int(params.get("continue", "0"))
            limit = int(params.get("limit", "1000"))
            page = items[start : start + limit]
            meta: JSON = {"resourceVersion": str(self.rv)}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            return {"items": copy.deepcopy(page), "metadata": meta}
        if method == "GET" and "/resourcebindings/" in path:
            self.binding_gets += 1
            wanted = path.rsplit("/", 1)[1]
            for b in self.bindings.values():
                if b["metadata"]["name"] == wanted:
                    return copy.deepcopy(b)
            raise NotFound(404, "NotFound", wanted)
        name = path.split("/karmadaquotas/")[1].split("/")[0]
        if method == "GET":
            self.quota_gets += 1
            if name not in self.quotas:
                raise NotFound(404, "NotFound", name)
            return copy.deepcopy(self.quotas[name])
        assert method in ("PUT", "PATCH") and path.endswith("/status") and body is not None
        if self.before_put is not None:
            hook = self.before_put
            self.keep_hook -= 1
            if self.keep_hook <= 0:
                self.before_put = None
            await hook(body)
        current = self.quotas.get(name)
        if current is None:
            raise NotFound(404, "NotFound", name)
        if method == "PATCH":  # a JSON patch: applied to what is stored now, all or nothing
            assert content_type == JSON_PATCH and isinstance(body, list)
            try:
                patch_status(current, body)
            except KubeError:
                self.rejected_patches += 1
                raise
            self.patches += 1
            return copy.deepcopy(self._bump(current))
        assert isinstance(body, dict)
        self.puts += 1
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", name)
        current["status"] = copy.deepcopy(body["status"])
        return copy.deepcopy(self._bump(current))


class Lead:
    def __init__(self, leader: bool = True) -> None:
        self.leader = leader

    def is_leader(self) -> bool:
        return self.leader

    def remaining(self) -> float:
        return 100.0 if self.leader else -1.0


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeKarmada, Controller, Lead]]:
    api = FakeKarmada()
    lead = Lead()
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(quiet=0.01, max_delay=0.1, page_size=2, member_watch=False),
    )
    task = asyncio.create_task(c.run_queues())
    try:
        yield api, c, lead
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def used(api: FakeKarmada, name: str = "q") -> dict[str, str]:
    return dict(api.quotas[name].get("status", {}).get("used", {}))


def held(api: FakeKarmada, name: str = "q") -> list[Reservation]:
    """The quota's pending charges, decoded from the wire as stored."""
    return KarmadaQuota.model_validate(api.quotas[name]).status.reservations


def sample(c: Controller, name: str, **labels: str) -> float | None:
    """A metric as a scrape reads it."""
    return c.metrics.registry.get_sample_value(name, labels)


def quiet(c: Controller) -> bool:
    return c.idle()  # nothing marked, nothing flushing (expiry timers may be armed)


async def test_nothing_is_written_before_the_full_list(env: Any) -> None:
    api, c, _ = env
    q = api.add_quota("q", {"pods": "10"})
    c.quota_event("ADDED", q)
    await until(lambda: quiet(c))
    assert api.puts == 0
    for i in range(5):
        api.add_binding(f"b{i}", replicas=1)
    await c.resync()
    await until(lambda: used(api) == {"pods": "5"})
    assert api.quotas["q"]["status"]["summary"] == "pods: 5/10"


async def test_binding_events_recompute_and_write_only_on_change(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10", "requests.cpu": "4"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0", "requests.cpu": "0"})
    b = api.add_binding("web", replicas=2)
    c.binding_event("ADDED", b)
    await until(lambda: used(api) == {"pods": "2", "requests.cpu": "2"})
    writes = c.writes
    c.binding_event("MODIFIED", b)  # same version again
    c.mark_all()
    await until(lambda: quiet(c))
    assert c.writes == writes
    scaled = api.add_binding("web", replicas=1)
    c.binding_event("MODIFIED", scaled)
    await until(lambda: used(api) == {"pods": "1", "requests.cpu": "1"})
    c.binding_event("DELETED", scaled)
    await until(lambda: used(api) == {"pods": "0", "requests.cpu": "0"})


async def test_storm_of_events_is_a_few_writes(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "1000"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    writes = c.writes
    for i in range(500):
        c.binding_event("ADDED", api.add_binding(f"b{i}", replicas=1))
        if i % 50 == 0:
            await asyncio.sleep(0)
    await until(lambda: used(api) == {"pods": "500"})
    assert c.writes - writes <= 5


async def test_a_webhook_write_in_between_does_not_make_the_controller_lose(env: Any) -> None:
    """The controller's patch compare-and-swaps on its own revision: a reservation the webhook
    wrote after the controller's read is kept, and the controller neither loses nor re-reads."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    api.add_reservation("q", "uid-web", {"pods": "2"}, binding="web")
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    gets = api.quota_gets

    async def webhook_writes_first(_: Any) -> None:
        api.add_reservation("q", "uid-late", {"pods": "3"})

    api.before_put = webhook_writes_first
    c.binding_event("ADDED", api.add_binding("web", replicas=2, uid="uid-web"))
    await until(lambda: used(api) == {"pods": "2"})
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 0
    assert api.patches >= 2 and api.quota_gets == gets


async def test_another_controllers_write_in_between_is_a_conflict(env: Any) -> None:
    """Two controllers (an old leader's late write) still compare-and-swap: a write of the
    controller revision in between makes the patch fail; the fresh version is re-read."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})

    async def other_controller_writes_first(_: Any) -> None:
        q = api.quotas["q"]
        q["status"]["controllerRevision"] += 1
        api._bump(q)

    api.before_put = other_controller_writes_first
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await until(lambda: used(api) == {"pods": "2"})
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 1
    assert api.rejected_patches == 1
    assert api.quota_gets >= 1  # nothing newer was watched: the quota was read back


async def test_an_entry_that_moved_fails_the_patch_which_is_retried(env: Any) -> None:
    """Pending entries are removed by index after a test of their value: when the webhook's
    write in between moved them (it dropped an entry before them), the patch fails as a whole
    and the retry removes exactly the observed one."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    api.add_reservation("q", "uid-gone", {"pods": "1"}, binding="gone")
    api.add_reservation("q", "uid-web", {"pods": "1"}, binding="web")
    api.add_reservation("q", "uid-late", {"pods": "1"}, binding="late")
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})

    async def webhook_drops_the_first(_: Any) -> None:
        q = api.quotas["q"]
        q["status"]["pending"][0]["bindings"].pop(0)
        api._bump(q)

    api.before_put = webhook_drops_the_first
    c.binding_event("ADDED", api.add_binding("web", replicas=1, uid="uid-web"))
    await until(lambda: used(api) == {"pods": "1"})
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]
    assert api.rejected_patches == 1
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 1


async def test_an_old_layout_is_rewritten_as_pending_by_the_first_write(env: Any) -> None:
    """A status written before the upgrade (full objects in status.reservations): the
    controller reads it, keeps what is not observed and writes it as status.pending."""
    api, c, _ = env
    expires = format_time(datetime.now(UTC) + timedelta(seconds=600))
    old = [
        {
            "reservedBy": {
                "apiVersion": "work.karmada.io/v1alpha2",
                "kind": "ResourceBinding",
                "name": name,
                "namespace": NS,
                "uid": f"uid-{name}",
            },
            "reserved": {"pods": "2"},
            "expirationTime": expires,
            "generation": 1,
        }
        for name in ("web", "late")
    ]
    api.add_quota("q", {"pods": "10"}, reservations=old)
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await c.resync()
    await until(lambda: used(api) == {"pods": "2"})
    status = api.quotas["q"]["status"]
    assert "reservations" not in status
    assert status["pending"] == [
        {"charge": {"pods": "2"}, "expires": expires, "bindings": ["late/uid-late"]}
    ]
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]


async def test_after_a_lost_cas_the_watched_version_is_used_without_a_read(env: Any) -> None:
    """Another controller's winning write reaches the controller by watch before its retry:
    the retry is computed from that version, the quota is not read back from the server."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})

    async def other_controller_writes_first(_: Any) -> None:
        api.add_reservation("q", "uid-late", {"pods": "3"})
        q = api.quotas["q"]
        q["status"]["controllerRevision"] += 1
        c.quota_event("MODIFIED", copy.deepcopy(api._bump(q)))

    api.before_put = other_controller_writes_first
    gets = api.quota_gets
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await until(lambda: used(api) == {"pods": "2"})
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 1
    assert api.quota_gets == gets


async def test_observed_reservation_is_dropped_in_the_write_that_counts_it(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    api.add_reservation("q", "uid-web", {"pods": "2"}, gen=1)
    c.quota_event("MODIFIED", api.quotas["q"])
    await until(lambda: quiet(c))
    assert len(held(api)) == 1  # not observed yet: kept
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await until(lambda: used(api) == {"pods": "2"})
    assert held(api) == []
    assert sample(c, "karmadaquota_reservations_released_total", reason="observed") == 1


async def test_reservation_expires_without_any_event(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    api.add_reservation("q", "uid-never", {"pods": "2"}, ttl=0.3)
    c.quota_event("MODIFIED", api.quotas["q"])
    await until(lambda: held(api) == [], timeout=3)
    assert sample(c, "karmadaquota_reservations_released_total", reason="expired") == 1


async def test_follower_never_writes_and_a_new_leader_catches_up(env: Any) -> None:
    api, c, lead = env
    lead.leader = False
    api.add_quota("q", {"pods": "10"})
    api.add_binding("web", replicas=3)
    await c.resync()
    await until(lambda: quiet(c))
    assert api.puts == 0
    assert (
        sample(c, "karmadaquota_quota_used", quota_namespace=NS, quota="q", resource="pods") == 3
    )  # warm figures
    lead.leader = True
    c.leadership_changed(True)
    await until(lambda: used(api) == {"pods": "3"})
    assert sample(c, "karmadaquota_leader") == 1


async def test_resync_forgets_bindings_deleted_while_not_watching(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    api.add_binding("a", replicas=1)
    api.add_binding("b", replicas=1)
    await c.resync()
    await until(lambda: used(api) == {"pods": "2"})
    del api.bindings["uid-a"]
    api.rv += 1
    await c.resync()
    await until(lambda: used(api) == {"pods": "1"})


async def test_deleted_quota_is_forgotten(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    gone = api.quotas.pop("q")
    c.quota_event("DELETED", gone)
    assert c.quotas.quotas(NS) == []
    samples = [
        s
        for m in c.metrics.registry.collect()
        for s in m.samples
        if s.name == "karmadaquota_quota_used"
    ]
    assert samples == []


async def test_quota_deleted_during_write_is_not_an_error(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})

    async def delete_it(_: JSON) -> None:
        api.quotas.pop("q")

    api.before_put = delete_it
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await until(lambda: sample(c, "karmadaquota_status_writes_total", result="notfound") == 1)


async def test_sustained_contention_backs_off_and_gets_through(env: Any) -> None:
    """Another controller wins the CAS more times than we retry (while writing reservations
    that must survive): no error, a retry soon after."""
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    n = 0

    async def other_writes_first(_: Any) -> None:
        nonlocal n
        n += 1
        api.add_reservation("q", f"uid-{n}", {"pods": "1"})
        q = api.quotas["q"]
        q["status"]["controllerRevision"] += 1
        api._bump(q)

    api.keep_hook = c.settings.max_attempts + 2
    api.before_put = other_writes_first
    c.binding_event("ADDED", api.add_binding("web", replicas=2))
    await until(lambda: used(api) == {"pods": "2"})
    kept = {r.reservedBy.uid for r in held(api)}
    assert kept == {f"uid-{i}" for i in range(1, n + 1)}  # every webhook reservation survived
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == n


async def test_reservation_of_a_create_that_failed_after_admission_is_released_early(
    env: Any,
) -> None:
    """AlreadyExists after admission: the name is held by another uid, so the reserved
    binding cannot exist; released after the grace period, long before it expires."""
    api, c, _ = env
    c.settings.orphan_grace = 0.05
    api.add_quota("q", {"pods": "10"})
    web = api.add_binding("web", replicas=2)
    await c.resync()
    await until(lambda: used(api) == {"pods": "2"})
    api.add_reservation(
        "q", "uid-lost-race", {"pods": "2"}, ttl=600, binding=web["metadata"]["name"]
    )
    c.quota_event("MODIFIED", api.quotas["q"])
    await until(lambda: held(api) == [], timeout=3)
    assert used(api) == {"pods": "2"}


async def test_reservation_whose_name_is_free_is_kept_for_the_admission_window(
    env: Any,
) -> None:
    """No binding holds the name: the create may still be waiting on another webhook, so the
    reservation is kept until no create admitted then can be in flight, then released."""
    api, c, _ = env
    c.settings.orphan_grace = 0.05
    c.settings.admission_window = 1.0
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    api.add_reservation("q", "uid-in-flight", {"pods": "2"}, ttl=600)
    c.quota_event("MODIFIED", api.quotas["q"])
    seen = asyncio.get_running_loop().time()
    await until(lambda: api.binding_gets >= 1 and quiet(c), what="the first look")
    assert len(held(api)) == 1  # not yet: it may be in flight
    await until(lambda: held(api) == [], timeout=5)
    assert asyncio.get_running_loop().time() - seen >= 1.0
    assert api.binding_gets == 2  # one look after the grace, one after the window


async def test_reservation_of_an_existing_but_unindexed_binding_is_kept(env: Any) -> None:
    api, c, _ = env
    c.settings.orphan_grace = 0.05
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    late = api.add_binding("late", replicas=2)  # stored, but its watch event is not in yet
    uid, name = late["metadata"]["uid"], late["metadata"]["name"]
    api.add_reservation("q", uid, {"pods": "2"}, ttl=600, binding=name)
    c.quota_event("MODIFIED", api.quotas["q"])
    await until(lambda: api.binding_gets >= 1 and quiet(c), what="the orphan audit")
    assert len(held(api)) == 1
    c.binding_event("ADDED", late)
    await until(lambda: used(api) == {"pods": "2"})
    assert held(api) == []


async def test_a_binding_update_at_the_same_generation_is_not_charged_again(env: Any) -> None:
    api, c, _ = env
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    b = api.add_binding("web", replicas=2)
    c.binding_event("ADDED", b)
    await until(lambda: used(api) == {"pods": "2"})
    await until(lambda: quiet(c))
    entry = c.index.get(NS, b["metadata"]["uid"])
    status_update = copy.deepcopy(b)
    status_update["metadata"]["resourceVersion"] = str(api.rv + 1)
    status_update["spec"]["replicas"] = 7  # a marker: the API server bumps generation for this
    c.binding_event("MODIFIED", status_update)
    assert c.index.get(NS, b["metadata"]["uid"]) is entry and c.idle()
    status_update["metadata"]["generation"] = 2
    status_update["metadata"]["resourceVersion"] = str(api.rv + 2)
    c.binding_event("MODIFIED", status_update)
    await until(lambda: used(api) == {"pods": "7"})


async def test_room_freed_wakes_the_waiting_workload_and_the_list_survives_status_writes(
    env: Any,
) -> None:
    from karmadaquota.controller.wake import WakeConfig, Waker
    from tests.test_wake import FakeTemplates

    api, c, _ = env
    templates = FakeTemplates("b", namespace=NS)
    settings = WakeConfig(audit_period=0.0)
    c.waker = Waker(templates, c.metrics, settings)  # type: ignore[arg-type]
    entry = {
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"},
        "binding": "b-deployment",
        "requested": {"pods": "2"},
        "firstRefused": "2026-01-01T00:00:00.000000Z",
    }
    gone = {**entry, "template": {**entry["template"], "name": "gone", "uid": "uid-gone"}}
    # Karmada's detector raced itself: a's second create was refused after the first was admitted
    lost = {
        **entry,
        "template": {**entry["template"], "name": "a", "uid": "uid-a"},
        "binding": "a-deployment",
        "bindingUID": "uid-of-the-refused-duplicate",
    }
    api.add_quota("q", {"pods": "2"}, waiting=[entry, gone, lost])
    a = api.add_binding("a", replicas=2)
    await c.resync()
    await until(lambda: used(api) == {"pods": "2"})
    assert templates.patches == []  # no room: nobody woken
    # a deleted template is found by the audit and written away, so is the lost duplicate
    # create; the controller's status writes keep the rest of the list (the webhook owns it)
    await until(
        lambda: [w["template"]["name"] for w in api.quotas["q"]["status"]["waiting"]] == ["b"]
    )

    c.binding_event("DELETED", a)
    await until(lambda: templates.patched() == ["b"])
    assert used(api) == {"pods": "0"}
    assert [w["template"]["name"] for w in api.quotas["q"]["status"]["waiting"]] == ["b"]


async def test_a_slow_wake_never_holds_up_the_recompute_that_releases_quota(env: Any) -> None:
    """Waking has a queue of its own: while a template PATCH hangs, a deleted binding is still
    released in the quota's next write, and the wake completes once the PATCH answers."""
    from karmadaquota.controller.wake import WakeConfig, Waker
    from tests.test_wake import FakeTemplates

    class SlowTemplates(FakeTemplates):
        def __init__(self) -> None:
            super().__init__("b", namespace=NS)
            self.answer = asyncio.Event()

        async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON:
            await self.answer.wait()  # the API server is slow to answer, not synchronisation
            return await super().merge_patch(path, body, timeout)

    api, c, _ = env
    templates = SlowTemplates()
    c.waker = Waker(templates, c.metrics, WakeConfig())  # type: ignore[arg-type]
    entry = {
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"},
        "binding": "b-deployment",
        "requested": {"pods": "1"},
        "firstRefused": "2026-01-01T00:00:00.000000Z",
    }
    api.add_quota("q", {"pods": "3"}, waiting=[entry])
    a = api.add_binding("a", replicas=2)
    other = api.add_binding("other", replicas=1)
    await c.resync()
    await until(lambda: used(api) == {"pods": "3"})
    c.binding_event("DELETED", a)  # room for b: its wake starts and hangs on the PATCH
    await until(lambda: used(api) == {"pods": "1"} and not c.wakes.idle())
    c.binding_event("DELETED", other)
    await until(lambda: used(api) == {"pods": "0"})  # released while the wake still hangs
    assert templates.patches == [] and not c.wakes.idle()
    templates.answer.set()
    await until(lambda: templates.patched() == ["b"])


async def test_deleting_the_refusing_quota_wakes_its_waiting_workload(env: Any) -> None:
    from karmadaquota.controller.wake import WakeConfig, Waker
    from tests.test_wake import FakeTemplates

    api, c, _ = env
    templates = FakeTemplates("b", namespace=NS)
    c.waker = Waker(templates, c.metrics, WakeConfig())  # type: ignore[arg-type]
    entry = {
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"},
        "binding": "b-deployment",
        "requested": {"pods": "2"},
        "firstRefused": "2026-01-01T00:00:00.000000Z",
    }
    api.add_quota("q", {"pods": "0"}, waiting=[entry])
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    assert templates.patches == []  # hard 0: it does not fit
    # the namespace has no quota left: nothing limits b, and only the deleted quota knew of it
    c.quota_event("DELETED", api.quotas.pop("q"))
    await until(lambda: templates.patched() == ["b"])
    assert sample(c, "karmadaquota_wakeups_total", result="woken") == 1


async def test_managed_fields_are_neither_kept_nor_written(env: Any) -> None:
    """The server's field-ownership bookkeeping is dropped from the quota table (memory) and
    omitted from status writes (the server then keeps its own)."""
    api, c, _ = env
    q = api.add_quota("q", {"pods": "10"})
    api.quotas["q"]["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:hard": {}}}}
    ]
    bodies: list[JSON] = []

    async def record(body: JSON) -> None:
        bodies.append(body)

    api.before_put, api.keep_hook = record, 10
    await c.resync()
    await until(lambda: used(api) == {"pods": "0"})
    assert bodies and all("managedFields" not in b["metadata"] for b in bodies)
    record_ = c.quotas.get(NS, "q")
    assert record_ is not None and "managedFields" not in record_.raw["metadata"]
    assert record_.raw["metadata"]["uid"] == q["metadata"]["uid"]
    assert "managedFields" in api.quotas["q"]["metadata"]  # the server's own stays


class Namespaces:
    """karmada-apiserver's namespaces as the controller labels them (GET, merge patch)."""

    def __init__(self, api: FakeKarmada, labels: dict[str, str] | None = None) -> None:
        self.labels = dict(labels or {})
        self.patches = 0
        self.fail: Exception | None = None
        original = api.request

        async def request(method: str, path: str, *args: Any, **kw: Any) -> JSON:
            if path == f"/api/v1/namespaces/{NS}":
                if self.fail is not None:
                    raise self.fail
                return {"metadata": {"name": NS, "labels": dict(self.labels)}}
            return await original(method, path, *args, **kw)

        api.request = request  # type: ignore[method-assign]

    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON:
        assert path == f"/api/v1/namespaces/{NS}"
        if self.fail is not None:
            raise self.fail
        self.patches += 1
        self.labels.update(body["metadata"]["labels"])
        return {"metadata": {"name": NS, "labels": dict(self.labels)}}


def enforced_condition(api: FakeKarmada) -> dict[str, Any] | None:
    conditions = api.quotas["q"].get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Enforced"), None)


async def test_the_leader_labels_a_quotas_namespace_for_enforcement_once(env: Any) -> None:
    """A quota created before the label existed (an upgrade): its namespace's bindings skip the
    webhook until labelled; the quota says so in Enforced, then True once labelled."""
    api, c, _ = env
    ns = Namespaces(api)
    ns.fail = KubeError(403, "Forbidden", "cannot patch namespaces")
    c.namespace_api = ns
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: (enforced_condition(api) or {}).get("status") == "False")
    assert enforced_condition(api)["reason"] == "NamespaceNotLabeled"  # type: ignore[index]
    ns.fail = None  # retried by itself
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True", timeout=10)
    assert ns.labels == {"quota.karmada.io/enforced": "true"} and ns.patches == 1
    cond = enforced_condition(api)
    assert cond is not None and cond["reason"] == "NamespaceLabeled"
    # labelled once: later flushes neither read nor patch it again until a full relist
    c.binding_event("ADDED", api.add_binding("b", replicas=1))
    await until(lambda: used(api) == {"pods": "1"})
    assert ns.patches == 1


async def test_a_quota_switched_to_queue_gets_its_namespace_labelled_for_queueing(
    env: Any,
) -> None:
    """Labelled for enforcement first; once a quota of the namespace says onExceed: Queue (an
    update the webhook could not label, or one from before the label existed), the leader adds
    the queueing label — and a namespace whose quotas only refuse never gets it."""
    api, c, _ = env
    ns = Namespaces(api)
    c.namespace_api = ns
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    assert ns.labels == {"quota.karmada.io/enforced": "true"}
    api.quotas["q"]["spec"]["onExceed"] = "Queue"
    c.quota_event("MODIFIED", copy.deepcopy(api._bump(api.quotas["q"])))
    await until(lambda: ns.labels.get("quota.karmada.io/queueing") == "true")
    assert ns.labels["quota.karmada.io/enforced"] == "true" and ns.patches == 2


async def test_an_already_labelled_namespace_is_not_patched_and_followers_never_label(
    env: Any,
) -> None:
    api, c, lead = env
    ns = Namespaces(api, {"quota.karmada.io/enforced": "true"})
    c.namespace_api = ns
    api.add_quota("q", {"pods": "10"})
    await c.resync()
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    assert ns.patches == 0
    lead.leader = False
    ns.labels = {}
    c._enforced.clear()
    c.mark_all()
    await until(lambda: quiet(c))
    assert ns.patches == 0
