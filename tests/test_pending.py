"""Pending charges on the wire (`status.pending`): compact, lossless, and an old layout's
`status.reservations` read once after an upgrade.

In memory nothing changed (`KarmadaQuotaStatus.reservations`, a list of `Reservation`s); these
tests pin the wire form: what `model_dump` writes, what `model_validate` reads back, how a
malformed entry is read, and how much a storm's status weighs.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karmadaquota import api, charge, kubectl_plugin, usage_view
from karmadaquota.api import (
    BINDING_API_VERSION,
    BINDING_KIND,
    HOLD_GENERATION,
    PENDING_ENTRY_PATTERN,
    KarmadaQuota,
    KarmadaQuotaStatus,
    ObjectReference,
    Reservation,
    format_time,
    read_quota,
)
from karmadaquota.controller import status as cst
from karmadaquota.evaluate import QuotaView
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.webhook.batcher import Batcher, Pending, pending_size
from tests.conftest import NOW
from tests.fake_api import FakeStore
from tests.webhook_fakes import binding

NS = "team-a"
SOON = NOW + timedelta(minutes=1)  # 2026-01-01T12:01:00Z
SOON_S = 1767268860


def res(
    name: str,
    uid: str,
    reserved: dict[str, Any],
    expires: datetime | str = SOON,
    generation: int = 1,
    namespace: str = NS,
) -> Reservation:
    return Reservation(
        reservedBy=ObjectReference(
            apiVersion=BINDING_API_VERSION,
            kind=BINDING_KIND,
            name=name,
            namespace=namespace,
            uid=uid,
        ),
        reserved=reserved,
        expirationTime=expires if isinstance(expires, str) else format_time(expires),
        generation=generation,
    )


def old_entry(r: Reservation) -> dict[str, Any]:
    """A reservation as v0.1 wrote it in status.reservations (the full object)."""
    return r.model_dump(mode="json", exclude_none=True)


def doc(status: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": "q", "namespace": namespace, "resourceVersion": "7"},
        "spec": {"hard": {"pods": "100", "requests.cpu": "100"}},
        "status": {"used": {"pods": "0", "requests.cpu": "0"}, **status},
    }


def wire(reservations: list[Reservation], namespace: str = NS) -> dict[str, Any]:
    """The quota as it goes on the wire."""
    status = KarmadaQuotaStatus(used={"pods": "0"}, reservations=reservations)
    q = KarmadaQuota.model_validate(doc({}, namespace)).model_copy(update={"status": status})
    out: dict[str, Any] = q.model_dump(mode="json", exclude_none=True)
    return out


def grouped(reservations: list[Reservation]) -> list[Reservation]:
    """The logical list in the order decoding gives it: grouped by charge, stably."""
    first: dict[Any, int] = {}
    for i, r in enumerate(reservations):
        first.setdefault(api.charge_key(r.reserved), i)
    return sorted(reservations, key=lambda r: first[api.charge_key(r.reserved)])


# ---- the format ----------------------------------------------------------------------------


def test_one_group_per_charge_one_short_entry_per_binding() -> None:
    cpu = {"pods": "1", "requests.cpu": "100m"}
    rs = [
        res("web-deployment", "u-1", cpu, generation=2),
        res("db-statefulset", "u-2", {"pods": "3"}),
        res("api-deployment", "u-3", cpu, expires=SOON + timedelta(seconds=5)),
    ]
    status = wire(rs)["status"]
    assert "reservations" not in status
    assert status["pending"] == [
        {
            "charge": cpu,
            "bindings": [f"web-deployment/u-1/2/{SOON_S}", f"api-deployment/u-3/1/{SOON_S + 5}"],
        },
        {"charge": {"pods": "3"}, "bindings": [f"db-statefulset/u-2/1/{SOON_S}"]},
    ]
    assert all(
        re.fullmatch(PENDING_ENTRY_PATTERN, e) for g in status["pending"] for e in g["bindings"]
    )
    back = KarmadaQuota.model_validate(wire(rs)).status.reservations
    assert back == grouped(rs) == [rs[0], rs[2], rs[1]]


def test_no_pending_charge_writes_no_pending_field() -> None:
    status = wire([])["status"]
    assert "pending" not in status and "reservations" not in status
    assert KarmadaQuota.model_validate(wire([])).status.reservations == []
    # the controller's write decision: absent and empty are the same
    assert not cst.needs_write({**status, "pending": []}, status)


def test_decoding_fills_in_what_the_entry_leaves_out() -> None:
    raw = doc({"pending": [{"charge": {"pods": "2"}, "bindings": [f"web/u-1/3/{SOON_S}"]}]})
    (r,) = KarmadaQuota.model_validate(raw).status.reservations
    assert r.reservedBy == ObjectReference(
        apiVersion=BINDING_API_VERSION, kind=BINDING_KIND, name="web", namespace=NS, uid="u-1"
    )
    assert (r.reserved, r.expirationTime, r.generation) == ({"pods": "2"}, format_time(SOON), 3)
    # a status read on its own does not know the quota's namespace
    (alone,) = KarmadaQuotaStatus.model_validate(raw["status"]).reservations
    assert alone.reservedBy.namespace == "" and alone.reservedBy.uid == "u-1"


def test_an_unchanged_status_encodes_to_the_same_json() -> None:
    """The controller writes only when the status differs: decoding what the server stores
    and encoding it again must give the very same `pending`, in the same order."""
    rs = [res(f"b{i}", f"u{i}", {"pods": str(1 + i % 3)}, generation=i) for i in range(30)]
    stored = wire(rs)
    again = KarmadaQuota.model_validate(stored)
    assert cst.dump(again.status) == stored["status"]
    assert not cst.needs_write(stored["status"], cst.dump(again.status))
    assert json.dumps(wire(rs)) == json.dumps(stored)


def test_expiry_is_whole_seconds_rounded_up_and_clamped() -> None:
    def entry(expires: str) -> str:
        groups = wire([res("b", "u", {"pods": "1"}, expires=expires)])["status"].get("pending")
        return str(groups[0]["bindings"][0]) if groups else ""

    assert entry("2026-01-01T12:01:00Z") == f"b/u/1/{SOON_S}"
    assert entry("2026-01-01T12:01:00.000001Z") == f"b/u/1/{SOON_S + 1}"  # never earlier
    assert entry("2026-01-01T13:01:00+01:00") == f"b/u/1/{SOON_S}"
    assert entry("1969-12-31T23:59:59Z") == "b/u/1/0"  # long lapsed either way
    assert entry("9999-12-31T23:59:59-01:00") == "b/u/1/253402300799"  # still far away
    assert entry("not a time") == ""  # held nothing (expired()): not written at all


def test_names_and_uids_that_could_break_the_format_are_escaped() -> None:
    """Real names and uids never contain '/' (DNS subdomains, UUIDs); whatever the list holds,
    the entry still parses back to it and matches the CRD's pattern, so the API server never
    refuses a status write because of it."""
    rs = [res("a/b", "c%2Fd", {"pods": "1"}), res("", "", {"pods": "1"}, generation=-5)]
    (group,) = wire(rs)["status"]["pending"]
    assert group["bindings"] == [f"a%2Fb/c%252Fd/1/{SOON_S}", f"//0/{SOON_S}"]
    assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for e in group["bindings"])
    back = KarmadaQuota.model_validate(wire(rs)).status.reservations
    assert [(r.reservedBy.name, r.reservedBy.uid, r.generation) for r in back] == [
        ("a/b", "c%2Fd", 1),
        ("", "", 0),  # a negative generation is observed by every binding generation, as 0 is
    ]


# ---- round trip (property) -----------------------------------------------------------------

_NAMES = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,60}[a-z0-9])?", fullmatch=True),
    st.text(max_size=20),  # anything: escaped
)
_UIDS = st.one_of(st.uuids().map(str), st.text(max_size=12))
_CHARGES = st.dictionaries(
    st.sampled_from(["pods", "requests.cpu", "requests.memory", "count/deployments.apps"]),
    st.one_of(st.sampled_from(["1", "100m", "2Gi", "0"]), st.integers(0, 10**6)),
    max_size=4,
)
_RESERVATIONS = st.builds(
    lambda name, uid, reserved, seconds, generation: res(
        name,
        uid,
        reserved,
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds),
        generation,
    ),
    _NAMES,
    _UIDS,
    st.sampled_from([{"pods": "1"}, {"pods": "1", "requests.cpu": "100m"}]) | _CHARGES,
    st.integers(0, 253402300799),
    st.integers(0, HOLD_GENERATION),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RESERVATIONS, max_size=40))
def test_round_trip_gives_the_same_logical_list(rs: list[Reservation]) -> None:
    """logical list → dump → validate → the same list (grouped stably by charge), and dumping
    that again gives byte-identical JSON; every entry matches the CRD's pattern."""
    stored = json.loads(json.dumps(wire(rs)))  # as the API server hands it back
    back = KarmadaQuota.model_validate(stored).status.reservations
    assert back == grouped(rs)
    assert wire(back) == stored
    for group in stored["status"].get("pending", []):
        assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for e in group["bindings"])
    # and the estimate the webhook's bound uses is an upper bound of what is written, for
    # what the API server admits as names and uids (JSON escapes other characters)
    plain = re.compile(r"[a-z0-9.-]*")
    if all(plain.fullmatch(r.reservedBy.name + r.reservedBy.uid) for r in rs):
        pending = stored["status"].get("pending")
        assert pending_size(rs) >= len(json.dumps(pending, separators=(",", ":"))) or not rs


