"""Status helpers: summary, condition bookkeeping, write decision."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import timedelta
from typing import Any

import jsonpatch
import jsonpointer
from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota.api import Condition, format_time
from karmadaquota.controller.status import merge_conditions, needs_write, status_write, summary
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


# ---- the controller's write: a JSON patch on its own revision --------------------------------


def _group(charge: str, *entries: str) -> dict[str, Any]:
    return {"charge": {"pods": charge}, "bindings": list(entries)}


def _entries(pending: Any) -> Counter[tuple[str, str]]:
    return Counter((g["charge"]["pods"], e) for g in pending or [] for e in g.get("bindings") or [])


def test_first_write_and_old_layout_are_whole_puts_with_the_next_revision() -> None:
    desired = {"used": {"pods": "1"}, "controllerRevision": 0}
    first = status_write({"used": {"pods": "0"}}, desired)
    assert first is not None and first.patch is None
    assert first.status == {"used": {"pods": "1"}, "controllerRevision": 1}
    old = status_write({"controllerRevision": 4, "reservations": [{}]}, desired)
    assert old is not None and old.patch is None and old.status is not None
    assert old.status["controllerRevision"] == 5
    assert status_write({"used": {"pods": "1"}, "controllerRevision": 7}, desired) is None


def test_patch_tests_the_revision_and_only_changes_what_differs() -> None:
    current = {
        "used": {"pods": "1"},
        "summary": "pods: 1/9",
        "waiting": [{"binding": "a"}],
        "conditions": [{"type": "Ready"}],
        "controllerRevision": 3,
        "pending": [_group("1", "a/u1/1/9", "b/u2/1/9")],
    }
    desired = {
        "used": {"pods": "2"},
        "summary": "pods: 2/9",
        "waiting": [],
        "conditions": [{"type": "Ready"}],
        "pending": [_group("1", "b/u2/1/9")],
    }
    write = status_write(current, desired)
    assert write is not None and write.patch is not None
    assert write.patch[:2] == [
        {"op": "test", "path": "/status/controllerRevision", "value": 3},
        {"op": "replace", "path": "/status/controllerRevision", "value": 4},
    ]
    paths = [(op["op"], op["path"]) for op in write.patch[2:]]
    assert paths == [
        ("add", "/status/summary"),
        ("add", "/status/used"),
        # the webhook writes the waiting list too: changed only if still as read
        ("test", "/status/waiting"),
        ("remove", "/status/waiting"),
        ("test", "/status/pending/0/bindings/0"),
        ("remove", "/status/pending/0/bindings/0"),
    ]
    patched = jsonpatch.apply_patch({"status": current}, write.patch)["status"]
    assert patched["used"] == {"pods": "2"} and "waiting" not in patched
    assert _entries(patched["pending"]) == _entries(desired["pending"])


def test_only_emptied_groups_left_is_no_write() -> None:
    current = {"used": {"pods": "1"}, "controllerRevision": 1, "pending": [_group("1")]}
    assert status_write(current, {"used": {"pods": "1"}}) is None


def test_a_pending_entry_the_status_lacks_cannot_be_patched_in() -> None:
    current = {"used": {"pods": "1"}, "controllerRevision": 1, "pending": [_group("1", "a/u/1/9")]}
    desired = {"used": {"pods": "1"}, "pending": [_group("1", "a/u/1/9", "b/v/1/9")]}
    write = status_write(current, desired)
    assert write is not None and write.patch is None  # a whole PUT (never silently lost)


_ENTRY = st.sampled_from([f"b{i}/u{i}/1/99" for i in range(8)])
_GROUPS = st.lists(
    st.tuples(st.sampled_from(["1", "2", "3"]), st.lists(_ENTRY, max_size=5, unique=True)),
    max_size=3,
    unique_by=lambda g: g[0],
)


@settings(max_examples=300, deadline=None)
@given(
    groups=_GROUPS,
    keep=st.lists(st.booleans(), min_size=16, max_size=16),
    appended=_GROUPS,
    drop_first=st.booleans(),
)
def test_the_patch_removes_exactly_what_the_controller_dropped_whatever_the_webhook_wrote(
    groups: list[tuple[str, list[str]]],
    keep: list[bool],
    appended: list[tuple[str, list[str]]],
    drop_first: bool,
) -> None:
    """Computed from the version read, applied to the version the webhook wrote meanwhile
    (entries appended to groups, new groups, possibly an entry dropped): the result holds the
    webhook's entries minus exactly the removed ones — or the patch fails as a whole."""
    current_pending = [_group(c, *es) for c, es in groups]
    flat = [(c, e) for c, es in groups for e in es]
    kept = [ce for i, ce in enumerate(flat) if keep[i % len(keep)]]
    desired_pending: list[dict[str, Any]] = []
    for c, e in kept:
        if not desired_pending or desired_pending[-1]["charge"]["pods"] != c:
            desired_pending.append(_group(c))
        desired_pending[-1]["bindings"].append(e)
    current = {"used": {"pods": "0"}, "controllerRevision": 1, "pending": current_pending}
    write = status_write(current, {"used": {"pods": "0"}, "pending": desired_pending})
    removed = Counter(flat) - Counter(kept)
    if not removed:
        assert write is None
        return
    assert write is not None and write.patch is not None
    # the webhook's write in between: appends (to existing groups or new ones at the end)
    webhook = copy.deepcopy(current_pending)
    by_charge = {g["charge"]["pods"]: g for g in webhook}
    for c, es in appended:
        extra = [f"new-{e}" for e in es]
        if c in by_charge:
            by_charge[c]["bindings"].extend(extra)
        else:
            webhook.append(_group(c, *extra))
    if drop_first and webhook and webhook[0]["bindings"]:
        webhook[0]["bindings"].pop(0)
    before = _entries(webhook)
    try:
        patched = jsonpatch.apply_patch({"status": {**current, "pending": webhook}}, write.patch)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        assert drop_first  # only a moved entry makes it fail; then it is retried
        return
    assert _entries(patched["status"]["pending"]) == before - removed
