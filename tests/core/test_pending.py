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

from karmadaquota import api, charge, kubectl_plugin, pending, usage_view
from karmadaquota.api import (
    BINDING_API_VERSION,
    BINDING_KIND,
    KarmadaQuota,
    KarmadaQuotaStatus,
    ObjectReference,
    Reservation,
    read_quota,
)
from karmadaquota.controller import status as cst
from karmadaquota.evaluate import QuotaView
from karmadaquota.pending import (
    HOLD_GENERATION,
    PENDING_ENTRY_PATTERN,
    PENDING_EXPIRES_PATTERN,
    charge_key,
    expiry_seconds,
    pending_size,
)
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.times import format_time
from karmadaquota.webhook.batcher import Batcher, ChargeRequest
from tests.conftest import NOW
from tests.fake_api import Replica
from tests.webhook_fakes import binding

NS = "team-a"
SOON = NOW + timedelta(minutes=1)  # 2026-01-01T12:01:00Z
SOON_S = 1767268860
SOON_T = "2026-01-01T12:01:00Z"


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


def group_key(r: Reservation) -> tuple[Any, int | None]:
    return (charge_key(r.reserved), expiry_seconds(r.expirationTime))


def grouped(reservations: list[Reservation]) -> list[Reservation]:
    """The logical list in the order decoding gives it: grouped by charge and expiry second,
    stably."""
    first: dict[Any, int] = {}
    for i, r in enumerate(reservations):
        first.setdefault(group_key(r), i)
    return sorted(reservations, key=lambda r: first[group_key(r)])


# ---- the format ----------------------------------------------------------------------------


def test_one_group_per_charge_and_expiry_one_short_entry_per_binding() -> None:
    """A batch's reservations share their expiration: its group says it once; an entry is the
    binding's name and uid, and its generation only when it is not a create's (1)."""
    cpu = {"pods": "1", "requests.cpu": "100m"}
    rs = [
        res("web-deployment", "u-1", cpu, generation=2),
        res("db-statefulset", "u-2", {"pods": "3"}),
        res("api-deployment", "u-3", cpu, expires=SOON + timedelta(seconds=5)),
        res("ui-deployment", "u-4", cpu),
    ]
    status = wire(rs)["status"]
    assert "reservations" not in status
    assert status["pending"] == [
        {
            "charge": cpu,
            "expires": SOON_T,
            "bindings": ["web-deployment/u-1/2", "ui-deployment/u-4"],
        },
        {"charge": {"pods": "3"}, "expires": SOON_T, "bindings": ["db-statefulset/u-2"]},
        {"charge": cpu, "expires": "2026-01-01T12:01:05Z", "bindings": ["api-deployment/u-3"]},
    ]
    for g in status["pending"]:
        assert re.fullmatch(PENDING_EXPIRES_PATTERN, g["expires"])
        assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for e in g["bindings"])
    back = KarmadaQuota.model_validate(wire(rs)).status.reservations
    assert back == grouped(rs) == [rs[0], rs[3], rs[1], rs[2]]


def test_no_pending_charge_writes_no_pending_field() -> None:
    status = wire([])["status"]
    assert "pending" not in status and "reservations" not in status
    assert KarmadaQuota.model_validate(wire([])).status.reservations == []
    # the controller's write decision: absent and empty are the same
    assert not cst.needs_write({**status, "pending": []}, status)


def test_decoding_fills_in_what_the_entry_leaves_out() -> None:
    raw = doc(
        {
            "pending": [
                {"charge": {"pods": "2"}, "expires": SOON_T, "bindings": ["web/u-1/3", "db/u-2"]}
            ]
        }
    )
    r, created = KarmadaQuota.model_validate(raw).status.reservations
    assert r.reservedBy == ObjectReference(
        apiVersion=BINDING_API_VERSION, kind=BINDING_KIND, name="web", namespace=NS, uid="u-1"
    )
    assert (r.reserved, r.expirationTime, r.generation) == ({"pods": "2"}, format_time(SOON), 3)
    assert (created.reservedBy.name, created.reservedBy.uid) == ("db", "u-2")
    assert (created.expirationTime, created.generation) == (SOON_T, 1)  # a create's generation
    # a status read on its own does not know the quota's namespace
    alone = KarmadaQuotaStatus.model_validate(raw["status"]).reservations[0]
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
    def expires(expires: str) -> str:
        groups = wire([res("b", "u", {"pods": "1"}, expires=expires)])["status"].get("pending")
        assert not groups or groups[0]["bindings"] == ["b/u"]
        return str(groups[0]["expires"]) if groups else ""

    assert expires("2026-01-01T12:01:00Z") == SOON_T
    assert expires("2026-01-01T12:01:00.000001Z") == "2026-01-01T12:01:01Z"  # never earlier
    assert expires("2026-01-01T13:01:00+01:00") == SOON_T
    assert expires("1969-12-31T23:59:59Z") == "1970-01-01T00:00:00Z"  # long due either way
    assert expires("9999-12-31T23:59:59-01:00") == "9999-12-31T23:59:59Z"  # still far away
    # unreadable: still held, written as due for the controller's audit at once
    assert expires("not a time") == "1970-01-01T00:00:00Z"


