"""The per-namespace batcher: order, one write per quota, CAS conflicts, reservations."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from karmadaquota import charge
from karmadaquota.evaluate import REASON_EXCEEDED, Decision
from karmadaquota.kube.client import JSON
from karmadaquota.quantity import Quantity
from karmadaquota.webhook.batcher import REASON_CONFLICT, Batcher, BatcherConfig, ChargeRequest
from tests.fake_api import Replica, quota_doc
from tests.webhook_fakes import binding

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pending(name: str, dry_run: bool = False, old: Any = None, **kw: Any) -> ChargeRequest:
    b = binding(name, **kw)
    return ChargeRequest(
        namespace=b.metadata.namespace,
        name=name,
        uid=b.metadata.uid,
        generation=b.metadata.generation,
        new=charge.charge(b),
        old=charge.charge(old) if old is not None else None,
        dry_run=dry_run,
    )


def reserved_cpu(store: Replica, name: str = "team-a") -> Quantity:
    total = Quantity.zero()
    for r in store.stored(name=name).status.reservations:
        total = total + Quantity.parse(str(r.reserved.get("requests.cpu", "0")))
    return total


async def storm(batcher: Batcher, items: list[ChargeRequest]) -> list[Decision]:
    return list(await asyncio.gather(*(batcher.submit(p) for p in items)))


async def test_concurrent_reviews_are_checked_in_order_and_written_once() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    batcher = Batcher(store, clock=lambda: NOW)
    decisions = await storm(batcher, [pending(f"b{i}") for i in range(15)])
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 5
    assert decisions[10].reason == REASON_EXCEEDED
    assert decisions[10].message == (
        "exceeded quota: team-a, requested: requests.cpu=1, used: requests.cpu=10, "
        "limited: requests.cpu=10"
    )
    assert store.puts == 1  # one status write covers the whole batch
    assert reserved_cpu(store) == Quantity.parse("10")
    reservation = store.stored().status.reservations[0]
    assert reservation.reservedBy.uid == "uid-b0"
    assert reservation.reservedBy.kind == "ResourceBinding"
    assert reservation.generation == 1


async def test_reviews_queued_behind_a_write_form_the_next_batch() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "100"}))
    store.put_delay = 0.01
    sizes: list[int] = []
    started = asyncio.Event()

    def on_batch(n: int) -> None:
        sizes.append(n)
        started.set()

    batcher = Batcher(store, on_batch=on_batch, clock=lambda: NOW)
    first = asyncio.create_task(batcher.submit(pending("first")))
    await started.wait()  # the first batch is now writing
    rest = await storm(batcher, [pending(f"b{i}") for i in range(20)])
    assert (await first).allowed and all(d.allowed for d in rest)
    assert sizes == [1, 20]
    assert store.puts == 2
    assert reserved_cpu(store) == Quantity.parse("21")


async def test_each_changed_quota_gets_one_write() -> None:
    store = Replica(
        quota_doc("a", hard={"requests.cpu": "10"}), quota_doc("b", hard={"pods": "10"})
    )
    batcher = Batcher(store, clock=lambda: NOW)
    decisions = await storm(batcher, [pending(f"b{i}") for i in range(4)])
    assert all(d.allowed for d in decisions)
    assert store.puts == 2
    assert set(decisions[0].charges) == {"a", "b"}


async def test_conflict_rechecks_against_fresh_usage_and_denies_what_no_longer_fits() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))

    def other_writer(s: Replica, _: JSON) -> None:
        if s.conflicts == 0:  # once: another webhook replica reserved 7 cpu meanwhile
            s.bump("ns", "team-a", lambda d: d["status"].update(used={"requests.cpu": "7"}))

    store.before_put = other_writer
    batcher = Batcher(store, clock=lambda: NOW)
    decisions = await storm(batcher, [pending(f"b{i}") for i in range(5)])
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert store.conflicts == 1
    assert "used: requests.cpu=10" in decisions[3].message
    assert reserved_cpu(store) == Quantity.parse("3")


async def test_a_retry_never_turns_a_denial_into_an_admission() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}, used={"requests.cpu": "8"}))

    def release(s: Replica, _: JSON) -> None:
        if s.conflicts == 0:  # the controller released everything meanwhile
            s.bump("ns", "team-a", lambda d: d["status"].update(used={"requests.cpu": "0"}))

    store.before_put = release
    batcher = Batcher(store, clock=lambda: NOW)
    decisions = await storm(batcher, [pending(f"b{i}") for i in range(4)])
    # first pass: 8 used, two fit, two are denied; the re-check after the conflict sees 0 used
    # but only re-checks the two admitted ones.
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert store.conflicts == 1
    assert reserved_cpu(store) == Quantity.parse("2")


async def test_endless_conflicts_end_in_a_try_again_denial() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    store.before_put = lambda s, _: s.bump("ns", "team-a", lambda d: None)
    batcher = Batcher(store, BatcherConfig(max_attempts=3), clock=lambda: NOW)
    decision = await batcher.submit(pending("b0"))
    assert not decision.allowed
    assert decision.reason == REASON_CONFLICT
    assert "try again" in decision.message
    assert store.conflicts == 3
    assert store.stored().status.reservations == []


async def test_dry_run_is_answered_but_writes_and_reserves_nothing() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "1"}))
    batcher = Batcher(store, clock=lambda: NOW)
    dry, real = await storm(batcher, [pending("dry", dry_run=True), pending("real")])
    assert dry.allowed and real.allowed  # the dry run did not take the only cpu
    assert store.puts == 1
    assert [r.reservedBy.name for r in store.stored().status.reservations] == ["real"]


async def test_reservations_count_past_their_expiry_and_are_never_dropped_by_the_webhook() -> None:
    """A clock alone never frees quota: past its expiry a charge still counts (the bug: the
    second workload was admitted once the first one's charge had lapsed, though no `used` had
    counted it yet) and the next write keeps it."""
    store = Replica(quota_doc(hard={"requests.cpu": "3"}))
    ttl = timedelta(seconds=30)
    clock = [NOW]
    batcher = Batcher(store, BatcherConfig(reservation_ttl=ttl), clock=lambda: clock[0])
    assert (await batcher.submit(pending("a", cpu="2"))).allowed
    assert not (await batcher.submit(pending("b", cpu="2"))).allowed  # reserved counts
    clock[0] = NOW + 3 * ttl
    assert not (await batcher.submit(pending("c", cpu="2"))).allowed  # still counts
    assert (await batcher.submit(pending("d", cpu="1"))).allowed
    assert [r.reservedBy.name for r in store.stored().status.reservations] == ["a", "d"]


async def test_a_replica_whose_clock_runs_ahead_counts_its_peers_charges() -> None:
    """Two webhook replicas over one quota; the second's clock runs 2×TTL ahead (or behind):
    each counts what the other admitted."""
    ttl = timedelta(seconds=30)
    for skew in (2 * ttl, -2 * ttl):
        store = Replica(quota_doc(hard={"requests.cpu": "2"}))
        honest = Batcher(store, BatcherConfig(reservation_ttl=ttl), clock=lambda: NOW)
        skewed = Batcher(store, BatcherConfig(reservation_ttl=ttl), clock=lambda s=skew: NOW + s)
        assert (await honest.submit(pending("a", cpu="2"))).allowed
        assert not (await skewed.submit(pending("b", cpu="1"))).allowed, skew
        store2 = Replica(quota_doc(hard={"requests.cpu": "2"}))
        first = Batcher(store2, BatcherConfig(reservation_ttl=ttl), clock=lambda s=skew: NOW + s)
        second = Batcher(store2, BatcherConfig(reservation_ttl=ttl), clock=lambda: NOW)
        assert (await first.submit(pending("a", cpu="2"))).allowed
        assert not (await second.submit(pending("b", cpu="1"))).allowed, skew


async def test_update_reserves_only_the_growth() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    batcher = Batcher(store, clock=lambda: NOW)
    old = binding("web", replicas=3, generation=1)
    down = await batcher.submit(pending("web", replicas=1, generation=2, old=old))
    assert down.allowed and store.puts == 0  # scale-down charges nothing
    up = await batcher.submit(pending("web", replicas=5, generation=2, old=old))
    assert up.allowed
    assert reserved_cpu(store) == Quantity.parse("2")
    assert store.stored().status.reservations[0].generation == 2


async def test_a_request_refused_by_a_later_quota_gives_back_its_earlier_reservation() -> None:
    store = Replica(
        quota_doc("a", hard={"requests.cpu": "10"}), quota_doc("b", hard={"pods": "10"})
    )

    def fill_b(s: Replica, body: JSON) -> None:
        if body["metadata"]["name"] == "b" and s.conflicts == 0:
            s.bump("ns", "b", lambda d: d["status"].update(used={"pods": "10"}))

    store.before_put = fill_b
    batcher = Batcher(store, clock=lambda: NOW)
    decision = await batcher.submit(pending("x"))
    assert not decision.allowed
    assert decision.message.startswith("exceeded quota: b,")
    # compensated before the review was answered
    assert store.stored(name="a").status.reservations == []
    assert store.stored(name="b").status.reservations == []


async def test_a_caller_that_gives_up_while_its_write_retries_is_not_written() -> None:
    """Its deadline passes during a lost compare-and-swap: the retry writes only the others."""
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    callers: dict[str, asyncio.Task[Decision]] = {}

    def lose_once_and_give_up(s: Replica, _: JSON) -> None:
        if s.conflicts == 0:
            s.bump("ns", "team-a", lambda d: None)  # another replica wrote meanwhile
            callers["gone"].cancel()

    store.before_put = lose_once_and_give_up
    batcher = Batcher(store, clock=lambda: NOW)
    callers["gone"] = asyncio.create_task(batcher.submit(pending("gone", replicas=4)))
    stays = asyncio.create_task(batcher.submit(pending("stays", replicas=6)))
    assert (await stays).allowed
    assert callers["gone"].cancelled()
    assert [r.reservedBy.name for r in store.stored().status.reservations] == ["stays"]
    assert store.puts == 1  # the lost write, then one that carries only `stays`


async def test_a_caller_that_gives_up_while_its_write_is_in_flight_is_taken_back() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    callers: dict[str, asyncio.Task[Decision]] = {}

    def give_up_once(s: Replica, _: JSON) -> None:
        if "gone" in callers and not callers["gone"].done():
            callers["gone"].cancel()  # the write below still goes through

    store.before_put = give_up_once
    batcher = Batcher(store, clock=lambda: NOW)
    callers["gone"] = asyncio.create_task(batcher.submit(pending("gone", replicas=10)))
    await asyncio.gather(callers["gone"], return_exceptions=True)
    # the next batch queues behind the take-back: the whole quota is free for it
    assert (await batcher.submit(pending("next", replicas=10))).allowed
    assert [r.reservedBy.name for r in store.stored().status.reservations] == ["next"]


async def test_a_failing_store_denies_with_the_reason_never_allows() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))

    def boom(s: Replica, _: JSON) -> None:
        raise RuntimeError("etcd is on fire")

    store.before_put = boom
    batcher = Batcher(store, clock=lambda: NOW)
    decision = await batcher.submit(pending("b0"))
    assert not decision.allowed
    assert "etcd is on fire" in decision.message


async def test_a_deleted_quota_charges_nothing() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    del store.objects[("ns", "team-a")]
    batcher = Batcher(store, clock=lambda: NOW)
    assert (await batcher.submit(pending("b0"))).allowed


async def test_namespaces_are_batched_independently() -> None:
    store = Replica(
        quota_doc("q", namespace="ns1", hard={"requests.cpu": "1"}),
        quota_doc("q", namespace="ns2", hard={"requests.cpu": "1"}),
    )
    batcher = Batcher(store, clock=lambda: NOW)
    d = await storm(
        batcher,
        [
            pending("a", namespace="ns1"),
            pending("b", namespace="ns2"),
            pending("c", namespace="ns1"),
        ],
    )
    assert [x.allowed for x in d] == [True, True, False]
    assert store.puts == 2


async def test_a_kick_without_waiting_changes_writes_nothing_and_the_worker_ends() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10"}))
    batcher = Batcher(store, clock=lambda: NOW)
    batcher.kick("ns")  # no recorder attached: the pass has nothing to write
    assert (await batcher.submit(pending("b0"))).allowed
    await batcher.close()
    assert store.puts == 1
    assert not batcher._workers and not batcher._queues


async def test_an_admission_is_answered_without_waiting_for_another_review_s_take_back() -> None:
    """A batch where one review is admitted and another refused by its second quota: the
    admitted one is answered at once, not after the slow take-back of the refused one (its
    caller would give up, and its written reservation would then hold for nothing)."""
    store = Replica(
        quota_doc("a", hard={"requests.cpu": "10"}), quota_doc("b", hard={"requests.cpu": "10"})
    )
    writes = 0

    def fill_b_then_slow(s: Replica, body: JSON) -> None:
        nonlocal writes
        writes += 1
        if body["metadata"]["name"] == "b" and s.conflicts == 0:
            s.bump("ns", "b", lambda d: d["status"].update(used={"requests.cpu": "8"}))
        if writes >= 3:
            s.put_delay = 0.5  # the take-back of the refused review's reservation in a

    store.before_put = fill_b_then_slow
    batcher = Batcher(store, clock=lambda: NOW)
    big = asyncio.create_task(batcher.submit(pending("big", cpu="3")))
    async with asyncio.timeout(0.3):
        small = await batcher.submit(pending("small", cpu="1"))
    assert small.allowed
    refused = await big
    assert refused.message.startswith("exceeded quota: b,"), refused.message
    for name in ("a", "b"):  # the refused review's taken back before it was answered
        assert [r.reservedBy.name for r in store.stored(name=name).status.reservations] == ["small"]
    await batcher.close()


async def test_every_refusing_quota_is_read_live_before_a_refusal() -> None:
    """Two quotas of the namespace gave room back that this replica's copies do not show
    yet: the first refuses, is read live, then the second refuses, and is read live too."""
    store = Replica(
        quota_doc("x", hard={"requests.cpu": "10"}, used={"requests.cpu": "10"}),
        quota_doc("y", hard={"requests.cpu": "10"}, used={"requests.cpu": "10"}),
    )
    for name in ("x", "y"):
        store.bump("ns", name, lambda d: d["status"].update(used={"requests.cpu": "0"}))
    batcher = Batcher(store, clock=lambda: NOW)
    decision = await batcher.submit(pending("r", cpu="1"))
    assert decision.allowed, decision.message
    await batcher.close()


async def test_close_answers_what_waits() -> None:
    """A take-back queued and the worker stopped before its first step: the release's
    future is done (the orphan audit disproves the reservation), and a queued review is
    refused with 'try again'; nothing waits forever."""
    store = Replica(quota_doc("a", hard={"requests.cpu": "10"}))
    batcher = Batcher(store, clock=lambda: NOW)
    r = pending("r")
    assert (await batcher.submit(r)).allowed
    # in this order, with no await between: the review queues while close() waits for the
    # cancelled worker, behind the take-back
    waiting = asyncio.create_task(batcher.submit(pending("q")))
    released = batcher.release(r, ["a"])
    await batcher.close()
    async with asyncio.timeout(1):
        await released
        d = await waiting
    assert not d.allowed and "shutting down" in d.message


async def test_compensation_takes_back_only_the_refused_charge() -> None:
    """An UPDATE (generation 2) admitted by quota a, then refused by quota b: a keeps the
    binding's charge of generation 1 (still unobserved), losing only generation 2's."""
    store = Replica(
        quota_doc("a", hard={"requests.cpu": "10"}), quota_doc("b", hard={"pods": "10"})
    )
    batcher = Batcher(store, clock=lambda: NOW)
    assert (await batcher.submit(pending("web", replicas=1, generation=1))).allowed
    store.refresh()

    def fill_b(s: Replica, body: JSON) -> None:
        if body["metadata"]["name"] == "b" and s.conflicts == 0:
            s.bump("ns", "b", lambda d: d["status"].update(used={"pods": "10"}))

    store.before_put = fill_b
    old = binding("web", replicas=1, generation=1)
    up = await batcher.submit(pending("web", replicas=3, generation=2, old=old))
    assert not up.allowed and up.message.startswith("exceeded quota: b,")
    # compensated before the review was answered
    held = store.stored(name="a").status.reservations
    assert [(r.reservedBy.uid, r.generation) for r in held] == [("uid-web", 1)]
    assert reserved_cpu(store, "a") == Quantity.parse("1")
