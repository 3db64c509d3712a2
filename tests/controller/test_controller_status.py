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

from karmadaquota.api import Condition
from karmadaquota.controller.status import (
    fold_only,
    merge_conditions,
    needs_write,
    pending_count,
    status_write,
    summary,
)
from karmadaquota.pending import held
from karmadaquota.times import format_time
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


T1, T2 = "2026-01-01T12:01:00Z", "2026-01-01T12:01:01Z"


def _group(charge: str, *entries: str, expires: str = T1) -> dict[str, Any]:
    return {"charge": {"pods": charge}, "expires": expires, "bindings": list(entries)}


def _entries(pending: Any) -> Counter[tuple[str, str, str]]:
    return Counter(
        (g["charge"]["pods"], g.get("expires", ""), e)
        for g in pending or []
        for e in g.get("bindings") or []
    )


def test_first_write_and_old_layout_are_whole_puts_with_the_next_revision() -> None:
    desired = {"used": {"pods": "1"}, "controllerRevision": 0}
    first = status_write({"used": {"pods": "0"}}, desired)
    assert first is not None and first.patch is None
    assert first.status == {"used": {"pods": "1"}, "controllerRevision": 1}
    old = status_write({"controllerRevision": 4, "reservations": [{}]}, desired)
    assert old is not None and old.patch is None and old.status is not None
    assert old.status["controllerRevision"] == 5
    assert status_write({"used": {"pods": "1"}, "controllerRevision": 7}, desired) is None


def test_pendings_first_form_is_replaced_by_a_whole_put_or_removed_whole() -> None:
    """Entries of `pending`'s first form (each with its own expiry, no group expiry) match no
    entry the controller wants: a status that keeps some is a whole PUT in the new form; one
    that keeps none removes the old groups whole."""
    first_form = [{"charge": {"pods": "1"}, "bindings": ["a/u1/1/9", "b/u2/1/9"]}]
    current = {"used": {"pods": "0"}, "controllerRevision": 2, "pending": first_form}
    keep = {"used": {"pods": "1"}, "pending": [_group("1", "b/u2")]}
    write = status_write(current, keep)
    assert write is not None and write.patch is None and write.status is not None
    assert write.status["pending"] == keep["pending"]
    write = status_write(current, {"used": {"pods": "2"}})
    assert write is not None and write.patch is not None
    patched = jsonpatch.apply_patch({"status": current}, write.patch)["status"]
    assert patched == {"used": {"pods": "2"}, "controllerRevision": 3, "pending": []}


