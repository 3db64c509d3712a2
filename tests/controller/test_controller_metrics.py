"""The controller's per-quota gauges: reservations and the per-member breakdown, stale series
dropped when a quota stops tracking them or is deleted."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from prometheus_client import generate_latest

from karmadaquota.api import KarmadaQuotaStatus
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.serving.exposition import exposition
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


def many_quotas(m: ControllerMetrics, quotas: int, clusters: int = 18) -> None:
    """`quotas` quotas, each placed on `clusters` clusters and observed in 3 (as at scale)."""
    hard = rl({"requests.cpu": "100000", "pods": "1000000"})
    for i in range(quotas):
        members = [
            {"clusterName": f"c{(i + k) % 100:03d}", "used": {"requests.cpu": "100m", "pods": "1"}}
            | ({"observed": {"pods": "0"}} if k < 3 else {})
            for k in range(clusters)
        ]
        m.set_quota(
            f"ns-{i}",
            "q",
            rl({"requests.cpu": "1800m", "pods": "18"}),
            hard,
            status(reservations=[reservation(f"r{i}", pods="1")], aggregatedStatus=members),
        )


def steady(text: bytes) -> list[bytes]:
    """The lines that do not move between two scrapes (the process's CPU and memory do)."""
    return [line for line in text.splitlines() if b"process_" not in line and b"_gc_" not in line]


def test_the_exposition_in_pieces_is_generate_latest_s_text() -> None:
    """What /metrics serves a piece at a time is, joined, the library's own text (counters
    with their `_created`, histograms, the per-quota gauges split across pieces)."""
    m = ControllerMetrics()
    many_quotas(m, 40)
    m.status_write.writes.labels("ok").inc(3)
    m.status_write.duration.observe(0.2)
    pieces = list(exposition(m.registry, batch=7))
    assert steady(b"".join(pieces)) == steady(generate_latest(m.registry))
    member_used = [p for p in pieces if b"karmadaquota_quota_member_used{" in p]
    assert len(member_used) > 40 * 18 // 7  # the family went out in slices
    assert b"".join(pieces).count(b"# TYPE karmadaquota_quota_member_used gauge") == 1


def test_a_scrape_never_holds_every_sample_at_once() -> None:
    """5,000 quotas over 18 clusters each: the text of a whole scrape (~250,000 samples) and
    its sample objects held at once were a scrape's ~140 MiB at issue 37's size; written in
    pieces, a scrape holds a few pieces' worth."""
    m = ControllerMetrics()
    many_quotas(m, 2000)

    def peak(scrape: Callable[[], object]) -> int:
        gc.collect()
        tracemalloc.start()
        scrape()
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    whole = peak(lambda: generate_latest(m.registry))
    pieces = peak(lambda: sum(len(p) for p in exposition(m.registry)))
    assert pieces < whole / 10, (pieces, whole)
