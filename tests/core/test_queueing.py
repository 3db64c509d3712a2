"""Queue instead of refuse: the zero-charge rule, the queueing decision at creation, the
admission order (priority, age), BestEffortFIFO against StrictFIFO, and the patches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import queued, queueing
from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.charge import charge, full_charge
from karmadaquota.evaluate import QuotaView, delta, evaluate
from karmadaquota.resources import ResourceList
from karmadaquota.resources import parse_resource_list as _parse
from tests.conftest import binding_doc

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def parse_resource_list(raw: dict[str, str]) -> ResourceList:
    return _parse(raw, "test")


def view(name: str = "team", pods: int = 4, used: int = 0) -> QuotaView:
    return QuotaView(
        name,
        parse_resource_list({"pods": str(pods)}),
        parse_resource_list({"pods": str(used)}),
        {},
    )


def policy(
    name: str = "team", queue: bool = True, strict: bool = False, n: int = 0
) -> queueing.Policy:
    return queueing.Policy(name, queue, strict, n)


def queued_doc(replicas: int, quota: str = "team", **kw: Any) -> dict[str, Any]:
    doc = binding_doc(replicas, {"cpu": "1"}, **kw)
    doc["metadata"].setdefault("annotations", {})[queued.ANNOTATION] = quota
    doc["spec"]["suspension"] = {"scheduling": True}
    return doc


def rb(doc: dict[str, Any]) -> ResourceBinding:
    return ResourceBinding.model_validate(doc)


# ---- the zero-charge rule --------------------------------------------------------------------


def test_a_queued_binding_is_charged_nothing_but_keeps_its_traits_and_full_charge() -> None:
    b = rb(queued_doc(3))
    assert queued.queued_by(b) == "team"
    assert charge(b).total == {}
    assert full_charge(b).total["pods"] == parse_resource_list({"p": "3"})["p"]
    assert charge(b).traits == full_charge(b).traits


@pytest.mark.parametrize(
    "change",
    [
        "no annotation",
        "not suspended",
        "suspension false",
        "placed",
    ],
)
def test_anything_short_of_all_three_conditions_is_charged_in_full(change: str) -> None:
    doc = queued_doc(3)
    if change == "no annotation":
        del doc["metadata"]["annotations"][queued.ANNOTATION]
    elif change == "not suspended":
        del doc["spec"]["suspension"]
    elif change == "suspension false":
        doc["spec"]["suspension"]["scheduling"] = False
    else:
        doc["spec"]["clusters"] = [{"name": "member1", "replicas": 3}]
    b = rb(doc)
    assert queued.queued_by(b) == ""
    assert charge(b).total == full_charge(b).total


def test_suspending_and_annotating_a_placed_binding_buys_no_room() -> None:
    """The abuse: a user puts our annotation and a suspension on a running binding. It stays
    charged in full (its replicas run in the members), and the update frees nothing."""
    placed = binding_doc(4, {"cpu": "1"}, clusters={"member1": 4})
    abused = queued_doc(4, clusters={"member1": 4})
    old, new = charge(rb(placed)), charge(rb(abused))
    assert new.total == old.total
    assert evaluate([view(used=4)], new, old).allowed  # nothing to charge, nothing released


def test_an_evicted_or_required_binding_is_no_queued_binding() -> None:
    """Issue 29: a graceful eviction task moved a running binding's clusters out, and with our
    annotation and a suspension it counted as queued, charged nothing, while the evicted
    cluster's Work kept its pods running."""
    evicted = queued_doc(2)
    evicted["spec"]["gracefulEvictionTasks"] = [{"fromCluster": "member1", "replicas": 2}]
    required = queued_doc(2)
    required["spec"]["requiredBy"] = [{"name": "x", "clusters": [{"name": "m2", "replicas": 2}]}]
    for doc in (evicted, required):
        b = rb(doc)
        assert queued.queued_by(b) == ""
        assert str(charge(b).total["pods"]) == "2"


def test_leaving_the_queue_by_any_door_is_charged_in_full_and_refused_when_full() -> None:
    old = charge(rb(queued_doc(2)))
    for doc in (
        binding_doc(2, {"cpu": "1"}),  # suspension and annotation cleared (our admission)
        {**queued_doc(2), "spec": {**queued_doc(2)["spec"], "suspension": None}},
    ):
        new = charge(rb(doc))
        assert delta(new, old)["pods"] == parse_resource_list({"p": "2"})["p"]
        d = evaluate([view(used=3)], new, old)
        assert not d.allowed and d.reason == "QuotaExceeded"
        assert evaluate([view(used=2)], new, old).allowed
    annotation_only = queued_doc(2)
    del annotation_only["metadata"]["annotations"][queued.ANNOTATION]
    assert not evaluate([view(used=3)], charge(rb(annotation_only)), old).allowed