def test_patch_tests_the_revision_and_only_changes_what_differs() -> None:
    current = {
        "used": {"pods": "1"},
        "summary": "pods: 1/9",
        "waiting": [{"binding": "a"}],
        "conditions": [{"type": "Ready"}],
        "controllerRevision": 3,
        "pending": [_group("1", "a/u1", "b/u2")],
    }
    desired = {
        "used": {"pods": "2"},
        "summary": "pods: 2/9",
        "waiting": [],
        "conditions": [{"type": "Ready"}],
        "pending": [_group("1", "b/u2")],
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


def test_a_group_whose_entries_all_go_is_removed_whole_from_the_highest_index_down() -> None:
    """The encoder never writes an empty group: an emptied one goes whole, after a `test` of
    the whole group, and removals run from the highest index down so none moves another's."""
    current = {
        "used": {"pods": "1"},
        "controllerRevision": 1,
        "pending": [_group("1", "a/u1"), _group("1", "b/u2", "c/u3", expires=T2), _group("2")],
    }
    desired = {"used": {"pods": "1"}, "pending": [_group("1", "c/u3", expires=T2)]}
    write = status_write(current, desired)
    assert write is not None and write.patch is not None
    assert [(op["op"], op["path"]) for op in write.patch[2:]] == [
        ("test", "/status/pending/2"),  # an empty group an earlier version left
        ("remove", "/status/pending/2"),
        ("test", "/status/pending/1/bindings/0"),
        ("remove", "/status/pending/1/bindings/0"),
        ("test", "/status/pending/0"),
        ("remove", "/status/pending/0"),
    ]
    assert write.patch[-2]["value"] == _group("1", "a/u1")
    patched = jsonpatch.apply_patch({"status": current}, write.patch)["status"]
    assert patched["pending"] == desired["pending"]
    assert status_write(patched, desired) is None  # settled: nothing left to remove


def test_the_same_entry_in_another_expiry_group_is_another_charge() -> None:
    current = {
        "used": {"pods": "1"},
        "controllerRevision": 1,
        "pending": [_group("1", "a/u1"), _group("1", "a/u1", expires=T2)],
    }
    desired = {"used": {"pods": "1"}, "pending": [_group("1", "a/u1", expires=T2)]}
    write = status_write(current, desired)
    assert write is not None and write.patch is not None
    assert [(op["op"], op["path"]) for op in write.patch[2:]] == [
        ("test", "/status/pending/0"),
        ("remove", "/status/pending/0"),
    ]
    moved = {"used": {"pods": "1"}, "pending": [_group("1", "a/u1")]}  # not in current's T2
    write = status_write({**current, "pending": [_group("1", "a/u1", expires=T2)]}, moved)
    assert write is not None and write.patch is None


def test_a_pending_entry_the_status_lacks_cannot_be_patched_in() -> None:
    current = {"used": {"pods": "1"}, "controllerRevision": 1, "pending": [_group("1", "a/u")]}
    desired = {"used": {"pods": "1"}, "pending": [_group("1", "a/u", "b/v")]}
    write = status_write(current, desired)
    assert write is not None and write.patch is None  # a whole PUT (never silently lost)


_ENTRY = st.sampled_from([f"b{i}/u{i}" for i in range(6)] + ["b6/u6/2", "b7/u7/3"])
_KEYS = st.tuples(st.sampled_from(["1", "2", "3"]), st.sampled_from([T1, T2]))
_GROUPS = st.lists(
    st.tuples(_KEYS, st.lists(_ENTRY, max_size=5, unique=True)),
    max_size=4,
    unique_by=lambda g: g[0],
)


@settings(max_examples=500, deadline=None)
@given(
    groups=_GROUPS,
    keep=st.lists(st.booleans(), min_size=16, max_size=16),
    appended=_GROUPS,
    drop_first=st.booleans(),
)
def test_the_patch_removes_exactly_what_the_controller_dropped_whatever_the_webhook_wrote(
    groups: list[tuple[tuple[str, str], list[str]]],
    keep: list[bool],
    appended: list[tuple[tuple[str, str], list[str]]],
    drop_first: bool,
) -> None:
    """Computed from the version read, applied to the version the webhook wrote meanwhile
    (entries appended to groups of the same charge and expiry, new groups, possibly a lapsed
    entry dropped and its group with it once empty, as the encoder writes): the result holds
    the webhook's entries minus exactly the removed ones — or the patch fails as a whole, only
    when an entry it removes moved or a group it removes whole gained one. Applied to the
    version it was computed from, it gives exactly the status the controller wanted."""
    current_pending = [_group(c, *es, expires=t) for (c, t), es in groups]
    flat = [(c, t, e) for (c, t), es in groups for e in es]
    kept = [cte for i, cte in enumerate(flat) if keep[i % len(keep)]]
    desired_pending: list[dict[str, Any]] = []
    for c, t, e in kept:
        last = desired_pending[-1] if desired_pending else None
        if last is None or (last["charge"]["pods"], last["expires"]) != (c, t):
            desired_pending.append(_group(c, expires=t))
        desired_pending[-1]["bindings"].append(e)
    current = {"used": {"pods": "0"}, "controllerRevision": 1, "pending": current_pending}
    desired = {"used": {"pods": "0"}, "pending": desired_pending}
    write = status_write(current, desired)
    removed = Counter(flat) - Counter(kept)
    emptied = any(not g["bindings"] for g in current_pending)
    if not removed and not emptied:
        assert write is None
        return
    assert write is not None and write.patch is not None
    unchanged = jsonpatch.apply_patch({"status": current}, write.patch)["status"]
    assert unchanged["pending"] == desired_pending
    # the webhook's write in between: appends (to existing groups or new ones at the end)
    webhook = copy.deepcopy(current_pending)
    by_key = {(g["charge"]["pods"], g["expires"]): g for g in webhook}
    grown: set[tuple[str, str]] = set()
    for key, es in appended:
        extra = [f"new-{e}" for e in es]
        if key in by_key:
            by_key[key]["bindings"].extend(extra)
            grown |= {key} if extra else set()
        else:
            webhook.append(_group(key[0], *extra, expires=key[1]))
    if drop_first and webhook and webhook[0]["bindings"]:
        webhook[0]["bindings"].pop(0)
    webhook = [g for g in webhook if g["bindings"]]  # the encoder writes no empty group
    whole = {
        (op["value"]["charge"]["pods"], op["value"]["expires"])
        for op in write.patch
        if op["op"] == "test" and op["path"].count("/") == 3
    }
    before = _entries(webhook)
    try:
        patched = jsonpatch.apply_patch({"status": {**current, "pending": webhook}}, write.patch)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        # only a moved entry or group, or a group removed whole that gained an entry, makes it
        # fail; then it is retried
        assert drop_first or emptied or grown & whole
        return
    assert _entries(patched["status"]["pending"]) == before - Counter(
        (c, t, e) for c, t, e in removed.elements()
    )


# ---- a write that only folds pending charges into `used` -------------------------------------


def test_a_fold_is_a_write_that_only_moves_pending_charges_into_used() -> None:
    """Admission adds the pending charges to `used`: a write that moves charges from one to
    the other changes no room, and may wait. Everything else is not a fold: more or less
    room, a condition, the hard, a field the fold does not move, an unreadable quantity."""
    ready = [{"type": "Ready", "status": "True"}]
    current = {
        "used": {"pods": "1", "requests.cpu": "100m"},
        "pending": [_group("2", "a/u1", "b/u2")],
        "conditions": ready,
        "summary": "pods: 1/10",
        "controllerRevision": 4,
    }
    folded = {"used": {"pods": "3", "requests.cpu": "100m"}, "pending": [_group("2", "b/u2")]}
    folded |= {"conditions": ready, "summary": "pods: 3/10", "aggregatedStatus": [{"x": 1}]}
    assert fold_only(current, folded)
    assert fold_only(current, {**folded, "used": {"pods": "3", "requests.cpu": "0.1"}})
    assert fold_only(current, {**current, "summary": "changed"})  # nothing moved at all
    assert not fold_only(current, {**folded, "used": {"pods": "4", "requests.cpu": "100m"}})
    assert not fold_only(current, {**folded, "used": {"pods": "2", "requests.cpu": "100m"}})
    assert not fold_only(current, {**folded, "used": {"pods": "3"}})  # cpu freed
    assert not fold_only(current, {**folded, "pending": []})  # a charge released
    assert not fold_only(current, {**folded, "conditions": []})
    assert not fold_only(current, {**folded, "hard": {"pods": "10"}})
    assert not fold_only(current, {**folded, "waiting": [{"name": "w"}]})
    assert not fold_only(None, folded)  # the first write
    assert not fold_only(current, {**folded, "used": {"pods": "three"}})
    assert held(current) == {"pods": 5 * 10**9, "requests.cpu": 10**8}  # 1 + 2 charges of 2
    assert pending_count(current) == 2 and pending_count(None) == 0