# ---- an old layout, read once after an upgrade ---------------------------------------------


OLD = [
    res("web-deployment", "u-1", {"pods": "1", "requests.cpu": "100m"}, generation=2),
    res("db-statefulset", "u-2", {"pods": "3"}, expires="2026-01-01T12:01:00.5Z"),
    res("api-deployment", "u-3", {"pods": "1", "requests.cpu": "100m"}),
]


def test_an_old_layout_is_read_and_the_next_write_has_only_pending() -> None:
    raw = doc({"reservations": [old_entry(r) for r in OLD]})
    q = KarmadaQuota.model_validate(raw)
    assert q.status.reservations == OLD  # exactly what v0.1 held, in its order
    assert QuotaView.of(q, NOW).reserved == {
        "pods": Quantity.parse("5"),
        "requests.cpu": Quantity.parse("200m"),
    }
    written = q.model_dump(mode="json", exclude_none=True)["status"]
    # a status PUT replaces the whole status: without `reservations`, the old list is gone
    assert "reservations" not in written
    assert written["pending"] == [
        {
            "charge": {"pods": "1", "requests.cpu": "100m"},
            "bindings": [f"web-deployment/u-1/2/{SOON_S}", f"api-deployment/u-3/1/{SOON_S}"],
        },
        # a sub-second expiry is rounded up: the charge never lapses earlier than it said
        {"charge": {"pods": "3"}, "bindings": [f"db-statefulset/u-2/1/{SOON_S + 1}"]},
    ]
    again = KarmadaQuota.model_validate({**raw, "status": written}).status.reservations
    assert [(r.reservedBy.uid, r.reserved, r.generation) for r in again] == [
        (r.reservedBy.uid, r.reserved, r.generation) for r in grouped(OLD)
    ]
    assert QuotaView.of(KarmadaQuota.model_validate({**raw, "status": written}), NOW).reserved == (
        QuotaView.of(q, NOW).reserved
    )


