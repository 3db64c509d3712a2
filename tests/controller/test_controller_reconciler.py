"""The controller shell against the fake API server, fed by its real informers (list, then
watch): sync gating, CAS writes and re-reads, leadership, the jobs that follow a recompute."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karmadaquota.api import KarmadaQuota, ObjectReference, Reservation
from karmadaquota.controller import reconciler
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.controller.wake import WakeConfig, Waker
from karmadaquota.kube import namespaces, paths
from karmadaquota.kube.client import JSON, KubeError
from karmadaquota.kube.retry import Backoff
from karmadaquota.kube.versions import parse_rv
from karmadaquota.times import format_time
from tests.conftest import raw_binding
from tests.controller.test_wake import patched, templates
from tests.fake_api import FakeApiServer
from tests.polling import until

NS = "team-a"


def add_quota(
    api: FakeApiServer, name: str, hard: Mapping[str, str], spec: JSON | None = None, **status: Any
) -> JSON:
    """A KarmadaQuota in NS as a user creates it (with the status given, as if written)."""
    return api.add_quota(
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": name, "namespace": NS, "uid": f"q-{name}"},
            "spec": {"hard": dict(hard), **(spec or {})},
            "status": dict(status),
        },
    )


def add_binding(api: FakeApiServer, name: str, **kw: Any) -> JSON:
    """Create or update a ResourceBinding in NS (conftest.raw_binding's parameters)."""
    return api.put_binding(raw_binding(name, namespace=NS, **kw))


def quota(api: FakeApiServer, name: str = "q") -> JSON:
    """The quota as stored (read only)."""
    return api.quotas[(NS, name)]


def add_reservation(
    api: FakeApiServer,
    name: str,
    uid: str,
    reserved: Mapping[str, str],
    gen: int = 1,
    ttl: float = 60,
    binding: str = "",
) -> JSON:
    """The webhook's write: one more pending charge (of binding `binding`, default `uid`),
    in the wire layout (`status.pending`)."""

    def reserve(q: JSON) -> None:
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

    return api.bump(NS, name, reserve)


def next_revision(q: JSON) -> None:
    """Another controller's status write: its revision moves on."""
    q["status"]["controllerRevision"] += 1


class Lead:
    def __init__(self, leader: bool = True) -> None:
        self.leader = leader

    def is_leader(self) -> bool:
        return self.leader

    def remaining(self) -> float:
        return 100.0 if self.leader else -1.0


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeApiServer, Controller, Lead]]:
    api = FakeApiServer(rv=100)
    lead = Lead()
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(quiet=0.01, max_delay=0.1, page_size=2, member_watch=False),
    )
    async with controlling(c):
        yield api, c, lead


_informers: dict[int, list[asyncio.Task[None]]] = {}


