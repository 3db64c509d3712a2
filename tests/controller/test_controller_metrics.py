"""The controller's per-quota gauges: reservations and the per-member breakdown, stale series
dropped when a quota stops tracking them or is deleted."""

from __future__ import annotations

from karmadaquota.api import KarmadaQuotaStatus
from karmadaquota.controller.metrics import ControllerMetrics
from tests.conftest import rl


def samples(m: ControllerMetrics, name: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(s.labels.values()): s.value
        for metric in m.registry.collect()
        for s in metric.samples
        if s.name == name
    }


def status(**raw: object) -> KarmadaQuotaStatus:
    return KarmadaQuotaStatus.model_validate(raw)


def reservation(uid: str, **reserved: str) -> dict[str, object]:
    return {
        "reservedBy": {"apiVersion": "v", "kind": "ResourceBinding", "name": uid, "uid": uid},
        "reserved": reserved,
        "expirationTime": "2026-01-01T12:01:00Z",
    }


def test_reservations_and_members_are_published_and_stale_series_dropped() -> None:
    m = ControllerMetrics()
    hard = rl({"requests.cpu": "4", "pods": "10"})
    m.set_quota(
        "ns",
        "q",
        rl({"requests.cpu": "1500m", "pods": "3"}),
        hard,
        status(
            reservations=[reservation("a", pods="1"), reservation("b", pods="2")],
            aggregatedStatus=[
                {"clusterName": "m1", "used": {"pods": "2"}, "observed": {"pods": "1"}},
                {"clusterName": "m2", "used": {"pods": "1"}},
            ],
        ),
    )
    assert samples(m, "karmadaquota_quota_reservations") == {("ns", "q"): 2}
    assert samples(m, "karmadaquota_quota_reserved") == {
        ("ns", "q", "requests.cpu"): 0.0,
        ("ns", "q", "pods"): 3.0,
    }
    assert samples(m, "karmadaquota_quota_member_used") == {
        ("ns", "q", "pods", "m1"): 2.0,
        ("ns", "q", "pods", "m2"): 1.0,
    }
    assert samples(m, "karmadaquota_quota_member_observed") == {("ns", "q", "pods", "m1"): 1.0}
    assert samples(m, "karmadaquota_quota_used")[("ns", "q", "requests.cpu")] == 1.5

    # m2 left, pods no longer tracked: their series go
    m.set_quota(
        "ns",
        "q",
        rl({"requests.cpu": "1"}),
        rl({"requests.cpu": "4"}),
        status(aggregatedStatus=[{"clusterName": "m1", "used": {"requests.cpu": "1"}}]),
    )
    assert samples(m, "karmadaquota_quota_member_used") == {("ns", "q", "requests.cpu", "m1"): 1.0}
    assert samples(m, "karmadaquota_quota_member_observed") == {}
    assert samples(m, "karmadaquota_quota_reservations") == {("ns", "q"): 0}
    assert set(samples(m, "karmadaquota_quota_hard")) == {("ns", "q", "requests.cpu")}

    m.forget_quota("ns", "q")
    for name in ("hard", "used", "reserved", "reservations", "member_used"):
        assert samples(m, f"karmadaquota_quota_{name}") == {}


def test_member_guards_are_published_per_member_and_dropped_with_the_quota() -> None:
    m = ControllerMetrics()
    hard = rl({"pods": "10"})
    m.set_quota(
        "ns",
        "q",
        rl({"pods": "3"}),
        hard,
        status(
            aggregatedStatus=[
                {"clusterName": "m1", "used": {"pods": "2"}, "guard": {"pods": "6"}},
                {"clusterName": "m2", "used": {"pods": "0"}, "guard": {"pods": "4"}},
            ],
        ),
    )
    m.guard_rebalances.labels("ns", "q").inc()
    assert samples(m, "karmadaquota_quota_member_guard_hard") == {
        ("ns", "q", "pods", "m1"): 6.0,
        ("ns", "q", "pods", "m2"): 4.0,
    }
    assert samples(m, "karmadaquota_guard_rebalances_total") == {("ns", "q"): 1.0}
    m.forget_quota("ns", "q")
    assert samples(m, "karmadaquota_quota_member_guard_hard") == {}
    assert samples(m, "karmadaquota_guard_rebalances_total") == {}