def test_both_layouts_at_once_are_merged_without_counting_one_charge_twice() -> None:
    """A status carrying `pending` and old `reservations` (what a v0.1 replica's write on top
    of ours would look like): both are read, an entry present in both counts once (same uid
    and generation), the same binding at another generation is another charge."""
    pending = wire([OLD[0], res("new", "u-9", {"pods": "2"})])["status"]["pending"]
    old = [
        old_entry(r)
        for r in (OLD[0], OLD[1], res("web-deployment", "u-1", {"pods": "1"}, generation=3))
    ]
    q = KarmadaQuota.model_validate(doc({"pending": pending, "reservations": old}))
    assert [(r.reservedBy.uid, r.generation) for r in q.status.reservations] == [
        ("u-1", 2),
        ("u-9", 1),
        ("u-2", 1),
        ("u-1", 3),
    ]
    assert QuotaView.of(q, NOW).reserved["pods"] == Quantity.parse("7")
    assert "reservations" not in q.model_dump(mode="json")["status"]
    # the raw readers (kubectl plugin) see the same list
    data = kubectl_plugin.describe_data(doc({"pending": pending, "reservations": old}), NOW)
    assert [r["uid"] for r in data["reservations"]] == ["u-1", "u-9", "u-2", "u-1"]


async def test_the_webhooks_first_write_after_an_upgrade_rewrites_the_old_layout() -> None:
    raw = doc({"reservations": [old_entry(r) for r in OLD]}, namespace="ns")
    raw["metadata"]["name"] = "team-a"
    store = FakeStore(raw)
    batcher = Batcher(store, clock=lambda: NOW)
    b = binding("fresh", cpu="1", uid="u-fresh")
    decision = await batcher.submit(
        Pending("ns", "fresh", "u-fresh", 1, charge.charge(b), None, False)
    )
    assert decision.allowed
    status = store.objects[("ns", "team-a")]["status"]
    assert "reservations" not in status
    held = store.stored().status.reservations
    assert {r.reservedBy.uid for r in held} == {"u-1", "u-2", "u-3", "u-fresh"}
    await batcher.close()


# ---- malformed entries ---------------------------------------------------------------------


