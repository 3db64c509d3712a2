"""Status helpers: summary, condition bookkeeping, write decision."""

from __future__ import annotations

from datetime import timedelta

from karmadaquota.api import Condition, format_time
from karmadaquota.controller.status import merge_conditions, needs_write, summary
from tests.conftest import NOW, rl


def test_summary_sorted_canonical_used_over_hard() -> None:
    used = rl({"requests.cpu": "12000m", "pods": "30"})
    hard = rl({"requests.cpu": "100", "pods": "500", "requests.memory": "1Gi"})
    assert summary(used, hard) == "pods: 30/500, requests.cpu: 12/100, requests.memory: 0/1Gi"


def test_needs_write_treats_absent_and_empty_alike() -> None:
    desired = {"used": {"pods": "1"}, "reservations": [], "summary": "x"}
    assert not needs_write({"used": {"pods": "1"}, "summary": "x"}, desired)
    assert needs_write({"used": {"pods": "2"}, "summary": "x"}, desired)
    assert needs_write(None, desired)
    assert not needs_write(None, {"used": {}, "reservations": []})


def test_merge_conditions_keeps_times_and_foreign_types() -> None:
    old = [
        Condition(type="Ready", status="True", lastTransitionTime="t0"),
        Condition(type="Custom", status="True", lastTransitionTime="tc"),
    ]
    wanted = [
        Condition(type="MemberObserved", status="False"),
        Condition(type="Ready", status="True", reason="Calculated"),
    ]
    later = NOW + timedelta(seconds=1)
    got = merge_conditions(old, wanted, later)
    assert [c.type for c in got] == ["Ready", "MemberObserved", "Custom"]
    assert got[0].lastTransitionTime == "t0" and got[0].reason == "Calculated"
    assert got[1].lastTransitionTime == format_time(later)
    assert got[2].lastTransitionTime == "tc"
