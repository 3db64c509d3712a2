"""The webhook's refusal recorder: coalesced, compare-and-swap writes of status.waiting."""

from __future__ import annotations

import asyncio

from karmadaquota.charge import charge
from karmadaquota.evaluate import REASON_EXCEEDED, REASON_FORBIDDEN, Decision
from karmadaquota.webhook.refusals import RefusalRecorder
from tests.fake_api import FakeStore, quota_doc
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


def listed(store: FakeStore) -> list[str]:
    return [w.template.name for w in store.stored().status.waiting]


async def test_refusals_are_written_at_most_once_per_interval_per_namespace() -> None:
    store = FakeStore(quota_doc())
    rec = RefusalRecorder(store, interval=0.3)
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
        "count/deployments.apps": "1",
    }
    assert entries[0].binding == "x" and entries[0].template.uid == "uid-x"
    await rec.close()


async def test_admission_of_a_listed_template_removes_it_and_unlisted_costs_nothing() -> None:
    store = FakeStore(quota_doc())
    rec = RefusalRecorder(store, interval=0.05)
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
    store = FakeStore(quota_doc())
    rec = RefusalRecorder(store, interval=0.05)
    b = binding("x", uid="rb-x")
    rec.observe(
        "ns", b, None, charge(b), None, Decision(False, "must specify cpu", REASON_FORBIDDEN)
    )
    await asyncio.sleep(0.1)  # nothing is scheduled; give a wrong implementation the chance
    assert store.puts == 0
    await rec.close()


async def test_a_lost_compare_and_swap_rereads_and_keeps_the_other_writer() -> None:
    store = FakeStore(quota_doc())
    rec = RefusalRecorder(store, interval=0.05)

    def other_writer(s: FakeStore, body: object) -> None:
        s.before_put = None
        s.bump("ns", "team-a", lambda d: d["status"].update(used={"requests.cpu": "7"}))

    store.before_put = other_writer
    refuse(rec, "x")
    await until(lambda: listed(store) == ["x"])
    assert store.conflicts == 1
    assert store.stored().status.used == {"requests.cpu": "7"}
    await rec.close()


async def test_a_workload_listed_by_another_quota_keeps_its_place_there() -> None:
    store = FakeStore(quota_doc("a"), quota_doc("b"))
    rec = RefusalRecorder(store, interval=0.05)
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
    store = FakeStore(quota_doc())
    rec = RefusalRecorder(store, interval=0.05)
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


async def test_the_list_waits_while_the_namespace_admits_then_is_written() -> None:
    store = FakeStore(quota_doc())
    storm = {"ns"}
    rec = RefusalRecorder(store, interval=0.05, busy=lambda ns: ns in storm, max_defer=30)
    refuse(rec, "x")
    await asyncio.sleep(0.2)  # give a wrong implementation the time to write
    assert store.puts == 0
    storm.clear()
    await until(lambda: listed(store) == ["x"])
    await rec.close()