def held_by(raw_pending: Any) -> tuple[list[Reservation], dict[str, Quantity]]:
    q = read_quota(doc({"pending": raw_pending}))
    assert q is not None  # a malformed entry never makes the quota unreadable
    return q.status.reservations, QuotaView.of(q, NOW).reserved


@pytest.mark.parametrize(
    "entry",
    [
        "web/u-1/1/soon",  # expiry not a number
        "web/u-1/1/2026-01-01T12:01:00Z",  # an RFC 3339 time is not Unix seconds
        "web/u-1/1/",  # no expiry
        "web/u-1/1/99999999999999999999",  # beyond 9999-12-31
        "web/u-1/1/" + "9" * 5000,  # more digits than int() reads
        f"web/u-1/1/{SOON_S}/extra",  # one part too many: the expiry reads "…/extra"
        "web/u-1",  # not four parts
        "",
        42,  # not a string
        None,
    ],
)
def test_an_unreadable_expiry_holds_nothing_as_in_the_old_layout(entry: Any) -> None:
    """The old layout's `expired()` reads an unreadable expirationTime as lapsed: such a
    reservation held nothing. An entry whose expiry cannot be read holds nothing likewise
    (and the next write drops it); the entries around it are read as they are."""
    good = f"db/u-2/1/{SOON_S}"
    rs, reserved = held_by([{"charge": {"pods": "2"}, "bindings": [entry, good]}])
    assert len(rs) == 2 and rs[0].lapsed(NOW) and rs[0].expires() is None
    assert reserved == {"pods": Quantity.parse("2")}  # the good entry only
    old = read_quota(doc({"reservations": [old_entry(res("x", "u-1", {"pods": "2"}, "soon"))]}))
    assert old is not None and QuotaView.of(old, NOW).reserved == {}  # the same, before
    written = wire(rs)["status"]["pending"]
    assert written == [{"charge": {"pods": "2"}, "bindings": [good]}]


@pytest.mark.parametrize(
    "generation", ["x", "-1", "1.5", "", "99999999999999999999", "9" * 5000, "١"]
)
def test_an_unreadable_generation_holds_the_charge_until_it_expires(generation: str) -> None:
    """Dropped early (as if observed), the charge could be missing while its binding is not
    yet counted in `used`: under-count. It holds until its expiry instead."""
    rs, reserved = held_by(
        [{"charge": {"pods": "2"}, "bindings": [f"web/u/{generation}/{SOON_S}"]}]
    )
    (r,) = rs
    assert r.generation == HOLD_GENERATION and not r.lapsed(NOW)
    assert reserved == {"pods": Quantity.parse("2")}
    assert r.lapsed(SOON)


@pytest.mark.parametrize(
    "raw_charge", [["pods", "1"], "pods=1", {"pods": None}, {"pods": True}, {"pods": "two"}]
)
def test_an_unreadable_charge_fails_closed_never_reads_as_nothing(raw_charge: Any) -> None:
    """Admission refuses in the namespace (QuotaView cannot sum the reservations) until the
    controller drops the entries, instead of reading the charge as zero. (The old layout
    made the whole quota unreadable, which the webhook skips: nothing enforced.)"""
    q = read_quota(doc({"pending": [{"charge": raw_charge, "bindings": [f"web/u/1/{SOON_S}"]}]}))
    assert q is not None and len(q.status.reservations) == 1
    with pytest.raises(QuantityError):
        QuotaView.of(q, NOW)


@pytest.mark.parametrize(
    "raw_pending",
    [
        "web/u/1/1767225660",
        {"charge": {"pods": "1"}},
        [None, "x", 3],
        [{"charge": {"pods": "1"}, "bindings": "web/u/1/1767225660"}],
        [{"charge": {"pods": "1"}}],
    ],
)
def test_a_pending_list_without_readable_entries_holds_nothing_and_stays_readable(
    raw_pending: Any,
) -> None:
    rs, reserved = held_by(raw_pending)
    assert rs == [] and reserved == {}


def test_a_number_in_a_charge_is_read_as_the_number_it_is() -> None:
    _, reserved = held_by([{"charge": {"pods": 1.5e3}, "bindings": [f"web/u/1/{SOON_S}"]}])
    assert reserved == {"pods": Quantity.parse("1500")}


def test_a_group_without_a_charge_charges_nothing() -> None:
    rs, reserved = held_by([{"bindings": [f"web/u/1/{SOON_S}"]}])
    assert [r.reserved for r in rs] == [{}] and reserved == {}


# ---- the raw readers: kubectl plugin and usage view ----------------------------------------


