"""evaluate(): admit or deny a binding's delta against a namespace's quotas (docs/charging.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import resources
from karmadaquota.charge import Charge
from karmadaquota.evaluate import (
    REASON_EXCEEDED,
    REASON_FORBIDDEN,
    LimitedResource,
    QuotaView,
    delta,
    evaluate,
)
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.scopes import Expression
from tests.conftest import NOW, as_strings, charge_of, reservation, rl, view

CPU1 = {"cpu": "1", "memory": "1Gi"}
EXCEEDED_EXAMPLE = (
    "exceeded quota: team-a, requested: requests.cpu=2, used: requests.cpu=9, "
    "limited: requests.cpu=10"
)


def cpu_quota(used: str = "0", name: str = "team-a", hard: str = "10", **kw: Any) -> QuotaView:
    """A quota on requests.cpu only."""
    return view(name, {"requests.cpu": hard}, {"requests.cpu": used}, **kw)


# ---------------------------------------------------------------------------------------------
# admit / deny


def test_the_design_denial_message_exactly() -> None:
    d = evaluate([cpu_quota(used="9")], charge_of(2, CPU1))
    assert not d.allowed
    assert d.message == EXCEEDED_EXAMPLE
    assert d.reason == REASON_EXCEEDED == "QuotaExceeded"
    assert d.charges == {}


def test_admit_within_quota_charges_the_delta() -> None:
    d = evaluate([cpu_quota(used="8")], charge_of(2, CPU1))
    assert d.allowed
    assert d.message == ""
    assert {name: as_strings(rl_) for name, rl_ in d.charges.items()} == {
        "team-a": {"requests.cpu": "2"}
    }


def test_exactly_reaching_hard_is_admitted() -> None:
    assert evaluate([cpu_quota(used="7")], charge_of(3, CPU1)).allowed
    assert not evaluate([cpu_quota(used="7")], charge_of(4, CPU1)).allowed


def test_no_quotas_admit_everything() -> None:
    d = evaluate([], charge_of(100, CPU1))
    assert d.allowed
    assert d.charges == {}


def test_denial_names_only_exceeded_resources() -> None:
    q = view("team-a", {"requests.cpu": "10", "pods": "100"}, {"requests.cpu": "9", "pods": "1"})
    d = evaluate([q], charge_of(2, CPU1))
    assert d.message == EXCEEDED_EXAMPLE


def test_denial_lists_every_exceeded_resource_sorted() -> None:
    q = view(
        "team-a",
        {"requests.memory": "4Gi", "requests.cpu": "2", "pods": "10"},
        {"requests.memory": "3Gi", "requests.cpu": "1500m", "pods": "1"},
    )
    d = evaluate([q], charge_of(2, {"cpu": "500m", "memory": "1Gi"}))
    assert d.message == (
        "exceeded quota: team-a, requested: requests.cpu=1,requests.memory=2Gi, "
        "used: requests.cpu=1500m,requests.memory=3Gi, limited: requests.cpu=2,requests.memory=4Gi"
    )


def test_bare_cpu_and_object_counts_are_enforced() -> None:
    q = view(
        "team-a",
        {"cpu": "2", "count/deployments.apps": "1"},
        {"cpu": "0", "count/deployments.apps": "1"},
    )
    d = evaluate([q], charge_of(1, CPU1))
    assert d.message == (
        "exceeded quota: team-a, requested: count/deployments.apps=1, "
        "used: count/deployments.apps=1, limited: count/deployments.apps=1"
    )


def test_extended_resources_are_enforced_under_requests_names() -> None:
    q = view("gpu", {"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "2"})
    assert evaluate([q], charge_of(1, {**CPU1, "nvidia.com/gpu": "2"})).allowed
    d = evaluate([q], charge_of(3, {**CPU1, "nvidia.com/gpu": "1"}))
    assert not d.allowed
    assert "requested: requests.nvidia.com/gpu=3" in d.message


def test_service_binding_counts_against_count_services() -> None:
    q = view(
        "objs", {"services": "2", "count/services": "2"}, {"services": "2", "count/services": "1"}
    )
    d = evaluate([q], charge_of(kind="Service", api_version="v1"))
    assert d.message == (
        "exceeded quota: objs, requested: services=1, used: services=2, limited: services=2"
    )


def test_a_name_already_over_hard_does_not_block_requests_that_do_not_charge_it() -> None:
    # hard lowered below usage: pods are over, but a Service charges no pods
    q = view(
        "team-a",
        {"pods": "5", "count/services": "10"},
        {"pods": "6", "count/services": "0"},
    )
    d = evaluate([q], charge_of(kind="Service", api_version="v1"))
    assert d.allowed
    assert {n: as_strings(c) for n, c in d.charges.items()} == {"team-a": {"count/services": "1"}}


def test_a_reservation_on_a_name_not_requested_does_not_block() -> None:
    q = view(
        "team-a",
        {"requests.cpu": "10", "count/services": "5"},
        {"requests.cpu": "0", "count/services": "0"},
        reservations=[reservation({"requests.cpu": "11"})],
    )
    assert evaluate([q], charge_of(kind="Service", api_version="v1")).allowed


# ---------------------------------------------------------------------------------------------
# reservations: used + reserved + delta <= hard


def test_unexpired_reservations_count() -> None:
    q = cpu_quota(used="7", reservations=[reservation({"requests.cpu": "2"})])
    d = evaluate([q], charge_of(2, CPU1))
    assert d.message == EXCEEDED_EXAMPLE  # "used" shows used + reserved
    assert evaluate([q], charge_of(1, CPU1)).allowed


def test_expired_reservations_still_count() -> None:
    """A clock alone never frees quota: an expired charge holds until the controller counts or
    disproves it (the bug: a paused controller let a second workload in at the first one's
    expiry)."""
    q = cpu_quota(
        used="7",
        reservations=[
            reservation({"requests.cpu": "2"}, NOW - timedelta(seconds=1)),
            reservation({"requests.cpu": "1"}, NOW),
        ],
    )
    assert as_strings(q.reserved) == {"requests.cpu": "3"}
    assert not evaluate([q], charge_of(1, CPU1)).allowed


def test_several_reservations_add_up() -> None:
    q = cpu_quota(
        used="1",
        reservations=[
            reservation({"requests.cpu": "2", "pods": "2"}, name="a"),
            reservation({"requests.cpu": "500m"}, NOW + timedelta(hours=1), name="b"),
            reservation({"requests.cpu": "100"}, NOW - timedelta(hours=1), name="c"),
        ],
    )
    assert as_strings(q.reserved) == {"requests.cpu": "102500m", "pods": "2"}


@pytest.mark.parametrize(
    "expiration",
    [
        "",
        "not a time",
        "2026-13-01T00:00:00Z",
        "2026-01-01T12:00:01Z",
        "2026-01-01T12:00:00.5+00:00",
        "2026-01-01T13:30:00+02:00",  # 11:30 UTC
        "2026-01-01T12:00:01",  # no offset: read as UTC, never a crash
        "2026-01-01T11:59:59",
    ],
)
def test_every_expiration_holds_readable_or_not(expiration: str) -> None:
    q = cpu_quota(used="0", reservations=[reservation({"requests.cpu": "10"}, expiration)])
    assert as_strings(q.reserved) == {"requests.cpu": "10"}


def test_quota_view_parses_hard_used_and_scopes() -> None:
    q = view(
        "pc",
        {"requests.cpu": "10", "pods": 20},
        {"requests.cpu": "1500m", "pods": "3"},
        expressions=[("PriorityClass", "In", ["high"])],
    )
    assert q.name == "pc"
    assert q.hard == rl({"requests.cpu": "10", "pods": "20"})
    assert q.used == rl({"requests.cpu": "1500m", "pods": "3"})
    assert q.scopes == (Expression("PriorityClass", "In", frozenset({"high"})),)


def test_quota_view_rejects_bad_quantities_naming_the_field() -> None:
    with pytest.raises(QuantityError, match=r"status\.reservations\[0\]\.reserved\[pods\]"):
        cpu_quota(reservations=[reservation({"pods": "two"})])
    with pytest.raises(QuantityError, match=r"spec\.hard\[pods\]"):
        view("q", {"pods": "lots"})


def test_with_reserved_is_a_new_view() -> None:
    q = cpu_quota(used="1")
    more = q.with_reserved(rl({"requests.cpu": "2"})).with_reserved(rl({"requests.cpu": "3"}))
    assert as_strings(more.reserved) == {"requests.cpu": "5"}
    assert q.reserved == {}
    assert (more.name, more.hard, more.used, more.scopes) == (q.name, q.hard, q.used, q.scopes)
    assert not evaluate([more], charge_of(5, CPU1)).allowed
    assert evaluate([more], charge_of(4, CPU1)).allowed


# ---------------------------------------------------------------------------------------------
# UPDATE: only the positive part is charged


def test_scale_down_is_admitted_and_charges_nothing() -> None:
    q = cpu_quota(used="12")  # already over: scale-down must still pass
    d = evaluate([q], charge_of(1, CPU1), charge_of(3, CPU1))
    assert d.allowed
    assert d.charges == {}


def test_scale_up_charges_the_difference() -> None:
    q = cpu_quota(used="9")
    d = evaluate([q], charge_of(3, CPU1), charge_of(2, CPU1))
    assert d.allowed
    assert {n: as_strings(c) for n, c in d.charges.items()} == {"team-a": {"requests.cpu": "1"}}
    denied = evaluate([q], charge_of(4, CPU1), charge_of(2, CPU1))
    assert denied.message == EXCEEDED_EXAMPLE


def test_unchanged_update_is_admitted_even_over_quota() -> None:
    q = cpu_quota(used="50")
    same = charge_of(5, CPU1)
    d = evaluate([q], same, same)
    assert d.allowed
    assert d.charges == {}


def test_an_update_entering_a_scope_is_charged_in_full_there() -> None:
    """Dropping every request makes a binding BestEffort: that quota never charged it before,
    so the update costs it all the binding uses, though its total usage did not grow."""
    best_effort = view("be", {"pods": "0"}, scopes=["BestEffort"])
    before = charge_of(1, {"cpu": "100m", "memory": "128Mi"})
    after = charge_of(1, {})
    d = evaluate([best_effort], after, before)
    assert not d.allowed
    assert d.message == "exceeded quota: be, requested: pods=1, used: pods=0, limited: pods=0"
    d = evaluate([view("be", {"pods": "1"}, scopes=["BestEffort"])], after, before)
    assert d.allowed and as_strings(d.charges["be"]) == {"pods": "1"}


def test_an_update_changing_priority_class_is_charged_in_the_new_scope() -> None:
    high = view(
        "high", {"pods": "2"}, {"pods": "2"}, expressions=[("PriorityClass", "In", ["high"])]
    )
    d = evaluate([high], charge_of(1, CPU1, priority_class="high"), charge_of(1, CPU1))
    assert not d.allowed and d.reason == "QuotaExceeded"


def test_scheduling_a_duplicated_binding_charges_the_extra_copies() -> None:
    before = charge_of(2, CPU1)
    after = charge_of(2, CPU1, clusters={"member1": 2, "member2": 2})
    assert evaluate([cpu_quota(used="3", hard="5")], after, before).allowed
    q = cpu_quota(used="4", hard="5")
    d = evaluate([q], after, before)
    assert d.message == (
        "exceeded quota: team-a, requested: requests.cpu=2, used: requests.cpu=4, "
        "limited: requests.cpu=5"
    )


def test_update_swapping_cpu_for_memory_charges_only_the_growth() -> None:
    old = charge_of(2, {"cpu": "2", "memory": "1Gi"})
    new = charge_of(2, {"cpu": "1", "memory": "2Gi"})
    q = view(
        "team-a",
        {"requests.cpu": "10", "requests.memory": "10Gi"},
        {"requests.cpu": "10", "requests.memory": "1Gi"},
    )
    d = evaluate([q], new, old)
    assert d.allowed
    assert {n: as_strings(c) for n, c in d.charges.items()} == {
        "team-a": {"requests.memory": "2Gi"}
    }


def test_delta_of_a_create_is_the_whole_charge_without_zeros() -> None:
    c = charge_of(2, {"cpu": "0", "memory": "1Gi"})
    got = delta(c, None)
    assert "cpu" not in got and "requests.cpu" not in got
    assert as_strings(got) == {
        "count/deployments.apps": "1",
        "pods": "2",
        "count/pods": "2",
        "memory": "2Gi",
        "requests.memory": "2Gi",
    }


def test_delta_of_an_update_is_the_positive_part() -> None:
    old = charge_of(3, {"cpu": "1", "memory": "1Gi"})
    new = charge_of(2, {"cpu": "2", "memory": "1Gi"})
    assert as_strings(delta(new, old)) == {"cpu": "1", "requests.cpu": "1"}


# ---------------------------------------------------------------------------------------------
# must specify requests.cpu / memory


def test_must_specify_requests_cpu() -> None:
    d = evaluate([cpu_quota()], charge_of(2, {"memory": "1Gi"}))
    assert not d.allowed
    assert d.message == "failed quota: team-a: must specify requests.cpu"
    assert d.reason == REASON_FORBIDDEN == "Forbidden"
    assert d.charges == {}


def test_must_specify_bare_cpu() -> None:
    q = view("team-a", {"cpu": "10"})
    assert evaluate([q], charge_of(2)).message == "failed quota: team-a: must specify cpu"


def test_must_specify_lists_every_missing_tracked_name() -> None:
    q = view("team-a", {"requests.cpu": "10", "memory": "10Gi", "pods": "10"})
    assert (
        evaluate([q], charge_of(1)).message
        == "failed quota: team-a: must specify memory,requests.cpu"
    )


def test_must_specify_not_required_without_replicas() -> None:
    assert evaluate([cpu_quota()], charge_of(0)).allowed
    assert evaluate([cpu_quota()], charge_of(kind="ConfigMap", api_version="v1")).allowed


def test_must_specify_not_required_by_quotas_that_do_not_track_it() -> None:
    q = view("team-a", {"pods": "10", "requests.nvidia.com/gpu": "1"})
    assert evaluate([q], charge_of(2)).allowed


def test_must_specify_not_for_an_update_that_charges_nothing() -> None:
    old = charge_of(3)
    assert evaluate([cpu_quota()], charge_of(3), old).allowed
    assert evaluate([cpu_quota()], charge_of(1), old).allowed  # scale-down


def test_must_specify_for_an_update_that_adds_replicas() -> None:
    # created before the quota existed; scaling it up now needs a cpu request
    d = evaluate([cpu_quota()], charge_of(4), charge_of(3))
    assert d.message == "failed quota: team-a: must specify requests.cpu"


def test_must_specify_not_required_by_a_scoped_quota_that_does_not_match() -> None:
    q = view("high", {"requests.cpu": "10"}, expressions=[("PriorityClass", "In", ["high"])])
    assert evaluate([q], charge_of(2, priority_class="low")).allowed
    d = evaluate([q], charge_of(2, priority_class="high"))
    assert d.message == "failed quota: high: must specify requests.cpu"


# ---------------------------------------------------------------------------------------------
# several quotas


def test_two_quotas_must_both_admit() -> None:
    compute = cpu_quota(used="0", name="compute")
    counts = view("counts", {"count/deployments.apps": "5", "pods": "10"})
    d = evaluate([compute, counts], charge_of(2, CPU1))
    assert d.allowed
    assert {n: as_strings(c) for n, c in d.charges.items()} == {
        "compute": {"requests.cpu": "2"},
        "counts": {"count/deployments.apps": "1", "pods": "2"},
    }


def test_second_quota_denies_the_whole_request() -> None:
    compute = cpu_quota(used="0", name="a-compute")
    pods = view("b-pods", {"pods": "3"}, {"pods": "2"})
    d = evaluate([compute, pods], charge_of(2, CPU1))
    assert not d.allowed
    assert d.message == "exceeded quota: b-pods, requested: pods=2, used: pods=2, limited: pods=3"
    assert d.charges == {}


def test_quotas_are_checked_in_name_order() -> None:
    a = cpu_quota(used="10", name="a-cpu")
    b = cpu_quota(used="10", name="b-cpu-quota")
    for quotas in ([a, b], [b, a]):
        assert evaluate(quotas, charge_of(1, CPU1)).message.startswith("exceeded quota: a-cpu,")


def test_charges_only_quotas_the_delta_touches_masked_to_their_names() -> None:
    cpu = cpu_quota(name="cpu")
    services = view("services", {"count/services": "5"})
    mem = view("mem", {"memory": "10Gi", "limits.cpu": "1"})
    d = evaluate([cpu, services, mem], replace(charge_of(2, CPU1), missing_limits=frozenset()))
    assert d.allowed
    assert set(d.charges) == {"cpu", "mem"}
    assert as_strings(d.charges["cpu"]) == {"requests.cpu": "2"}
    assert as_strings(d.charges["mem"]) == {"memory": "2Gi"}


# ---------------------------------------------------------------------------------------------
# scopes


def test_scoped_quota_ignores_non_matching_bindings() -> None:
    high = view("high", {"pods": "0"}, expressions=[("PriorityClass", "In", ["high"])])
    d = evaluate([high], charge_of(2, CPU1, priority_class="low"))
    assert d.allowed
    assert d.charges == {}
    denied = evaluate([high], charge_of(2, CPU1, priority_class="high"))
    assert (
        denied.message == "exceeded quota: high, requested: pods=2, used: pods=0, limited: pods=0"
    )


def test_best_effort_quota_counts_only_best_effort_pods() -> None:
    be = view("be", {"pods": "2"}, scopes=["BestEffort"])
    assert evaluate([be], charge_of(5, CPU1)).allowed
    assert not evaluate([be], charge_of(3)).allowed
    assert evaluate([be], charge_of(2)).charges == {"be": rl(pods="2")}


def test_scoped_quota_ignores_bindings_without_replicas() -> None:
    q = view("pc", {"pods": "0"}, expressions=[("PriorityClass", "DoesNotExist", [])])
    assert evaluate([q], charge_of(kind="Service", api_version="v1")).allowed


# ---------------------------------------------------------------------------------------------
# status unknown


def test_status_unknown_when_used_lacks_a_charged_name() -> None:
    q = view("team-a", {"requests.cpu": "10", "pods": "10"}, {})
    d = evaluate([q], charge_of(1, CPU1))
    assert not d.allowed
    assert d.message == "status unknown for quota: team-a, resources: pods,requests.cpu"
    assert d.reason == REASON_FORBIDDEN


def test_status_unknown_only_for_names_being_charged() -> None:
    q = view("team-a", {"requests.cpu": "10", "count/services": "5"}, {"count/services": "0"})
    assert evaluate([q], charge_of(kind="Service", api_version="v1")).allowed
    d = evaluate([q], charge_of(1, CPU1))
    assert d.message == "status unknown for quota: team-a, resources: requests.cpu"


# ---------------------------------------------------------------------------------------------
# limitedResources


GPU_LIMITED = LimitedResource(match_contains=("nvidia.com/gpu",))
HIGH = Expression("PriorityClass", "In", frozenset({"high"}))


def test_limited_resource_needs_a_covering_quota() -> None:
    gpu = charge_of(1, {**CPU1, "nvidia.com/gpu": "1"})
    d = evaluate([cpu_quota()], gpu, limited=[GPU_LIMITED])
    assert not d.allowed
    assert d.message == "insufficient quota to consume: requests.nvidia.com/gpu"
    assert d.reason == REASON_FORBIDDEN
    covered = view("gpu", {"requests.nvidia.com/gpu": "4"})
    assert evaluate([cpu_quota(), covered], gpu, limited=[GPU_LIMITED]).allowed


def test_limited_resource_lists_every_uncovered_name() -> None:
    lim = LimitedResource(match_contains=("cpu", "memory"))
    d = evaluate([], charge_of(1, CPU1), limited=[lim])
    assert d.message == ("insufficient quota to consume: cpu,memory,requests.cpu,requests.memory")


def test_limited_resource_covered_only_by_a_matching_quota() -> None:
    covered_for_high = view(
        "gpu-high",
        {"requests.nvidia.com/gpu": "4"},
        expressions=[("PriorityClass", "In", ["high"])],
    )
    low = charge_of(1, {**CPU1, "nvidia.com/gpu": "1"}, priority_class="low")
    high = charge_of(1, {**CPU1, "nvidia.com/gpu": "1"}, priority_class="high")
    assert not evaluate([covered_for_high], low, limited=[GPU_LIMITED]).allowed
    assert evaluate([covered_for_high], high, limited=[GPU_LIMITED]).allowed


def test_limited_resource_ignores_bindings_that_do_not_consume_it() -> None:
    assert evaluate([], charge_of(2, CPU1), limited=[GPU_LIMITED]).allowed


def test_limited_scope_needs_a_quota_with_that_scope() -> None:
    lim = LimitedResource(match_scopes=(HIGH,))
    high = charge_of(1, CPU1, priority_class="high")
    d = evaluate([cpu_quota()], high, limited=[lim])
    assert not d.allowed
    assert d.message == "insufficient quota to match these scopes: [{PriorityClass In [high]}]"
    assert d.reason == REASON_FORBIDDEN
    scoped = view("high", {"pods": "10"}, expressions=[("PriorityClass", "In", ["high"])])
    assert evaluate([scoped], high, limited=[lim]).allowed


def test_limited_scope_does_not_apply_to_other_bindings() -> None:
    lim = LimitedResource(match_scopes=(HIGH,))
    assert evaluate([], charge_of(1, CPU1, priority_class="low"), limited=[lim]).allowed
    assert evaluate([], charge_of(1, CPU1), limited=[lim]).allowed
    assert evaluate([], charge_of(kind="Secret", api_version="v1"), limited=[lim]).allowed


def test_limited_scope_lists_every_uncovered_scope() -> None:
    lim = LimitedResource(
        match_scopes=(
            HIGH,
            Expression("PriorityClass", "Exists"),
            Expression("NotBestEffort", "Exists"),
        )
    )
    d = evaluate([], charge_of(1, CPU1, priority_class="high"), limited=[lim])
    assert d.message == (
        "insufficient quota to match these scopes: [{PriorityClass In [high]} "
        "{PriorityClass Exists []} {NotBestEffort Exists []}]"
    )


def test_limited_checks_do_not_block_an_update_that_charges_nothing() -> None:
    lim = LimitedResource(match_contains=("nvidia.com/gpu",), match_scopes=(HIGH,))
    gpu = charge_of(2, {**CPU1, "nvidia.com/gpu": "1"}, priority_class="high")
    assert not evaluate([], gpu, limited=[lim]).allowed
    assert evaluate([], gpu, gpu, limited=[lim]).allowed


# ---------------------------------------------------------------------------------------------
# properties


replica_counts = st.integers(min_value=0, max_value=6)
milli = st.integers(min_value=0, max_value=4000)


def cpu_charge(replicas: int, millicpu: int) -> Charge:
    return charge_of(replicas, {"cpu": f"{millicpu}m", "memory": "64Mi"})


@settings(max_examples=200, deadline=None)
@given(
    hard_milli=st.integers(min_value=0, max_value=20000),
    hard_pods=st.integers(min_value=0, max_value=30),
    used_fraction=st.floats(min_value=0, max_value=1),
    creates=st.lists(st.tuples(replica_counts, milli), max_size=25),
)
def test_admitted_creates_never_exceed_hard(
    hard_milli: int,
    hard_pods: int,
    used_fraction: float,
    creates: list[tuple[int, int]],
) -> None:
    """Creates checked in order against a running copy (the batcher's loop), with an oracle."""
    used_milli = int(hard_milli * used_fraction)
    q = view(
        "team-a",
        {"requests.cpu": f"{hard_milli}m", "pods": str(hard_pods)},
        {"requests.cpu": f"{used_milli}m", "pods": "0"},
    )
    in_use_milli, in_use_pods = used_milli, 0
    for replicas, millicpu in creates:
        d = evaluate([q], cpu_charge(replicas, millicpu))
        fits = (
            in_use_milli + replicas * millicpu <= hard_milli and in_use_pods + replicas <= hard_pods
        )
        assert d.allowed is fits
        if d.allowed:
            q = q.with_reserved(dict(d.charges.get("team-a", {})))
            in_use_milli += replicas * millicpu
            in_use_pods += replicas
        else:
            assert d.reason == REASON_EXCEEDED
            assert d.charges == {}
        in_use = resources.add(q.used, q.reserved)
        assert resources.less_or_equal(in_use, q.hard) == (True, [])
    assert q.reserved.get("requests.cpu", Quantity.zero()).nanos == (
        (in_use_milli - used_milli) * 10**6
    )


@settings(max_examples=200, deadline=None)
@given(
    new=st.tuples(replica_counts, milli, st.dictionaries(st.sampled_from("abc"), replica_counts)),
    old=st.tuples(replica_counts, milli, st.dictionaries(st.sampled_from("abc"), replica_counts)),
)
def test_delta_is_never_negative_and_bounded_by_new(
    new: tuple[int, int, dict[str, int]], old: tuple[int, int, dict[str, int]]
) -> None:
    def make(spec: tuple[int, int, dict[str, int]]) -> Charge:
        replicas, millicpu, clusters = spec
        return charge_of(replicas, {"cpu": f"{millicpu}m"}, clusters=clusters or None)

    n, o = make(new), make(old)
    d = delta(n, o)
    assert all(q.sign > 0 for q in d.values())
    for name, q in d.items():
        assert q <= n.total[name]
        assert q == n.total[name] - o.total.get(name, Quantity.zero())
    assert delta(n, n) == {}
    assert delta(n, None) == resources.remove_zeros(n.total)


@settings(max_examples=100, deadline=None)
@given(
    replicas=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=12),
    hard=st.integers(min_value=0, max_value=40),
)
def test_updates_admitted_in_sequence_never_exceed_hard(replicas: list[int], hard: int) -> None:
    """A binding scaled up and down: reserved growth stays within hard."""
    q = view("team-a", {"pods": str(hard), "requests.cpu": str(hard)})
    old: Charge | None = None
    for r in replicas:
        new = charge_of(r, {"cpu": "1"})
        d = evaluate([q], new, old)
        if d.allowed:
            q = q.with_reserved(dict(d.charges.get("team-a", {})))
            old = new
        in_use: Mapping[str, Quantity] = resources.add(q.used, q.reserved)
        assert resources.less_or_equal(in_use, q.hard)[0]