@contextlib.asynccontextmanager
async def controlling(c: Controller) -> AsyncIterator[None]:
    """Run the controller's queues for the block; its informers once `listed` starts them."""
    tasks = [asyncio.create_task(c.run_queues())]
    try:
        yield
    finally:
        tasks += _informers.pop(id(c), [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def listed(c: Controller) -> None:
    """Start the controller's informers (list, then watch: what is there now is listed, what
    comes after is watched); return once both have listed in full."""
    if id(c) not in _informers:
        informers = [c.binding_informer, c.quotas.informer]
        if c.enforcement is not None:
            informers.append(c.enforcement.informer)
        _informers[id(c)] = [asyncio.create_task(i.run()) for i in informers]
    await until(c.synced.is_set, what="the first full list")


def used(api: FakeApiServer, name: str = "q") -> dict[str, str]:
    return dict(quota(api, name).get("status", {}).get("used", {}))


def held(api: FakeApiServer, name: str = "q") -> list[Reservation]:
    """The quota's pending charges, decoded from the wire as stored."""
    return KarmadaQuota.model_validate(quota(api, name)).status.reservations


def sample(c: Controller, name: str, **labels: str) -> float | None:
    """A metric as a scrape reads it."""
    return c.metrics.registry.get_sample_value(name, labels)


def quiet(c: Controller) -> bool:
    # every event delivered, nothing marked, nothing flushing (expiry timers may be armed)
    assert isinstance(c.api, FakeApiServer)
    return c.api.drained() and c.idle()


async def test_nothing_is_written_before_the_full_list(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    api.refuse["/resourcebindings"] = KubeError(500, "InternalError", "etcd is slow")
    c.binding_informer.backoff = Backoff(0.01, 0.01)
    informers = asyncio.gather(c.quotas.informer.run(), c.binding_informer.run())
    try:
        await until(lambda: c.quotas.has(NS) and api.calls["LIST resourcebindings"] == 0)
        await until(lambda: quiet(c))
        assert api.puts == 0 and api.patches == 0  # the quota alone: nothing is computed
        for i in range(5):
            add_binding(api, f"b{i}", replicas=1)
        del api.refuse["/resourcebindings"]
        await until(c.synced.is_set)
        await until(lambda: used(api) == {"pods": "5"})
    finally:
        informers.cancel()
        await asyncio.gather(informers, return_exceptions=True)
    await until(lambda: used(api) == {"pods": "5"})
    assert quota(api)["status"]["summary"] == "pods: 5/10"


async def test_binding_events_recompute_and_write_only_on_change(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10", "requests.cpu": "4"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0", "requests.cpu": "0"})
    add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2", "requests.cpu": "2"})
    writes = c.writes
    relists = c.binding_informer.relists
    api.compact()  # a relist: the same version again
    await until(lambda: c.binding_informer.relists > relists)
    c.mark_all()
    await until(lambda: quiet(c))
    assert c.writes == writes
    add_binding(api, "web", replicas=1)
    await until(lambda: used(api) == {"pods": "1", "requests.cpu": "1"})
    api.delete_binding(NS, "web-deployment")
    await until(lambda: used(api) == {"pods": "0", "requests.cpu": "0"})


async def test_storm_of_events_is_a_few_writes(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "1000"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    writes = c.writes
    for i in range(500):
        add_binding(api, f"b{i}", replicas=1)
        if i % 50 == 0:
            await asyncio.sleep(0)
    await until(lambda: used(api) == {"pods": "500"})
    assert c.writes - writes <= 5


async def test_a_webhook_write_in_between_does_not_make_the_controller_lose(env: Any) -> None:
    """The controller's patch compare-and-swaps on its own revision: a reservation the webhook
    wrote after the controller's read is kept, and the controller neither loses nor re-reads."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    add_reservation(api, "q", "uid-web", {"pods": "2"}, binding="web")
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    gets = api.calls["GET karmadaquotas"]

    def webhook_writes_first(*_: Any) -> None:
        add_reservation(api, "q", "uid-late", {"pods": "3"})

    api.intercept(webhook_writes_first)
    add_binding(api, "web", replicas=2, uid="uid-web")
    await until(lambda: used(api) == {"pods": "2"})
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 0
    assert api.patches >= 2 and api.calls["GET karmadaquotas"] == gets


async def test_another_controllers_write_in_between_is_a_conflict(env: Any) -> None:
    """Two controllers (an old leader's late write) still compare-and-swap: a write of the
    controller revision in between makes the patch fail; the fresh version is re-read."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})

    def other_controller_writes_first(*_: Any) -> None:
        api.hold("karmadaquotas")  # and its watch event is slow to come
        api.bump(NS, "q", next_revision)

    api.intercept(other_controller_writes_first)
    add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2"})
    api.release("karmadaquotas")
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 1
    assert api.rejected_patches == 1
    assert api.calls["GET karmadaquotas"] >= 1  # nothing newer was watched: the quota was read back


async def test_an_entry_that_moved_fails_the_patch_which_is_retried(env: Any) -> None:
    """Pending entries are removed by index after a test of their value: when the webhook's
    write in between moved them (it dropped an entry before them), the patch fails as a whole
    and the retry removes exactly the observed one."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    add_reservation(api, "q", "uid-gone", {"pods": "1"}, binding="gone")
    add_reservation(api, "q", "uid-web", {"pods": "1"}, binding="web")
    add_reservation(api, "q", "uid-late", {"pods": "1"}, binding="late")
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})

    def webhook_drops_the_first(*_: Any) -> None:
        api.bump(NS, "q", lambda q: q["status"]["pending"][0]["bindings"].pop(0))

    api.intercept(webhook_drops_the_first)
    add_binding(api, "web", replicas=1, uid="uid-web")
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
    add_quota(api, "q", {"pods": "10"}, reservations=old)
    add_binding(api, "web", replicas=2)
    await listed(c)
    await until(lambda: used(api) == {"pods": "2"})
    status = quota(api)["status"]
    assert "reservations" not in status
    assert status["pending"] == [
        {"charge": {"pods": "2"}, "expires": expires, "bindings": ["late/uid-late"]}
    ]
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]


async def test_after_a_lost_cas_the_watched_version_is_used_without_a_read(env: Any) -> None:
    """Another controller's winning write reaches the controller by watch before its retry:
    the retry is computed from that version, the quota is not read back from the server."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})

    async def other_controller_writes_first(*_: Any) -> None:
        add_reservation(api, "q", "uid-late", {"pods": "3"})
        api.bump(NS, "q", next_revision)
        # the write is answered once the watch has delivered the winning version
        await until(lambda: api.watching("karmadaquotas"))

    api.intercept(other_controller_writes_first)
    gets = api.calls["GET karmadaquotas"]
    add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2"})
    assert [r.reservedBy.uid for r in held(api)] == ["uid-late"]
    assert sample(c, "karmadaquota_status_writes_total", result="conflict") == 1
    assert api.calls["GET karmadaquotas"] == gets


async def test_observed_reservation_is_dropped_in_the_write_that_counts_it(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    add_reservation(api, "q", "uid-web", {"pods": "2"}, gen=1)
    await until(lambda: quiet(c))
    assert len(held(api)) == 1  # not observed yet: kept
    add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2"})
    assert held(api) == []
    assert sample(c, "karmadaquota_reservations_released_total", reason="observed") == 1


async def test_an_expired_reservation_holds_until_the_audit_disproves_it(env: Any) -> None:
    """Expiry is no release: a charge whose binding never appears outlives its TTL and goes
    only once a GET after the admission window finds its name free."""
    api, c, _ = env
    c.config.orphan_grace = 0.05
    c.config.admission_window = 1.5
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    add_reservation(api, "q", "uid-never", {"pods": "2"}, ttl=0.1)
    seen = asyncio.get_running_loop().time()
    await asyncio.sleep(0.5)  # the TTL is long past: nothing may happen on the clock alone
    assert len(held(api)) == 1
    await until(lambda: held(api) == [], timeout=5)
    assert asyncio.get_running_loop().time() - seen >= 1.5
    assert sample(c, "karmadaquota_reservations_released_total", reason="observed") == 1


async def test_an_update_admitted_but_never_stored_is_released_after_the_window(
    env: Any,
) -> None:
    """A charge at generation 3 of a binding that stays at 1 (the UPDATE lost its
    compare-and-swap after admission, or another webhook refused it): released once a GET
    after the admission window still finds generation 1, and not before (the GET is of the
    binding's own name: the entry's is only what a writer said)."""
    api, c, _ = env
    c.config.admission_window = 0.5
    add_quota(api, "q", {"pods": "10"})
    add_binding(api, "web", uid="uid-web", replicas=2)
    await listed(c)
    await until(lambda: used(api) == {"pods": "2"})
    add_reservation(api, "q", "uid-web", {"pods": "3"}, gen=3, ttl=600, binding="not-its-name")
    assert api.bindings  # generation 1 as the fake API server creates it: below 3
    seen = asyncio.get_running_loop().time()
    await until(lambda: held(api) == [], timeout=5)
    assert asyncio.get_running_loop().time() - seen >= 1.5  # window + the second it rounds to
    assert sample(c, "karmadaquota_reservations_released_total", reason="disproved") == 1
    assert used(api) == {"pods": "2"}


async def test_follower_never_writes_and_a_new_leader_catches_up(env: Any) -> None:
    api, c, lead = env
    lead.leader = False
    add_quota(api, "q", {"pods": "10"})
    add_binding(api, "web", replicas=3)
    await listed(c)
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
    add_quota(api, "q", {"pods": "10"})
    add_binding(api, "a", replicas=1)
    add_binding(api, "b", replicas=1)
    await listed(c)
    await until(lambda: used(api) == {"pods": "2"})
    api.hold("resourcebindings")
    api.delete_binding(NS, "a-deployment")
    api.release("resourcebindings", deliver=False)  # the watch broke: its deletion is lost
    await until(lambda: quiet(c))
    assert used(api) == {"pods": "2"}
    api.compact()  # the informer lists again
    await until(lambda: used(api) == {"pods": "1"})


async def test_deleted_quota_is_forgotten(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    api.delete(paths.quota(NS, "q"))
    await until(lambda: c.quotas.records(NS) == [])
    samples = [
        s
        for m in c.metrics.registry.collect()
        for s in m.samples
        if s.name == "karmadaquota_quota_used"
    ]
    assert samples == []


async def test_quota_deleted_during_write_is_not_an_error(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})

    def delete_it(*_: Any) -> None:
        api.delete(paths.quota(NS, "q"))

    api.intercept(delete_it)
    add_binding(api, "web", replicas=2)
    await until(lambda: sample(c, "karmadaquota_status_writes_total", result="notfound") == 1)


async def test_a_timed_out_status_write_counts_as_an_error(env: Any) -> None:
    """Issue 46: a write whose deadline passed (a connection waited for, a slow answer) was
    counted nowhere — 217 of them in the cold start's log, none in the metrics. It counts as
    an error, and the queue's retry writes the status."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})

    def times_out(*_: Any) -> None:
        raise TimeoutError

    api.intercept(times_out)
    add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2"})
    assert sample(c, "karmadaquota_status_writes_total", result="error") == 1


async def test_sustained_contention_backs_off_and_gets_through(env: Any) -> None:
    """Another controller wins the CAS more times than we retry (while writing reservations
    that must survive): no error, a retry soon after."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    n = 0

    def other_writes_first(*_: Any) -> None:
        nonlocal n
        n += 1
        add_reservation(api, "q", f"uid-{n}", {"pods": "1"})
        api.bump(NS, "q", next_revision)

    api.intercept(other_writes_first, times=c.config.max_attempts + 2)
    add_binding(api, "web", replicas=2)
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
    c.config.orphan_grace = 0.05
    add_quota(api, "q", {"pods": "10"})
    web = add_binding(api, "web", replicas=2)
    await listed(c)
    await until(lambda: used(api) == {"pods": "2"})
    add_reservation(
        api, "q", "uid-lost-race", {"pods": "2"}, ttl=600, binding=web["metadata"]["name"]
    )
    await until(lambda: held(api) == [], timeout=3)
    assert used(api) == {"pods": "2"}


async def test_reservation_whose_name_is_free_is_kept_for_the_admission_window(
    env: Any,
) -> None:
    """No binding holds the name: the create may still be waiting on another webhook, so the
    reservation is kept until no create admitted then can be in flight, then released."""
    api, c, _ = env
    c.config.orphan_grace = 0.05
    c.config.admission_window = 1.0
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    add_reservation(api, "q", "uid-in-flight", {"pods": "2"}, ttl=600)
    seen = asyncio.get_running_loop().time()
    await until(lambda: api.calls["GET resourcebindings"] >= 1 and quiet(c), what="the first look")
    assert len(held(api)) == 1  # not yet: it may be in flight
    await until(lambda: held(api) == [], timeout=5)
    assert asyncio.get_running_loop().time() - seen >= 1.0
    assert api.calls["GET resourcebindings"] == 2  # one look after the grace, one after the window


async def test_reservation_of_an_existing_but_unindexed_binding_is_kept(env: Any) -> None:
    api, c, _ = env
    c.config.orphan_grace = 0.05
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    api.hold("resourcebindings")
    late = add_binding(api, "late", replicas=2)  # stored, but its watch event is not in yet
    uid, name = late["metadata"]["uid"], late["metadata"]["name"]
    add_reservation(api, "q", uid, {"pods": "2"}, ttl=600, binding=name)
    await until(
        lambda: api.calls["GET resourcebindings"] >= 1 and quiet(c), what="the orphan audit"
    )
    assert len(held(api)) == 1
    api.release("resourcebindings")
    await until(lambda: used(api) == {"pods": "2"})
    assert held(api) == []


async def test_a_binding_update_at_the_same_generation_is_not_charged_again(env: Any) -> None:
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    b = add_binding(api, "web", replicas=2)
    await until(lambda: used(api) == {"pods": "2"})
    await until(lambda: quiet(c))
    entry = c.index.get(NS, b["metadata"]["uid"])
    path = f"{paths.bindings(NS)}/web-deployment"

    def seven(obj: JSON) -> None:
        obj["spec"]["replicas"] = 7  # a marker: the API server bumps generation for this

    # a status update (same generation) that carries the marker: the spec is not read again
    rv = parse_rv(api.update(path, seven, generation=False)["metadata"]["resourceVersion"])
    await until(lambda: c.binding_informer.held[(NS, "web-deployment")].rv == rv)
    assert c.index.get(NS, b["metadata"]["uid"]) is entry and c.idle()
    api.update(path, lambda o: o["metadata"].update(generation=2), generation=False)
    await until(lambda: used(api) == {"pods": "7"})


async def test_room_freed_wakes_the_waiting_workload_and_the_list_survives_status_writes(
    env: Any,
) -> None:
    api, c, _ = env
    templates("b", namespace=NS, api=api)
    c.waker = Waker(api, c.metrics, WakeConfig(audit_period=0.0))
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
    add_quota(api, "q", {"pods": "2"}, waiting=[entry, gone, lost])
    a = add_binding(api, "a", replicas=2)
    await listed(c)
    await until(lambda: used(api) == {"pods": "2"})
    assert patched(api) == []  # no room: nobody woken
    # a deleted template is found by the audit and written away, so is the lost duplicate
    # create; the controller's status writes keep the rest of the list (the webhook owns it)
    await until(lambda: [w["template"]["name"] for w in quota(api)["status"]["waiting"]] == ["b"])

    api.delete_binding(NS, a["metadata"]["name"])
    await until(lambda: patched(api) == ["b"])
    assert used(api) == {"pods": "0"}
    assert [w["template"]["name"] for w in quota(api)["status"]["waiting"]] == ["b"]


async def test_a_slow_wake_never_holds_up_the_recompute_that_releases_quota(env: Any) -> None:
    """Waking has a queue of its own (waiting for room): while a template PATCH hangs, a
    deleted binding is still released in the quota's next write, and the wake completes once
    the PATCH answers."""
    api, c, _ = env
    templates("b", namespace=NS, api=api)
    answer = asyncio.Event()

    async def slow(*_: Any) -> None:
        await answer.wait()  # the API server is slow to answer, not synchronisation

    api.intercept(slow, match="/deployments/")
    c.waker = Waker(api, c.metrics, WakeConfig())
    entry = {
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"},
        "binding": "b-deployment",
        "requested": {"pods": "1"},
        "firstRefused": "2026-01-01T00:00:00.000000Z",
    }
    add_quota(api, "q", {"pods": "3"}, waiting=[entry])
    a = add_binding(api, "a", replicas=2)
    other = add_binding(api, "other", replicas=1)
    await listed(c)
    await until(lambda: used(api) == {"pods": "3"})
    api.delete_binding(NS, a["metadata"]["name"])  # room for b: its wake hangs on the PATCH
    await until(lambda: used(api) == {"pods": "1"} and not c.room.idle())
    api.delete_binding(NS, other["metadata"]["name"])
    await until(lambda: used(api) == {"pods": "0"})  # released while the wake still hangs
    assert patched(api) == [] and not c.room.idle()
    answer.set()
    await until(lambda: patched(api) == ["b"])


async def test_deleting_the_refusing_quota_wakes_its_waiting_workload(env: Any) -> None:
    api, c, _ = env
    templates("b", namespace=NS, api=api)
    c.waker = Waker(api, c.metrics, WakeConfig())
    entry = {
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "b", "uid": "uid-b"},
        "binding": "b-deployment",
        "requested": {"pods": "2"},
        "firstRefused": "2026-01-01T00:00:00.000000Z",
    }
    add_quota(api, "q", {"pods": "0"}, waiting=[entry])
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    assert patched(api) == []  # hard 0: it does not fit
    # the namespace has no quota left: nothing limits b, and only the deleted quota knew of it
    api.delete(paths.quota(NS, "q"))
    await until(lambda: patched(api) == ["b"])
    assert sample(c, "karmadaquota_wakeups_total", result="woken") == 1


async def test_managed_fields_are_neither_kept_nor_written(env: Any) -> None:
    """The server's field-ownership bookkeeping is dropped from the quota table (memory) and
    omitted from status writes (the server then keeps its own)."""
    api, c, _ = env
    add_quota(api, "q", {"pods": "10"})
    managed = [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:hard": {}}}}
    ]
    q = api.bump(NS, "q", lambda o: o["metadata"].update(managedFields=managed))
    await listed(c)
    await until(lambda: used(api) == {"pods": "0"})
    bodies = [b for m, _, b in api.writes if m == "PUT"]
    assert bodies and all(
        isinstance(b, dict) and "managedFields" not in b["metadata"] for b in bodies
    )
    record_ = c.quotas.get(NS, "q")
    assert record_ is not None and "managedFields" not in record_.raw["metadata"]
    assert record_.raw["metadata"]["uid"] == q["metadata"]["uid"]
    assert "managedFields" in quota(api)["metadata"]  # the server's own stays


NS_PATH = namespaces.path(NS)


def add_namespace(api: FakeApiServer, labels: dict[str, str] | None = None) -> None:
    api.create("/api/v1/namespaces", {"metadata": {"name": NS, "labels": dict(labels or {})}})


def labels(api: FakeApiServer) -> dict[str, str]:
    return dict(api.get_object(NS_PATH)["metadata"].get("labels") or {})


def enforced_condition(api: FakeApiServer) -> dict[str, Any] | None:
    conditions = quota(api).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Enforced"), None)


@pytest.fixture
async def labelling() -> AsyncIterator[tuple[FakeApiServer, Controller, Lead]]:
    """A controller that keeps the enforcement labels (namespace_api: the fake itself)."""
    api = FakeApiServer(rv=100)
    lead = Lead()
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(quiet=0.01, max_delay=0.1, page_size=2, member_watch=False),
        namespace_api=api,
    )
    assert c.enforcement is not None
    async with controlling(c):
        yield api, c, lead


async def test_the_leader_labels_a_quotas_namespace_for_enforcement_once(labelling: Any) -> None:
    """A new quota (or one from before the label existed): its namespace's bindings skip the
    webhook until labelled; the quota says so in Enforced, then True once labelled."""
    api, c, _ = labelling
    add_namespace(api)
    api.refuse[NS_PATH] = KubeError(403, "Forbidden", "cannot patch namespaces")
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: (enforced_condition(api) or {}).get("status") == "False")
    assert enforced_condition(api)["reason"] == "NamespaceNotLabeled"  # type: ignore[index]
    del api.refuse[NS_PATH]  # retried by itself, on its own queue
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True", timeout=10)
    assert labels(api) == {"quota.karmada.io/enforced": "true"}
    assert api.calls["PATCH namespaces"] == 1
    cond = enforced_condition(api)
    assert cond is not None and cond["reason"] == "NamespaceLabeled"
    # labelled once: later flushes neither read nor patch it again
    add_binding(api, "b", replicas=1)
    await until(lambda: used(api) == {"pods": "1"})
    assert api.calls["PATCH namespaces"] == 1
    assert api.calls["GET namespaces"] == 0  # watched, never read one by one


async def test_a_namespace_is_labelled_before_its_quotas_first_status_is_written(
    labelling: Any,
) -> None:
    """The leader labels first, so the quota's first status already says Enforced: one write,
    not False and then True (a cold start's 5,000 quotas: 5,000 writes fewer)."""
    api, c, _ = labelling
    add_namespace(api)
    await listed(c)
    add_quota(api, "q", {"pods": "10"})
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    await until(lambda: quiet(c))
    assert c.writes == 1 and api.calls["PATCH namespaces"] == 1


async def test_a_removed_label_is_put_back_at_once_and_enforced_says_so(labelling: Any) -> None:
    """Issue 29: the label removed (by whoever may patch namespaces, or a GitOps tool) stayed
    off and Enforced kept saying True. The namespace watch puts it back within a second."""
    api, c, _ = labelling
    add_namespace(api)
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    assert c.enforcement.labelled == 1
    loop = asyncio.get_running_loop()
    removed = loop.time()
    api.update(NS_PATH, lambda o: o["metadata"].update(labels={"team": "a"}))
    await until(lambda: c.enforcement.labelled == 2, timeout=1.0, what="label restored")
    assert loop.time() - removed < 1.0
    assert labels(api) == {"team": "a", "quota.karmada.io/enforced": "true"}
    assert api.calls["PATCH namespaces"] == 2


async def test_a_quota_switched_to_queue_gets_its_namespace_labelled_for_queueing(
    labelling: Any,
) -> None:
    """Labelled for enforcement first; once a quota of the namespace says onExceed: Queue the
    leader adds the queueing label — and a namespace whose quotas only refuse never gets it."""
    api, c, _ = labelling
    add_namespace(api)
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    assert labels(api) == {"quota.karmada.io/enforced": "true"}
    api.bump(NS, "q", lambda q: q["spec"].update(onExceed="Queue"))
    await until(lambda: labels(api).get("quota.karmada.io/queueing") == "true")
    assert labels(api)["quota.karmada.io/enforced"] == "true"
    assert api.calls["PATCH namespaces"] == 2


async def test_an_already_labelled_namespace_is_not_patched_and_followers_never_label(
    labelling: Any,
) -> None:
    api, c, lead = labelling
    add_namespace(api, {"quota.karmada.io/enforced": "true"})
    add_quota(api, "q", {"pods": "10"})
    await listed(c)
    await until(lambda: (enforced_condition(api) or {}).get("status") == "True")
    assert api.calls["PATCH namespaces"] == 0
    lead.leader = False
    api.update(NS_PATH, lambda o: o["metadata"].update(labels={}))
    await until(lambda: not c.enforcement.enforced(NS))
    c.mark_all()
    await until(lambda: quiet(c))
    assert api.calls["PATCH namespaces"] == 0


def test_the_configured_concurrency_bounds_both_recompute_queues() -> None:
    c = Controller(FakeApiServer(), ControllerMetrics(), Lead(), ReconcilerConfig(concurrency=3))
    assert c.dirty.concurrency == c.cluster_dirty.concurrency == 3


async def test_an_evicted_clusters_replicas_are_released_when_its_grace_ends_and_back_when_ready(
    env: Any,
) -> None:
    """Failover (docs/charging.md): 2 replicas moved from m1 (evicted) to m2 are charged 4
    until m1 has been not Ready for the grace (a timer, no event, ends it), then 2; m1 Ready
    again charges them again."""
    api, c, _ = env
    c.readiness.grace = 3.0  # lastTransitionTime is in whole seconds: up to 1 s of it gone
    add_quota(api, "q", {"pods": "10"})
    raw = raw_binding("web", namespace=NS, replicas=2, clusters={"m2": 2})
    raw["spec"]["gracefulEvictionTasks"] = [{"fromCluster": "m1", "replicas": 2}]
    api.put_binding(raw)
    await listed(c)
    await until(lambda: used(api).get("pods") == "4")
    since = datetime.now(UTC)
    cluster: JSON = {
        "metadata": {"name": "m1"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": format_time(since)}
            ]
        },
    }
    c.readiness.observe(cluster)
    await until(lambda: quiet(c))
    assert used(api)["pods"] == "4"  # within the grace: still charged, and said so
    assert "m1 (1 binding): not Ready, released at" in str(quota(api)["status"]["conditions"])
    await until(lambda: used(api)["pods"] == "2", timeout=8, what="released when the grace ends")
    cluster["status"]["conditions"][0]["status"] = "True"
    c.readiness.observe(cluster)
    await until(lambda: used(api)["pods"] == "4", what="charged again once m1 is Ready")


@contextlib.asynccontextmanager
async def folding(fold_delay: float) -> AsyncIterator[tuple[FakeApiServer, Controller]]:
    """A controller whose folds of pending charges into `used` wait `fold_delay`."""
    api = FakeApiServer(rv=100)
    config = ReconcilerConfig(quiet=0.01, max_delay=0.1, page_size=2, member_watch=False)
    config.fold_delay = fold_delay
    c = Controller(api, ControllerMetrics(), Lead(), config)
    async with controlling(c):
        yield api, c


def rv(api: FakeApiServer, name: str = "q") -> str:
    return str(quota(api, name)["metadata"]["resourceVersion"])


async def test_a_fold_waits_and_the_webhooks_writes_meanwhile_do_not_lose() -> None:
    """A binding the webhook charged is observed: counting its charge as used changes no room,
    so the controller does not write it for `fold_delay` — the quota's resourceVersion does
    not move, and a webhook write computed on it still succeeds — and then writes it."""
    async with folding(0.5) as (api, c):
        add_quota(api, "q", {"pods": "10"})
        await listed(c)
        await until(lambda: used(api) == {"pods": "0"})
        add_reservation(api, "q", "uid-web", {"pods": "2"}, binding="web")
        start = asyncio.get_running_loop().time()
        add_binding(api, "web", replicas=2, uid="uid-web")
        before = rv(api)
        await until(lambda: quiet(c) and c.reconciler.folds_waiting, what="the fold waits")
        assert rv(api) == before and used(api) == {"pods": "0"} and len(held(api)) == 1
        add_reservation(api, "q", "uid-api", {"pods": "1"}, binding="api")  # no conflict
        await until(lambda: used(api) == {"pods": "2"}, what="the fold written")
        assert asyncio.get_running_loop().time() - start >= 0.5
        assert [r.reservedBy.uid for r in held(api)] == ["uid-api"]
        assert not c.reconciler.folds_waiting


async def test_room_given_back_or_usage_the_webhook_did_not_charge_is_written_at_once() -> None:
    """While a fold waits, a delete (room given back) is written at once, with the fold; so is
    usage no pending charge holds (a binding created around the webhook), which admission
    must see."""
    async with folding(60.0) as (api, c):
        add_quota(api, "q", {"pods": "10"})
        add_binding(api, "old", replicas=3)
        await listed(c)
        await until(lambda: used(api) == {"pods": "3"})
        add_reservation(api, "q", "uid-web", {"pods": "2"}, binding="web")
        add_binding(api, "web", replicas=2, uid="uid-web")
        await until(lambda: quiet(c) and c.reconciler.folds_waiting, what="the fold waits")
        assert used(api) == {"pods": "3"}
        api.delete_binding(NS, "old-deployment")
        await until(lambda: used(api) == {"pods": "2"} and held(api) == [], what="at once")
        assert not c.reconciler.folds_waiting
        add_binding(api, "around", replicas=4)  # no pending charge: more usage
        await until(lambda: used(api) == {"pods": "6"}, what="more usage, at once")


async def test_a_fold_of_many_pending_charges_is_written_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The webhook rewrites every pending charge with each one it adds: a quota holding
    FOLD_MAX_PENDING of them is folded at once."""
    monkeypatch.setattr(reconciler, "FOLD_MAX_PENDING", 3)
    async with folding(60.0) as (api, c):
        add_quota(api, "q", {"pods": "10"})
        await listed(c)
        await until(lambda: used(api) == {"pods": "0"})
        add_reservation(api, "q", "uid-a", {"pods": "1"}, binding="a")
        add_reservation(api, "q", "uid-b", {"pods": "1"}, binding="b")
        add_binding(api, "a", replicas=1, uid="uid-a")
        await until(lambda: quiet(c) and c.reconciler.folds_waiting, what="2 pending: it waits")
        add_reservation(api, "q", "uid-c", {"pods": "1"}, binding="c")
        add_binding(api, "b", replicas=1, uid="uid-b")
        await until(lambda: used(api) == {"pods": "2"}, what="3 pending: folded at once")
        assert [r.reservedBy.uid for r in held(api)] == ["uid-c"]


async def test_a_release_during_the_cold_start_waits_for_no_other_quota() -> None:
    """Issue 46: the first list marks every namespace at once, and their first writes take a
    while (here 20 quotas, 2 at a time, each write 50 ms: the API server of a cold start). A
    binding deleted in a namespace already written is released by its next write, not after
    the rest of the cold start: before, its namespace waited behind every one still unwritten
    (one FIFO of flush slots), 118 s at Karmada's size."""
    api = FakeApiServer(rv=100)
    c = Controller(
        api,
        ControllerMetrics(),
        Lead(),
        ReconcilerConfig(quiet=0.0, max_delay=0.0, concurrency=2, member_watch=False),
    )
    spaces = [f"ns-{i:02d}" for i in range(20)]
    for ns in spaces:
        api.add_quota(
            {
                "apiVersion": "quota.karmada.io/v1alpha1",
                "kind": "KarmadaQuota",
                "metadata": {"name": "q", "namespace": ns, "uid": f"q-{ns}"},
                "spec": {"hard": {"pods": "100"}},
            }
        )
        for b in ("a", "b"):
            api.put_binding(raw_binding(b, namespace=ns, replicas=1))

    async def slow(*_: Any) -> None:
        await asyncio.sleep(0.05)  # the API server's time for a write, not synchronisation

    api.intercept(slow, times=1000)

    def pods(ns: str) -> str | None:
        return api.quotas[(ns, "q")].get("status", {}).get("used", {}).get("pods")

    async with controlling(c):
        await listed(c)
        await until(lambda: any(pods(ns) == "2" for ns in spaces))
        first = next(ns for ns in spaces if pods(ns) == "2")
        api.delete_binding(first, "a-deployment")
        await until(lambda: pods(first) == "1")
        unwritten = [ns for ns in spaces if pods(ns) is None]
        assert len(unwritten) >= len(spaces) // 2, unwritten
        await until(lambda: all(pods(ns) == "2" for ns in spaces if ns != first))