def test_describe_and_usage_view_read_pending() -> None:
    rs = [
        res("web", "u-1", {"pods": "2", "requests.cpu": "1"}),
        res("gone", "u-2", {"pods": "5"}, expires=NOW - timedelta(seconds=1)),
    ]
    raw = wire(rs)
    by = {r["name"]: r for r in usage_view.summarize(raw, NOW)["resources"]}
    assert (by["pods"]["reserved"], by["requests.cpu"]["reserved"]) == ("2", "1")
    data = kubectl_plugin.describe_data(raw, NOW)
    assert [(r["binding"], r["uid"], r["expired"]) for r in data["reservations"]] == [
        ("web", "u-1", False),
        ("gone", "u-2", True),
    ]
    text = kubectl_plugin.render(raw, NOW)
    assert "web" in text and "pods=2,requests.cpu=1" in text and "Reservations: <none>" not in text


# ---- size ----------------------------------------------------------------------------------


def storm_quota() -> KarmadaQuota:
    """A realistic quota in a storm: spec with 3 resources, used, 3 members in
    aggregatedStatus (used and observed), the 3 conditions, summary."""
    hard = {"pods": "500", "requests.cpu": "100", "requests.memory": "200Gi"}
    member = {"pods": "40", "requests.cpu": "4", "requests.memory": "8Gi"}
    conditions = [
        ("Ready", "Calculated", "usage recomputed from the ResourceBindings"),
        ("Valid", "Valid", ""),
        ("MemberObserved", "AllMembersObserved", "pods observed in 3 member cluster(s)"),
    ]
    return KarmadaQuota.model_validate(
        {
            "metadata": {"name": "team-a", "namespace": NS, "resourceVersion": "123456"},
            "spec": {"hard": hard},
            "status": {
                "hard": hard,
                "used": {"pods": "120", "requests.cpu": "12", "requests.memory": "24Gi"},
                "aggregatedStatus": [
                    {"clusterName": f"member{i}", "used": member, "observed": member}
                    for i in (1, 2, 3)
                ],
                "summary": "pods: 120/500, requests.cpu: 12/100, requests.memory: 24Gi/200Gi",
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "observedGeneration": 1,
                    }
                    for t, reason, message in conditions
                ],
                "observedGeneration": 1,
            },
        }
    )


def status_bytes(q: KarmadaQuota, reservations: list[Reservation]) -> int:
    status = q.status.model_copy(update={"reservations": reservations})
    body = q.model_copy(update={"status": status}).model_dump(mode="json", exclude_none=True)
    return len(json.dumps(body["status"], separators=(",", ":")))


def test_a_storms_status_is_small(capsys: pytest.CaptureFixture[str]) -> None:
    """200 pending charges of one shape (a Deployment's binding `web-0042-deployment`, a UUID,
    generation 2, pods/cpu/memory) in the realistic quota of `storm_quota`:

    - old layout (v0.1, full objects in status.reservations): 62,072 bytes of status JSON,
      304 bytes per reservation;
    - status.pending: 15,752 bytes, 72.5 bytes per entry (name 19 + uid 36 + generation,
      Unix-seconds expiry, separators and quotes), the group's charge once: 3.9x smaller.

    The rest of the status is 1,255 bytes; 8 KB of status holds 95 such entries (the old
    layout: 22). 200 entries cannot fit 8 KB while each carries its binding's name and uid.
    """
    q = storm_quota()
    shape = {"pods": "1", "requests.cpu": "100m", "requests.memory": "128Mi"}
    rs = [
        res(
            f"web-{i:04d}-deployment",
            str(uuid.uuid5(uuid.NAMESPACE_DNS, str(i))),
            shape,
            generation=2,
        )
        for i in range(200)
    ]
    rest = status_bytes(q, [])
    new = status_bytes(q, rs)
    old_status = {**q.status.model_dump(mode="json"), "reservations": [old_entry(r) for r in rs]}
    old = len(json.dumps(old_status, separators=(",", ":")))
    per_entry = (new - rest) / len(rs)
    fits_8k = sum(1 for n in range(1, 201) if status_bytes(q, rs[:n]) <= 8 * 1024)
    with capsys.disabled():
        print(
            f"\n200 pending charges: status {new} B in status.pending vs {old} B in the old "
            f"layout ({old / new:.1f}x); rest of the status {rest} B; {per_entry:.1f} B per "
            f"entry; {fits_8k} entries fit in 8 KB of status"
        )
    assert rest <= 1300
    assert per_entry <= 73  # name 19 + uid 36 + 17: nothing else per binding
    assert new <= 16 * 1024 and old / new >= 3.8
    assert fits_8k >= 90