def test_the_batches_of_one_second_share_a_group() -> None:
    """Expirations are whole seconds, rounded up: batches a fraction of a second apart share
    their group (a storm keeps one or two alive per charge), and none lapses earlier."""
    rs = [
        res("a", "u-1", {"pods": "1"}, expires="2026-01-01T12:01:00.2Z"),
        res("b", "u-2", {"pods": "1"}, expires="2026-01-01T12:01:00.7Z"),
        res("c", "u-3", {"pods": "1"}, expires="2026-01-01T12:01:01.1Z"),
    ]
    pending = wire(rs)["status"]["pending"]
    assert [(g["expires"], g["bindings"]) for g in pending] == [
        ("2026-01-01T12:01:01Z", ["a/u-1", "b/u-2"]),
        ("2026-01-01T12:01:02Z", ["c/u-3"]),
    ]


def test_names_and_uids_that_could_break_the_format_are_escaped() -> None:
    """Real names and uids never contain '/' (DNS subdomains, UUIDs); whatever the list holds,
    the entry still parses back to it and matches the CRD's pattern, so the API server never
    refuses a status write because of it."""
    rs = [
        res("a/b", "c%2Fd", {"pods": "1"}),
        res("", "", {"pods": "1"}, generation=-5),
        res("x/", "/", {"pods": "1"}, generation=7),
    ]
    (group,) = wire(rs)["status"]["pending"]
    assert group["bindings"] == ["a%2Fb/c%252Fd", "//0", "x%2F/%2F/7"]
    assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for e in group["bindings"])
    back = KarmadaQuota.model_validate(wire(rs)).status.reservations
    assert [(r.reservedBy.name, r.reservedBy.uid, r.generation) for r in back] == [
        ("a/b", "c%2Fd", 1),
        ("", "", 0),  # a negative generation is observed by every binding generation, as 0 is
        ("x/", "/", 7),
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
    """logical list → dump → validate → the same list (grouped stably by charge and expiry),
    and dumping that again gives byte-identical JSON; every entry and expiry matches the CRD's
    pattern."""
    stored = json.loads(json.dumps(wire(rs)))  # as the API server hands it back
    back = KarmadaQuota.model_validate(stored).status.reservations
    assert back == grouped(rs)
    assert wire(back) == stored
    for group in stored["status"].get("pending", []):
        assert re.fullmatch(PENDING_EXPIRES_PATTERN, group["expires"])
        assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for e in group["bindings"])
    # and the estimate the webhook's bound uses is an upper bound of what is written, for
    # what the API server admits as names and uids (JSON escapes other characters)
    plain = re.compile(r"[a-z0-9.-]*")
    if all(plain.fullmatch(r.reservedBy.name + r.reservedBy.uid) for r in rs):
        pending = stored["status"].get("pending")
        assert pending_size(rs) >= len(json.dumps(pending)) or not rs  # spaced, even


# ---- an old layout, read once after an upgrade ---------------------------------------------


OLD = [
    res("web-deployment", "u-1", {"pods": "1", "requests.cpu": "100m"}, generation=2),
    res("db-statefulset", "u-2", {"pods": "3"}, expires="2026-01-01T12:01:00.5Z"),
    res("api-deployment", "u-3", {"pods": "1", "requests.cpu": "100m"}),
]


# OLD as the first write after an upgrade puts it
OLD_REWRITTEN = [
    {
        "charge": {"pods": "1", "requests.cpu": "100m"},
        "expires": SOON_T,
        "bindings": ["web-deployment/u-1/2", "api-deployment/u-3"],
    },
    {
        "charge": {"pods": "3"},
        "expires": "2026-01-01T12:01:01Z",
        "bindings": ["db-statefulset/u-2"],
    },
]


