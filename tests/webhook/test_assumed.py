"""Queue counts a webhook replica assumes until the controller's `status.queued` has them."""

from __future__ import annotations

from karmadaquota.api import ON_EXCEED_QUEUE, STRATEGY_STRICT, KarmadaQuota
from karmadaquota.webhook.assumed import BOUND, AssumedQueues
from tests.conftest import quota


def strict(name: str = "q", queued: int = 0) -> KarmadaQuota:
    q = quota(name, {"pods": "4"}, {"pods": "0"})
    q.spec.onExceed = ON_EXCEED_QUEUE
    q.spec.queueingStrategy = STRATEGY_STRICT
    q.status.queued = queued
    return q


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_what_this_replica_queued_counts_until_the_window_passes() -> None:
    clock = Clock()
    assumed = AssumedQueues(window=2.0, clock=clock)
    assert assumed.policy("ns", strict()).queued == 0
    assumed.assume("ns", "q")
    assumed.assume("ns", "q")
    assert assumed.policy("ns", strict()).queued == 2
    assert assumed.policy("other", strict()).queued == 0  # per namespace
    assert assumed.policy("ns", strict("p")).queued == 0  # per quota
    clock.now += 2.5
    assert assumed.policy("ns", strict()).queued == 0


def test_the_controllers_count_wins_when_it_is_larger() -> None:
    assumed = AssumedQueues(clock=Clock())
    assumed.assume("ns", "q")
    assert assumed.policy("ns", strict(queued=5)).queued == 5
    policy = assumed.policy("ns", strict(queued=0))
    assert policy.queued == 1 and policy.strict and policy.queue


def test_quotas_not_queued_for_lately_are_forgotten_past_the_bound() -> None:
    clock = Clock()
    assumed = AssumedQueues(window=2.0, clock=clock)
    for i in range(BOUND + 1):
        assumed.assume("ns", f"q{i}")
    clock.now += 3
    assumed.assume("ns", "late")
    assert assumed.policy("ns", strict("late")).queued == 1
    assert len(assumed._queued_at) == 1