# ---------------------------------------------------------------------------------------------
# what Karmada may run beyond any count (issue 29)

CPU_MEM = {"cpu": "500m", "memory": "1Gi"}


def _guarded(view: QuotaView) -> QuotaView:
    return replace(view, guarded=True)


def test_a_daemonset_is_refused_by_a_quota_tracking_pods_with_the_way_out() -> None:
    ds = charge_of(0, None, api_version="apps/v1", kind="DaemonSet")
    d = evaluate([view("team", {"pods": "10"}, {"pods": "0"}, member_enforcement="None")], ds)
    assert not d.allowed
    assert d.reason == "Forbidden"
    assert d.message == (
        "failed quota: team: cannot charge spec.resource: DaemonSet.apps: Karmada cannot count "
        "its replicas (it tracks pods) while the quota opts out of member guards "
        "(memberEnforcement: None); set memberEnforcement: ResourceQuota, the default, so that "
        "every member cluster counts the pods it runs"
    )
    assert evaluate([view("team", {"pods": "10"}, {"pods": "0"})], ds).allowed  # guarded


def test_a_quota_on_count_pods_refuses_past_its_pods_and_what_it_cannot_count() -> None:
    """Issue 34: count/pods=2 was accepted and charged nothing (5 pods ran)."""
    quota = view("team", {"count/pods": "2"}, {"count/pods": "0"}, member_enforcement="None")
    assert evaluate([quota], charge_of(2, CPU1, clusters={"m1": 2})).allowed
    d = evaluate([quota], charge_of(5, CPU1, clusters={"m1": 3, "m2": 2}))
    assert not d.allowed
    assert d.message == (
        "exceeded quota: team, requested: count/pods=5, used: count/pods=0, limited: count/pods=2"
    )
    ds = charge_of(0, None, api_version="apps/v1", kind="DaemonSet")
    d = evaluate([quota], ds)
    assert not d.allowed and "(it tracks count/pods)" in d.message


def test_a_daemonset_is_admitted_where_members_enforce_or_only_objects_are_counted() -> None:
    ds = charge_of(0, None, api_version="apps/v1", kind="DaemonSet")
    counted = view("team", {"pods": "10"}, {"pods": "0"})
    assert evaluate([_guarded(counted)], ds).allowed
    objects = view(
        "objects",
        {"count/daemonsets.apps": "1", "services": "2"},
        {"count/daemonsets.apps": "0", "services": "0"},
    )
    d = evaluate([objects], ds)
    assert d.allowed
    assert str(d.charges["objects"]["count/daemonsets.apps"]) == "1"


def test_preserving_resources_is_refused_on_update_even_when_nothing_grows() -> None:
    quota = view("team", {"requests.cpu": "10"}, {"requests.cpu": "1"}, member_enforcement="None")
    old = charge_of(1, CPU_MEM, clusters={"m1": 1})
    new = charge_of(1, CPU_MEM, clusters={"m1": 1}, preserve=True)
    d = evaluate([quota], new, old)
    assert not d.allowed
    assert "spec.preserveResourcesOnDeletion: true" in d.message
    assert evaluate([quota], new, new).allowed  # already preserved: nothing new to refuse
