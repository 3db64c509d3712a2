"""The returning-member window of e2e/testbed/failover.py, judged on made-up polls: a window
measured wrong would let issue 38's return test pass (or fail) for the wrong reason."""

from __future__ import annotations

from e2e.testbed.failover import Poll, over_hard_window


def poll(at: float, ready: tuple[bool, bool], pods: tuple[int, int]) -> Poll:
    names = ("a", "b")
    return Poll(
        at=at,
        ready=dict(zip(names, ready, strict=True)),
        tainted={n: False for n in names},
        pods=dict(zip(names, pods, strict=True)),
        running=dict(zip(names, pods, strict=True)),
        deployments={n: 1 for n in names},
    )


def test_pods_on_a_member_that_is_not_ready_do_not_count() -> None:
    assert poll(0, (False, True), (2, 4)).pods_on_ready() == 4
    assert poll(0, (True, True), (2, 4)).pods_on_ready() == 6


def test_the_window_runs_from_the_first_poll_over_to_the_first_poll_back_under() -> None:
    polls = [
        poll(0.0, (False, True), (2, 4)),
        poll(1.0, (True, True), (2, 4)),  # back, old pods still there: over
        poll(2.0, (True, True), (1, 4)),  # still over
        poll(3.5, (True, True), (0, 4)),  # gone
        poll(4.0, (True, True), (0, 4)),
    ]
    assert over_hard_window(polls, 4) == 2.5


def test_never_over_is_no_window_and_over_at_the_last_poll_counts_to_it() -> None:
    assert over_hard_window([poll(0.0, (True, True), (0, 4))], 4) == 0.0
    polls = [
        poll(0.0, (True, True), (0, 4)),
        poll(1.0, (True, True), (2, 4)),
        poll(3.0, (True, True), (2, 4)),
    ]
    assert over_hard_window(polls, 4) == 2.0