def test_an_old_layout_is_read_and_the_next_write_has_only_pending() -> None:
    raw = doc({"reservations": [old_entry(r) for r in OLD]})
    q = KarmadaQuota.model_validate(raw)
    assert q.status.reservations == OLD  # exactly what v0.1 held, in its order
    assert QuotaView.of(q).reserved == {
        "pods": Quantity.parse("5"),
        "requests.cpu": Quantity.parse("200m"),
    }
    written = q.model_dump(mode="json", exclude_none=True)["status"]
    # a status PUT replaces the whole status: without `reservations`, the old list is gone
    assert "reservations" not in written
    # a sub-second expiry is rounded up: the charge never lapses earlier than it said
    assert written["pending"] == OLD_REWRITTEN
    again = KarmadaQuota.model_validate({**raw, "status": written}).status.reservations
    assert [(r.reservedBy.uid, r.reserved, r.generation) for r in again] == [
        (r.reservedBy.uid, r.reserved, r.generation) for r in grouped(OLD)
    ]
    assert QuotaView.of(KarmadaQuota.model_validate({**raw, "status": written})).reserved == (
        QuotaView.of(q).reserved
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
    assert QuotaView.of(q).reserved["pods"] == Quantity.parse("7")
    assert "reservations" not in q.model_dump(mode="json")["status"]
    # the raw readers (kubectl plugin) see the same list
    data = kubectl_plugin.describe_data(doc({"pending": pending, "reservations": old}), NOW)
    assert [r["uid"] for r in data["reservations"]] == ["u-1", "u-9", "u-2", "u-1"]


# `pending`'s first form: grouped by charge alone, each entry with its own expiry (Unix seconds)
FIRST_FORM = [
    {
        "charge": {"pods": "1", "requests.cpu": "100m"},
        "bindings": [f"web-deployment/u-1/2/{SOON_S}", f"api-deployment/u-3/1/{SOON_S}"],
    },
    {"charge": {"pods": "3"}, "bindings": [f"db-statefulset/u-2/1/{SOON_S + 1}"]},
]


def test_the_first_form_of_pending_is_read_and_the_next_write_has_the_new_one() -> None:
    raw = doc({"pending": FIRST_FORM})
    q = KarmadaQuota.model_validate(raw)
    assert [
        (r.reservedBy.name, r.reservedBy.uid, r.reserved, r.generation, r.expirationTime)
        for r in q.status.reservations
    ] == [
        (r.reservedBy.name, r.reservedBy.uid, r.reserved, r.generation, format_time(SOON))
        for r in (OLD[0], OLD[2])
    ] + [("db-statefulset", "u-2", {"pods": "3"}, 1, "2026-01-01T12:01:01Z")]
    assert QuotaView.of(q).reserved == {
        "pods": Quantity.parse("5"),
        "requests.cpu": Quantity.parse("200m"),
    }
    written = q.model_dump(mode="json", exclude_none=True)["status"]
    assert written["pending"] == OLD_REWRITTEN
    again = KarmadaQuota.model_validate({**raw, "status": written})
    assert again.status.reservations == q.status.reservations
    # the CRD still admits the first form (a status written before it changed stays valid)
    assert all(re.fullmatch(PENDING_ENTRY_PATTERN, e) for g in FIRST_FORM for e in g["bindings"])


@pytest.mark.parametrize("layout", ["reservations", "pending"])
async def test_the_webhooks_first_write_after_an_upgrade_rewrites_the_old_layout(
    layout: str,
) -> None:
    old = [old_entry(r) for r in OLD] if layout == "reservations" else FIRST_FORM
    raw = doc({layout: old}, namespace="ns")
    raw["metadata"]["name"] = "team-a"
    store = Replica(raw)
    batcher = Batcher(store, clock=lambda: NOW)
    b = binding("fresh", cpu="1", uid="u-fresh")
    decision = await batcher.submit(
        ChargeRequest("ns", "fresh", "u-fresh", 1, charge.charge(b), None, False)
    )
    assert decision.allowed
    status = store.objects[("ns", "team-a")]["status"]
    assert "reservations" not in status
    assert all("expires" in g for g in status["pending"])  # every group in the new form
    held = store.stored().status.reservations
    assert {r.reservedBy.uid for r in held} == {"u-1", "u-2", "u-3", "u-fresh"}
    await batcher.close()


# ---- malformed entries ---------------------------------------------------------------------


def held_by(raw_pending: Any) -> tuple[list[Reservation], dict[str, Quantity]]:
    q = read_quota(doc({"pending": raw_pending}))
    assert q is not None  # a malformed entry never makes the quota unreadable
    return q.status.reservations, QuotaView.of(q).reserved


@pytest.mark.parametrize(
    "entry",
    [
        "web/u-1/1/soon",  # expiry not a number
        "web/u-1/1/2026-01-01T12:01:00Z",  # an RFC 3339 time is not Unix seconds
        "web/u-1/1/",  # no expiry
        "web/u-1/1/99999999999999999999",  # beyond 9999-12-31
        "web/u-1/1/" + "9" * 5000,  # more digits than int() reads
        f"web/u-1/1/{SOON_S}/extra",  # one part too many
        "web/u-1",  # no expiry: neither its own nor its group's (the group has none)
        "",
        42,  # not a string
        None,
    ],
)
def test_an_unreadable_expiry_holds_and_is_due_at_once(entry: Any) -> None:
    """An entry whose expiry cannot be read still holds its charge (the old layout read it as
    lapsed, holding nothing: fail open); it is due for the controller's orphan audit at once,
    and the next write keeps it, as due (1970-01-01)."""
    good = f"db/u-2/1/{SOON_S}"
    rs, reserved = held_by([{"charge": {"pods": "2"}, "bindings": [entry, good]}])
    assert len(rs) == 2 and rs[0].due(NOW) and rs[0].expires() is None
    assert reserved == {"pods": Quantity.parse("4")}
    old = read_quota(doc({"reservations": [old_entry(res("x", "u-1", {"pods": "2"}, "soon"))]}))
    assert old is not None and QuotaView.of(old).reserved == {"pods": Quantity.parse("2")}
    written = wire(rs)["status"]["pending"]
    assert [g["expires"] for g in written] == [EPOCH_T, SOON_T]
    again, held = held_by(written)
    assert len(again) == 2 and held == reserved


EPOCH_T = "1970-01-01T00:00:00Z"


@pytest.mark.parametrize(
    "expires",
    [
        "soon",
        "",
        "2026-13-01T00:00:00Z",  # no such month
        str(SOON_S),  # Unix seconds belong in a first-form entry, not in a group
        SOON_S,  # not a string
        None,
        {"at": SOON_T},
        "9" * 5000,
    ],
)
def test_an_unreadable_group_expiry_holds_and_is_due_at_once(expires: Any) -> None:
    """A group whose `expires` cannot be read holds its charge, due for the audit at once;
    the groups around it are read as they are."""
    good = {"charge": {"pods": "2"}, "expires": SOON_T, "bindings": ["db/u-2"]}
    bad = {"charge": {"pods": "5"}, "expires": expires, "bindings": ["web/u-1", "api/u-3/2"]}
    rs, reserved = held_by([bad, good])
    assert len(rs) == 3 and all(r.due(NOW) and r.expires() is None for r in rs[:2])
    assert [(r.reservedBy.name, r.reservedBy.uid, r.generation) for r in rs[:2]] == [
        ("web", "u-1", 1),
        ("api", "u-3", 2),
    ]
    assert reserved == {"pods": Quantity.parse("12")}
    assert wire(rs)["status"]["pending"] == [
        {"charge": {"pods": "5"}, "expires": EPOCH_T, "bindings": ["web/u-1", "api/u-3/2"]},
        good,
    ]


@pytest.mark.parametrize(
    "entry", ["web", "", "web/u-1/1/2/3", f"web/u-1/1/{SOON_S}/x", 42, None, ["web", "u-1"]]
)
def test_an_entry_of_neither_form_holds_until_the_audit(entry: Any) -> None:
    """Not `name/uid[/generation]` nor `name/uid/generation/expires`: held under its text as
    name and uid, due at once (the controller drops it: no binding has such a name)."""
    good = {"charge": {"pods": "2"}, "expires": SOON_T, "bindings": ["db/u-2"]}
    rs, reserved = held_by([{**good, "bindings": [entry, "db/u-2"]}])
    assert len(rs) == 2 and rs[0].due(NOW) and rs[0].expires() is None
    assert reserved == {"pods": Quantity.parse("4")}
    again, held = held_by(wire(rs)["status"]["pending"])
    assert len(again) == 2 and held == reserved


def test_a_first_form_entry_is_read_by_its_own_expiry_in_any_group() -> None:
    later = {"charge": {"pods": "2"}, "expires": "2026-01-01T11:00:00Z"}
    rs, reserved = held_by([{**later, "bindings": [f"web/u-1/3/{SOON_S}", "db/u-2"]}])
    assert [(r.expirationTime, r.generation) for r in rs] == [
        (SOON_T, 3),
        ("2026-01-01T11:00:00Z", 1),  # due an hour ago: still held
    ]
    assert reserved == {"pods": Quantity.parse("4")}


@pytest.mark.parametrize("form", ["group expiry", "first form"])
@pytest.mark.parametrize(
    "generation", ["x", "-1", "1.5", "", "99999999999999999999", "9" * 5000, "١"]
)
def test_an_unreadable_generation_holds_the_charge_past_its_expiry(
    generation: str, form: str
) -> None:
    """Dropped early (as if observed), the charge could be missing while its binding is not
    yet counted in `used`: under-count. It holds, expired or not, until the audit settles it."""
    group: dict[str, Any] = {"charge": {"pods": "2"}, "bindings": [f"web/u/{generation}"]}
    if form == "group expiry":
        group["expires"] = SOON_T
    else:
        group["bindings"] = [f"web/u/{generation}/{SOON_S}"]
    rs, reserved = held_by([group])
    (r,) = rs
    assert r.generation == HOLD_GENERATION and not r.due(NOW) and r.due(SOON)
    assert reserved == {"pods": Quantity.parse("2")}


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
        QuotaView.of(q)


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
    by = {r["name"]: r for r in usage_view.summarize(raw)["resources"]}
    assert (by["pods"]["reserved"], by["requests.cpu"]["reserved"]) == ("7", "1")  # expired holds
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
        ("MemberObserved", "AllMembersObserved", "pods and claims observed in 3 member cluster(s)"),
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
    """200 pending creates of one shape (a Deployment's binding `web-0042-deployment`, a UUID,
    generation 1, pods/cpu/memory) admitted over two seconds (two groups, as a storm keeps
    alive), in the realistic quota of `storm_quota`:

    - v0.1 (full objects in status.reservations): 62,145 bytes of status JSON, 304 bytes per
      reservation;
    - `pending`'s first form (`name/uid/generation/expires` per entry, grouped by charge):
      15,825 bytes, 72.7 bytes per entry;
    - status.pending now: 13,337 bytes, 60.2 bytes per entry (name 19 + uid 36, a slash,
      quotes and a comma; the two groups' charge and expiry shared): 4.7x smaller than v0.1,
      16 % smaller than the first form.

    The rest of the status is 1,289 bytes; 8 KB of status holds 112 such entries (the first
    form: 93, v0.1: 22). 200 entries cannot fit 8 KB while each carries its binding's name
    and uid.
    """
    q = storm_quota()
    shape = {"pods": "1", "requests.cpu": "100m", "requests.memory": "128Mi"}
    rs = [
        res(
            f"web-{i:04d}-deployment",
            str(uuid.uuid5(uuid.NAMESPACE_DNS, str(i))),
            shape,
            expires=SOON + timedelta(seconds=i // 100),
        )
        for i in range(200)
    ]
    rest = status_bytes(q, [])
    new = status_bytes(q, rs)
    old_status = {**q.status.model_dump(mode="json"), "reservations": [old_entry(r) for r in rs]}
    old = len(json.dumps(old_status, separators=(",", ":")))
    first = [
        f"{r.reservedBy.name}/{r.reservedBy.uid}/{r.generation}/{SOON_S + i // 100}"
        for i, r in enumerate(rs)
    ]

    def first_bytes(n: int) -> int:
        pending = [{"charge": shape, "bindings": first[:n]}]
        return len(
            json.dumps(
                {**q.status.model_dump(mode="json"), "pending": pending}, separators=(",", ":")
            )
        )

    per_entry = (new - rest) / len(rs)
    fits_8k = sum(1 for n in range(1, 201) if status_bytes(q, rs[:n]) <= 8 * 1024)
    first_fits = sum(1 for n in range(1, 201) if first_bytes(n) <= 8 * 1024)
    with capsys.disabled():
        print(
            f"\n200 pending creates: status {new} B in status.pending vs {first_bytes(200)} B in "
            f"its first form and {old} B in v0.1 ({old / new:.1f}x); rest of the status {rest} B; "
            f"{per_entry:.1f} B per entry; {fits_8k} entries fit in 8 KB of status "
            f"({first_fits} in the first form)"
        )
    assert rest <= 1300
    assert per_entry <= 61  # name 19 + uid 36 + 4, and the groups: nothing else per binding
    assert new <= first_bytes(200) * 0.85 and old / new >= 4.6
    assert fits_8k >= 110 and fits_8k > first_fits


def test_an_entry_names_the_binding_the_models_describe() -> None:
    """`pending` sits below `api`: what a decoded entry names is the ResourceBinding's
    apiVersion and kind as the models have them."""
    assert pending.ENTRY_API_VERSION == api.BINDING_API_VERSION
    assert pending.ENTRY_KIND == api.BINDING_KIND
