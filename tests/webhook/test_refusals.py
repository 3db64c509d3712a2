"""The webhook's refusal recorder: status.waiting changes, written by the batcher (the one
writer of a quota's status in a replica): with a batch's reservations, or coalesced on their own
at most once per interval per namespace, with compare-and-swap."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from karmadaquota.charge import charge
from karmadaquota.evaluate import REASON_EXCEEDED, REASON_FORBIDDEN, Decision
from karmadaquota.webhook.batcher import Batcher, ChargeRequest
from karmadaquota.webhook.refusals import RefusalRecorder, record_refusals
from tests.fake_api import Replica, quota_doc
from tests.polling import until
from tests.webhook_fakes import binding

DENIED = Decision(False, "exceeded quota: team-a", REASON_EXCEEDED, quota="team-a")
ALLOWED = Decision(True)


def refuse(rec: RefusalRecorder, name: str, replicas: int = 2) -> None:
    b = binding(name, replicas=replicas, uid=f"rb-{name}")
    b.spec.resource.uid = f"uid-{name}"
    rec.observe("ns", b, None, charge(b), None, DENIED)


def admit(rec: RefusalRecorder, name: str) -> None:
    b = binding(name, uid=f"rb-{name}")
    b.spec.resource.uid = f"uid-{name}"
    rec.observe("ns", b, None, charge(b), None, ALLOWED)


def wired(store: Replica, interval: float) -> tuple[RefusalRecorder, Batcher]:
    """A recorder and the batcher that writes its changes, as the webhook wires them."""
    batcher = Batcher(store)
    return record_refusals(store, batcher, interval=interval), batcher


def pending(name: str, **kw: Any) -> ChargeRequest:
    b = binding(name, **kw)
    return ChargeRequest(
        namespace=b.metadata.namespace,
        name=name,
        uid=b.metadata.uid,
        generation=b.metadata.generation,
        new=charge(b),
        old=None,
        dry_run=False,
    )


async def storm(batcher: Batcher, names: list[str]) -> list[Decision]:
    return list(await asyncio.gather(*(batcher.submit(pending(n)) for n in names)))


def reserved(store: Replica) -> list[str]:
    return sorted(r.reservedBy.name for r in store.stored().status.reservations)


def listed(store: Replica) -> list[str]:
    return [w.template.name for w in store.stored().status.waiting]


async def test_refusals_are_written_at_most_once_per_interval_per_namespace() -> None:
    store = Replica(quota_doc())
    rec, _ = wired(store, 0.3)
    refuse(rec, "x")
    await until(lambda: store.puts == 1)
    assert listed(store) == ["x"]
    for name in ("y", "z", "x", "y"):
        refuse(rec, name)
    await until(lambda: store.puts == 2)  # one write for four denials
    assert listed(store) == ["x", "y", "z"]
    entries = store.stored().status.waiting
    assert [w.refusals for w in entries] == [2, 2, 1]
    assert entries[0].requested == {
        "cpu": "2",
        "requests.cpu": "2",
        "pods": "2",
        "count/pods": "2",
        "count/deployments.apps": "1",
    }
    assert entries[0].binding == "x" and entries[0].template.uid == "uid-x"
    await rec.close()


async def test_admission_of_a_listed_template_removes_it_and_unlisted_costs_nothing() -> None:
    store = Replica(quota_doc())
    rec, _ = wired(store, 0.05)
    refuse(rec, "x")
    refuse(rec, "y")
    await until(lambda: listed(store) == ["x", "y"])
    puts = store.puts
    admit(rec, "other")  # not listed: no write at all
    admit(rec, "x")
    await until(lambda: listed(store) == ["y"])
    assert store.puts == puts + 1
    await rec.close()


async def test_only_quota_exceeded_refusals_are_recorded() -> None:
    store = Replica(quota_doc())
    rec, _ = wired(store, 0.05)
    b = binding("x", uid="rb-x")
    rec.observe(
        "ns", b, None, charge(b), None, Decision(False, "must specify cpu", REASON_FORBIDDEN)
    )
    await asyncio.sleep(0.1)  # nothing is scheduled; give a wrong implementation the chance
    assert store.puts == 0
    await rec.close()


async def test_a_lost_compare_and_swap_rereads_and_keeps_the_other_writer() -> None:
    store = Replica(quota_doc())
    rec, _ = wired(store, 0.05)

    def other_writer(s: Replica, body: object) -> None:
        s.before_put = None
        s.bump("ns", "team-a", lambda d: d["status"].update(used={"requests.cpu": "7"}))

    store.before_put = other_writer
    refuse(rec, "x")
    await until(lambda: listed(store) == ["x"])
    assert store.conflicts == 1
    assert store.stored().status.used == {"requests.cpu": "7"}
    await rec.close()


async def test_a_workload_listed_by_another_quota_keeps_its_place_there() -> None:
    store = Replica(quota_doc("a"), quota_doc("b"))
    rec, _ = wired(store, 0.05)
    b = binding("x", uid="rb-x")
    rec.observe("ns", b, None, charge(b), None, Decision(False, "", REASON_EXCEEDED, quota="b"))
    await until(lambda: len(store.stored(name="b").status.waiting) == 1)
    rec.observe("ns", b, None, charge(b), None, Decision(False, "", REASON_EXCEEDED, quota="a"))
    await until(lambda: store.stored(name="b").status.waiting[0].refusals == 2)
    assert store.stored(name="a").status.waiting == []
    await rec.close()


async def test_an_update_that_does_not_carry_the_template_leaves_a_refused_scale_up_waiting() -> (
    None
):
    store = Replica(quota_doc())
    rec, _ = wired(store, 0.05)
    holding = binding("web", replicas=2, uid="rb-web")
    holding.spec.resource.uid, holding.spec.resource.resourceVersion = "uid-web", "10"
    wanted = holding.model_copy(deep=True)
    wanted.spec.replicas = 4
    wanted.spec.resource.resourceVersion = "11"
    rec.observe("ns", wanted, holding, charge(wanted), charge(holding), DENIED)
    await until(lambda: listed(store) == ["web"])
    # the scheduler (or a label change) updates the binding: admitted, nothing grows
    relabelled = holding.model_copy(deep=True)
    relabelled.metadata.labels = {"x": "y"}
    rec.observe("ns", relabelled, holding, charge(relabelled), charge(holding), ALLOWED)
    await asyncio.sleep(0.1)  # give a wrong implementation the time to write
    assert listed(store) == ["web"]
    # scaled back: Karmada rebuilds the binding from the changed template, admitted
    scaled_back = holding.model_copy(deep=True)
    scaled_back.spec.resource.resourceVersion = "12"
    rec.observe("ns", scaled_back, holding, charge(scaled_back), charge(holding), ALLOWED)
    await until(lambda: listed(store) == [])
    await rec.close()


async def test_a_batch_write_carries_the_due_waiting_entry_in_the_same_put() -> None:
    store = Replica(quota_doc())
    rec, batcher = wired(store, 10)
    refuse(rec, "x")  # the namespace's first change is written at once, on its own
    await until(lambda: listed(store) == ["x"])
    assert store.puts == 1
    refuse(rec, "y")  # its own write would wait 10 s: the batch below carries it
    decisions = await storm(batcher, ["b0", "b1", "b2"])
    assert all(d.allowed for d in decisions)
    assert store.puts == 2  # ONE put for reservations and the waiting entry
    assert listed(store) == ["x", "y"]
    assert reserved(store) == ["b0", "b1", "b2"]
    await asyncio.sleep(0.05)  # give a wrong implementation the time to write again
    assert store.puts == 2
    await rec.close()
    await batcher.close()


async def test_a_lost_compare_and_swap_reapplies_waiting_and_reservations() -> None:
    store = Replica(quota_doc())
    rec, batcher = wired(store, 10)
    refuse(rec, "x")
    await until(lambda: listed(store) == ["x"])
    refuse(rec, "y")
    refuse(rec, "x")
    store.api.interfere(2)  # another replica wins the next two status writes
    decisions = await storm(batcher, ["b0", "b1"])
    assert all(d.allowed for d in decisions)
    assert store.conflicts == 2 and store.puts == 2
    assert listed(store) == ["x", "y"]
    assert [w.refusals for w in store.stored().status.waiting] == [2, 1]  # nothing doubled
    assert reserved(store) == ["b0", "b1"]
    await rec.close()
    await batcher.close()


async def test_a_refusal_storm_writes_at_most_once_per_interval() -> None:
    store = Replica(quota_doc())
    store.put_delay = 0.01  # models write latency, not synchronisation
    interval = 0.1
    rec, batcher = wired(store, interval)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(100):
        refuse(rec, f"w{i % 30}")
        await asyncio.sleep(0.004)  # the storm's pace, not synchronisation
    await until(lambda: sum(w.refusals for w in store.stored().status.waiting) == 100)
    elapsed = loop.time() - started
    assert len(listed(store)) == 30
    assert 2 <= store.puts <= math.ceil(elapsed / interval) + 1
    assert store.max_in_flight == 1
    await rec.close()
    await batcher.close()


async def test_refusals_and_admissions_of_a_namespace_have_one_writer() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "1000", "pods": "1000"}))
    store.put_delay = 0.01  # models write latency, not synchronisation
    rec, batcher = wired(store, 0.03)

    async def refusals() -> None:
        for i in range(60):
            refuse(rec, f"w{i % 20}")
            await asyncio.sleep(0.003)  # the storm's pace, not synchronisation

    async def admissions() -> list[Decision]:
        out: list[Decision] = []
        for wave in range(6):
            out += await storm(batcher, [f"b{wave}-{j}" for j in range(5)])
        return out

    _, decisions = await asyncio.gather(refusals(), admissions())
    assert all(d.allowed for d in decisions)
    await until(lambda: sum(w.refusals for w in store.stored().status.waiting) == 60)
    assert len(listed(store)) == 20
    assert len(reserved(store)) == 30
    assert store.max_in_flight == 1  # never two status writes of one quota at once
    await rec.close()
    await batcher.close()


async def test_changes_for_a_deleted_quota_are_dropped() -> None:
    store = Replica(quota_doc())
    rec, batcher = wired(store, 0.05)
    del store.objects[("ns", "team-a")]
    refuse(rec, "x")
    await until(lambda: not rec.due("ns") and "ns" not in rec._flying)
    assert store.puts == 0
    await asyncio.sleep(0.1)  # give a wrong implementation the time to retry
    assert store.puts == 0 and not rec.due("ns")
    await rec.close()
    await batcher.close()


async def test_the_batcher_times_the_waiting_lists_own_passes_at_most_once_per_interval() -> None:
    """The recorder asks its writer (the batcher) for a pass of their own at most once per
    interval per namespace: its timers, one per namespace; the writer runs the pass."""
    store = Replica(quota_doc())
    passes: list[float] = []  # loop times of the passes asked for

    def run_pass(ns: str) -> None:  # the writer's pass: it takes every change and writes it
        passes.append(asyncio.get_running_loop().time())
        taken = rec.take(ns, None)
        if taken is not None:
            rec.settle(taken, taken.quotas, [])

    rec = RefusalRecorder(store, run_pass, interval=0.2)
    for i in range(5):
        refuse(rec, f"w{i}")  # the first change is written at once, the rest coalesce
    await until(lambda: len(passes) == 1)
    refuse(rec, "w5")
    await until(lambda: len(passes) == 2)
    assert passes[1] - passes[0] >= 0.2
    refuse(rec, "w6")
    taken = rec.take("ns", ["team-a"])  # a batch carries it before its time comes
    assert taken is not None
    rec.settle(taken, ["team-a"], [])
    await asyncio.sleep(0.3)  # give a wrong implementation the time to pass again
    assert len(passes) == 2  # nothing left when its time came: no pass
    await rec.close()
    refuse(rec, "w7")  # closed: nothing is timed any more
    await asyncio.sleep(0.3)  # give a wrong implementation the time to pass again
    assert len(passes) == 2 and not rec._timers