def test_a_queued_binding_missing_a_tracked_request_is_still_refused() -> None:
    doc = queued_doc(2)
    doc["spec"]["replicaRequirements"]["resourceRequest"] = {}
    cpu_quota = QuotaView(
        "team", parse_resource_list({"requests.cpu": "4"}), parse_resource_list({}), {}
    )
    d = evaluate([cpu_quota], charge(rb(doc)))
    assert not d.allowed and "must specify" in d.message


# ---- at creation -----------------------------------------------------------------------------


def test_a_binding_that_fits_is_not_queued() -> None:
    assert (
        queueing.decide([view(used=2)], {"team": policy()}, full_charge(rb(binding_doc(2)))) is None
    )


def test_a_binding_that_does_not_fit_a_queue_quota_is_queued_naming_it() -> None:
    d = queueing.decide([view(used=3)], {"team": policy()}, full_charge(rb(binding_doc(2))))
    assert d is not None and d.quota == "team" and d.reason == queueing.REASON_EXCEEDED_QUEUE
    assert d.message.startswith("exceeded quota: team")


def test_a_refuse_quota_queues_nothing() -> None:
    pol = {"team": policy(queue=False)}
    assert queueing.decide([view(used=3)], pol, full_charge(rb(binding_doc(2)))) is None


def test_over_a_refuse_quota_too_nothing_is_queued() -> None:
    """Queueing behind a quota that refuses anyway would only hide the refusal."""
    views = [view("a", used=3), view("b", used=3)]
    pols = {"a": policy("a"), "b": policy("b", queue=False)}
    assert queueing.decide(views, pols, full_charge(rb(binding_doc(2)))) is None


def test_strict_fifo_queues_one_that_fits_behind_others_best_effort_does_not() -> None:
    full = full_charge(rb(binding_doc(1)))
    strict = queueing.decide([view(used=0)], {"team": policy(strict=True, n=2)}, full)
    assert strict is not None and strict.reason == queueing.REASON_BEHIND
    assert queueing.decide([view(used=0)], {"team": policy(strict=True, n=0)}, full) is None
    assert queueing.decide([view(used=0)], {"team": policy(n=2)}, full) is None


def test_refused_for_another_reason_is_left_to_the_validating_webhook() -> None:
    cpu = QuotaView("team", parse_resource_list({"requests.cpu": "1"}), parse_resource_list({}), {})
    no_cpu = full_charge(rb(binding_doc(2, {"memory": "1Gi"})))
    assert queueing.decide([cpu], {"team": policy()}, no_cpu) is None


def test_the_queue_patch_suspends_and_names_the_quota_and_nothing_else() -> None:
    for doc in (binding_doc(2, {"cpu": "1"}), {**binding_doc(2), "metadata": {"name": "x"}}):
        doc["spec"]["suspension"] = {"dispatching": True} if "uid" in doc["metadata"] else None
        if doc["spec"]["suspension"] is None:
            del doc["spec"]["suspension"]
        out = jsonpatch.apply_patch(doc, queueing.queue_patch(doc, "team"))
        assert out["metadata"]["annotations"][queued.ANNOTATION] == "team"
        assert out["spec"]["suspension"]["scheduling"] is True
        assert queued.queued_by(rb(out)) == "team"
        rest = {k: v for k, v in out["spec"].items() if k != "suspension"}
        assert rest == {k: v for k, v in doc["spec"].items() if k != "suspension"}
    kept = binding_doc(1)
    kept["spec"]["suspension"] = {"dispatching": True}
    out = jsonpatch.apply_patch(kept, queueing.queue_patch(kept, "team"))
    assert out["spec"]["suspension"] == {"dispatching": True, "scheduling": True}


def test_the_admit_patch_clears_ours_on_the_version_decided_from() -> None:
    p = queueing.admit_patch("42")
    assert p["metadata"] == {"resourceVersion": "42", "annotations": {queued.ANNOTATION: None}}
    assert p["spec"] == {"suspension": {"scheduling": None}}


# ---- the queue -------------------------------------------------------------------------------


def entry(
    name: str,
    pods: int,
    age: int,
    quota: str = "team",
    schedule: int | None = None,
    klass: str = "",
) -> queueing.QueueEntry:
    b = rb(binding_doc(pods, {"cpu": "1"}, name=name, priority_class=klass))
    return queueing.QueueEntry(
        name=name,
        uid=f"uid-{name}",
        resource_version="1",
        quota=quota,
        charge=full_charge(b),
        created=T0 - timedelta(seconds=age),
        schedule_priority=schedule,
        template=queueing.Template("apps/v1", "Deployment", name, f"t-{name}"),
    )


def names(picks: list[queueing.Pick]) -> list[str]:
    return [p.entry.name for p in picks]


def test_order_is_priority_then_age_then_name() -> None:
    es = [
        entry("old", 1, 30),
        entry("young", 1, 10),
        entry("vip", 1, 1, klass="high"),
        entry("scheduled", 1, 5, schedule=500),
        entry("b-twin", 1, 20),
        entry("a-twin", 1, 20),
    ]
    ranked = queueing.order(es, {"high": 1000})
    assert [e.name for e in ranked] == ["vip", "scheduled", "old", "a-twin", "b-twin", "young"]
    # schedulePriority wins over the class where Karmada set one
    both = entry("both", 1, 1, schedule=1, klass="high")
    assert queueing.priority(both, {"high": 1000}) == 1


def test_best_effort_admits_every_one_that_fits_in_order() -> None:
    es = [entry("big", 3, 30), entry("small", 1, 20), entry("small2", 1, 10)]
    picks = queueing.select(es, [view(used=2)], {"team": policy()}, {})
    assert names(picks) == ["small", "small2"]  # each pick counted for the next
    assert all(p.reason == queueing.ADMITTED_ROOM for p in picks)


def test_strict_fifo_stops_at_the_first_that_does_not_fit() -> None:
    es = [entry("big", 3, 30), entry("small", 1, 20)]
    assert queueing.select(es, [view(used=2)], {"team": policy(strict=True)}, {}) == []
    picks = queueing.select(es, [view(used=1)], {"team": policy(strict=True)}, {})
    assert names(picks) == ["big"]


def test_never_more_than_fits_whatever_the_queue() -> None:
    es = [entry(f"w{i}", 1 + i % 3, 100 - i) for i in range(30)]
    for used in range(0, 11):
        picks = queueing.select(es, [view(pods=10, used=used)], {"team": policy()}, {})
        assert sum(p.entry.charge.total["pods"].nanos for p in picks) <= (10 - used) * 10**9


def test_a_quota_switched_to_refuse_or_deleted_still_drains_its_queue() -> None:
    es = [entry("q1", 1, 10)]
    refuse = queueing.select(es, [view(used=0)], {"team": policy(queue=False)}, {})
    assert [(p.entry.name, p.reason) for p in refuse] == [("q1", queueing.ADMITTED_REFUSE_MODE)]
    gone = queueing.select(es, [], {}, {})
    assert [(p.entry.name, p.reason) for p in gone] == [("q1", queueing.ADMITTED_QUOTA_GONE)]


def test_fit_is_checked_against_every_quota_of_the_namespace() -> None:
    es = [entry("w", 2, 10)]
    views = [view("team", used=0), view("other", pods=1)]
    assert queueing.select(es, views, {"team": policy(), "other": policy("other")}, {}) == []


def test_policy_reads_the_quota_spec_and_status() -> None:
    q = KarmadaQuota.model_validate(
        {
            "metadata": {"name": "team", "namespace": "ns"},
            "spec": {"hard": {"pods": "1"}, "onExceed": "Queue", "queueingStrategy": "StrictFIFO"},
            "status": {"queued": 3},
        }
    )
    assert queueing.Policy.of(q) == queueing.Policy("team", True, True, 3)
    default = KarmadaQuota.model_validate({"metadata": {"name": "d"}, "spec": {"hard": {}}})
    assert queueing.Policy.of(default) == queueing.Policy("d", False, False, 0)


# ---- properties ------------------------------------------------------------------------------

_ENTRY = st.tuples(
    st.integers(1, 5),  # pods
    st.integers(0, 50),  # age
    st.sampled_from(["", "high", "low"]),  # priority class
    st.none() | st.integers(-5, 5),  # schedulePriority
)


@given(
    raw=st.lists(_ENTRY, max_size=12),
    hard=st.integers(0, 20),
    used=st.integers(0, 20),
    strict=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_select_never_admits_more_than_fits_and_keeps_the_order(
    raw: list[tuple[int, int, str, int | None]], hard: int, used: int, strict: bool
) -> None:
    classes = {"high": 10, "low": -10}
    es = [entry(f"w{i:02d}", p, age, schedule=s, klass=k) for i, (p, age, k, s) in enumerate(raw)]
    picks = queueing.select(
        es, [view(pods=hard, used=used)], {"team": policy(strict=strict)}, classes
    )
    taken = sum(p.entry.charge.total["pods"].nanos for p in picks) // 10**9
    assert used + taken <= hard or not picks
    ranked = queueing.order(es, classes)
    picked = [p.entry.name for p in picks]
    # picks come in queue order
    assert picked == [e.name for e in ranked if e.name in set(picked)]
    room = hard - used
    for e in ranked:
        pods = e.charge.total["pods"].nanos // 10**9
        if e.name in picked:
            room -= pods
        elif strict:
            # StrictFIFO: nothing after the first that did not fit
            assert pods > room
            assert all(n not in picked for n in [x.name for x in ranked[ranked.index(e) :]])
            break
        else:
            assert pods > room  # BestEffortFIFO skips only what does not fit
