"""The pending-charge contract: what an entry is, how it is encoded, sized, folded and pruned.

A charge the webhook admitted and the controller has not yet counted in `used` is a pending
charge (a `Reservation`, `api.KarmadaQuotaStatus.reservations`). Both writers of a quota's
status share it: the webhook's batcher appends entries within a size bound (`append_within`,
`pending_size`) and takes back its own (`without_refused`); the controller's recompute prunes
what it counted or disproved (`prune_reservations`), its status writer removes them by patch
(`pending_removals`) and may wait with a write that only folds them into `used` (`held`). The
wire models in `api` encode and decode them here (`encode_pending`, `wire_reservations`).

Pure, and below `api`: it reads a reservation through `Entry`, the fields it keeps.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote

from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.times import format_time, parse_time


class Reference(Protocol):
    """The binding an entry names (`api.ObjectReference`)."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...


class Entry(Protocol):
    """One pending charge as every component reads it (`api.Reservation`)."""

    @property
    def reservedBy(self) -> Reference: ...
    @property
    def reserved(self) -> Mapping[str, str | int]: ...
    @property
    def expirationTime(self) -> str: ...
    @property
    def generation(self) -> int: ...


E = TypeVar("E", bound=Entry)


class Indexed(Protocol):
    """What pruning reads of an indexed binding (`controller.index.IndexedBinding`)."""

    @property
    def generation(self) -> int: ...


# what every entry names, a ResourceBinding: `api.BINDING_API_VERSION` and `api.BINDING_KIND`
# (tests/core/test_pending.py holds them equal; `api` sits above this module)
ENTRY_API_VERSION = "work.karmada.io/v1alpha2"
ENTRY_KIND = "ResourceBinding"


def expired(expiration_time: str, now: datetime) -> bool:
    """Whether a pending charge expiring at `expiration_time` is due for the controller's
    orphan audit at `now` (naive means UTC); an unreadable time is due at once.

    Never a release: an expired charge holds exactly what it held before (a clock alone never
    frees quota — with no controller the quota fills and refuses). Only the controller drops
    an entry, once it has counted its binding in `used` or proved that it never existed."""
    when = parse_time(expiration_time)
    return when is None or when <= (now.replace(tzinfo=UTC) if now.tzinfo is None else now)


# Pending charges on the wire: `status.pending`
#
# Every admitted-but-not-yet-observed charge used to be a full Reservation object in
# `status.reservations` (~300 bytes of JSON each); a storm put 50–200 of them in every status
# write. On the wire they are grouped by charge and expiry, one short string per binding (~50
# bytes): a batch's reservations share their expiration, whole seconds rounded up, so the
# batches of one second share a group, and a storm keeps one or two groups per charge alive.
# An entry is the binding's name and uid, and its generation only when it is not 1 (a create's):
#
#   pending: [{"charge": {"pods": "1", "requests.cpu": "100m"},
#              "expires": "2026-01-01T12:01:00Z",
#              "bindings": ["web-deployment/6f1c…", "api-deployment/0b5e…/2", …]}, …]
#
# In memory nothing changed: `KarmadaQuotaStatus.reservations` is the logical list of
# `Reservation`s. Decoding fills in what the entry leaves out (reservedBy apiVersion/kind: a
# ResourceBinding; namespace: the quota's; generation 1; the group's expiry); encoding keeps
# only name, uid, generation, expiration (whole seconds, rounded up) and the charge.
#
# Read once after an upgrade, and never written: the first form of `pending` (groups by charge
# alone, `<name>/<uid>/<generation>/<expires in Unix seconds>` per entry) and v0.1's
# `status.reservations`.

# name/uid, name/uid/generation, or (the first form, read only) name/uid/generation/expires.
# Names and uids never contain '/' (DNS subdomains, UUIDs); the encoder escapes '%' and '/'
# anyway, so whatever it writes matches the pattern.
PENDING_ENTRY_PATTERN = r"^[^/]*/[^/]*(/[0-9]+){0,2}$"
# a group's expiry: RFC 3339 (the encoder writes UTC whole seconds, `format_time`)
PENDING_EXPIRES_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
# the generation an entry leaves out: a create's (the API server sets 1 before admission)
DEFAULT_GENERATION = 1
# generation of an entry whose generation is unreadable: no binding reaches it, so the charge
# holds until the orphan audit settles it (never dropped early, which could under-count)
HOLD_GENERATION = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_SECONDS = int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH).total_seconds())
_UNREADABLE = "unreadable:"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F") if "%" in text or "/" in text else text


def _unescape(text: str) -> str:
    return unquote(text) if "%" in text else text


def expiry_seconds(expiration_time: str) -> int | None:
    """An RFC 3339 expiration as Unix seconds, rounded up (a charge is never audited earlier
    than it said) and clamped to 0..9999-12-31; None when unreadable (due at once)."""
    when = parse_time(expiration_time)
    if when is None:
        return None
    delta = when - _EPOCH
    seconds = delta.days * 86400 + delta.seconds + (1 if delta.microseconds else 0)
    return min(max(seconds, 0), _MAX_SECONDS)


def _seconds_time(seconds: int) -> str:
    """Unix seconds (0..9999-12-31) as the RFC 3339 time a group's `expires` says."""
    return format_time(_EPOCH + timedelta(seconds=seconds))


def pending_entry(r: Entry) -> str:
    """`<name>/<uid>`, or `<name>/<uid>/<generation>` when the generation is not
    `DEFAULT_GENERATION`; the expiry is its group's."""
    name, uid = _escape(r.reservedBy.name), _escape(r.reservedBy.uid)
    generation = min(max(r.generation, 0), HOLD_GENERATION)
    return f"{name}/{uid}" if generation == DEFAULT_GENERATION else f"{name}/{uid}/{generation}"


def charge_key(reserved: Mapping[str, str | int]) -> tuple[tuple[str, str | int], ...]:
    """What groups reservations in `pending` (with their expiry): the same names and values (2
    and "2" differ)."""
    return tuple(sorted(reserved.items()))


PendingKey = tuple[tuple[tuple[str, str | int], ...], int, str | None]
# one entry as `status.pending` keeps it: uid, generation, charge, expiry second (0: unreadable)
EntryKey = tuple[str, int, tuple[tuple[str, str | int], ...], int]


def entry_key(r: Entry) -> EntryKey:
    """What tells reservations apart once written (two equal keys are one charge made twice:
    the same binding generation admitted again within a second)."""
    return (
        r.reservedBy.uid,
        r.generation,
        charge_key(r.reserved),
        expiry_seconds(r.expirationTime) or 0,
    )


def pending_groups(
    reservations: Iterable[E], by_namespace: bool = False
) -> dict[PendingKey, list[E]]:
    """The reservations by their `status.pending` group, (charge, expiry in whole seconds
    rounded up; 0 — due at once — when unreadable; and with `by_namespace` — a cluster quota,
    whose entries come from many namespaces — the binding's namespace), groups in order of first
    appearance, each in list order: what the encoder writes and the webhook's size bound
    counts."""
    groups: dict[PendingKey, list[E]] = {}
    for key, r in _keyed(reservations, by_namespace):
        groups.setdefault(key, []).append(r)
    return groups


def _keyed(reservations: Iterable[E], by_namespace: bool) -> Iterator[tuple[PendingKey, E]]:
    """Each reservation with its `status.pending` group (`pending_groups`)."""
    seconds: dict[str, int] = {}  # a batch's reservations share their expiration
    for r in reservations:
        stamp = r.expirationTime
        if stamp not in seconds:
            seconds[stamp] = expiry_seconds(stamp) or 0
        ns = r.reservedBy.namespace if by_namespace else None
        yield (charge_key(r.reserved), seconds[stamp], ns), r


def encode_pending(
    reservations: Iterable[Entry], by_namespace: bool = False
) -> list[dict[str, Any]]:
    """The wire `pending` of a logical reservation list (`pending_groups`), so an unchanged
    list encodes to the same JSON (the controller writes only what differs). Decoding the
    result gives the list grouped stably; a reservation whose expiration is unreadable is
    written as due at once (1970-01-01): it is held until the controller's audit drops it,
    never left out. With `by_namespace` (a cluster quota) each group says its bindings'
    `namespace`."""
    return [
        {
            **({"namespace": ns} if ns is not None else {}),
            "charge": dict(rs[0].reserved),
            "expires": _seconds_time(at),
            "bindings": [pending_entry(r) for r in rs],
        }
        for (_, at, ns), rs in pending_groups(reservations, by_namespace).items()
    ]


def _read_charge(raw: Any) -> dict[str, str | int]:
    """A group's charge as written, so that it is charged as it says. What is not a quantity
    (only a writer that bypassed the CRD schema can put it there) is kept as text that fails
    to parse, so admission refuses in that namespace (fail closed) until the controller drops
    the entries (observed, or proven never created) — never read as nothing."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        return {"<unreadable charge>": repr(raw)}
    out: dict[str, str | int] = {}
    for name, value in raw.items():
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        out[str(name)] = value if ok else repr(value)
    return out


def _read_expires(group: Mapping[str, Any]) -> str | None:
    """A group's `expires` as its entries' expirationTime (whole seconds, rounded up, as the
    encoder writes it); unreadable (held, due for the audit at once) when it is not an RFC 3339
    time; None when the group has none (the first form: its entries carry their own)."""
    if "expires" not in group:
        return None
    raw = group["expires"]
    seconds = expiry_seconds(raw) if isinstance(raw, str) else None
    return _UNREADABLE + repr(raw) if seconds is None else _seconds_time(seconds)


def _unix_time(expires: str, stamps: dict[str, str]) -> str:
    """A first-form entry's expiry (Unix seconds) as an expirationTime; unreadable when it is
    not 0..9999-12-31 in at most 12 digits (int() refuses thousands of them)."""
    stamp = stamps.get(expires)
    if stamp is None:
        ok = expires.isascii() and expires.isdigit() and len(expires) <= 12
        seconds = int(expires) if ok else -1
        stamp = _seconds_time(seconds) if 0 <= seconds <= _MAX_SECONDS else _UNREADABLE + expires
        stamps[expires] = stamp
    return stamp


def _read_entry(
    entry: Any,
    charge: dict[str, str | int],
    namespace: str,
    expires: str | None,
    stamps: dict[str, str],
) -> dict[str, Any]:
    """One `bindings[]` entry of a group whose expiry reads `expires` (None: it has none) as
    a Reservation (dict form, validated by the caller)."""
    text = entry if isinstance(entry, str) else repr(entry)
    parts = text.split("/")
    if len(parts) == 4:  # the first form: name/uid/generation/expires (Unix seconds)
        name, uid, generation = parts[:3]
        stamp = _unix_time(parts[3], stamps)
    elif len(parts) in (2, 3):  # name/uid[/generation], by the group's expiry (if any)
        name, uid = parts[:2]
        generation = parts[2] if len(parts) == 3 else str(DEFAULT_GENERATION)
        stamp = expires if expires is not None else _UNREADABLE + text
    else:  # neither form: held under its text as name and uid, audited at once
        name, uid, generation, stamp = text, text, "", _UNREADABLE + text
    gen = (
        min(int(generation), HOLD_GENERATION)
        if generation.isascii() and generation.isdigit() and len(generation) <= 19
        else HOLD_GENERATION
    )
    return {
        "reservedBy": {
            "apiVersion": ENTRY_API_VERSION,
            "kind": ENTRY_KIND,
            "name": _unescape(name),
            "namespace": namespace,
            "uid": _unescape(uid),
        },
        "reserved": charge,
        "expirationTime": stamp,
        "generation": gen,
    }


def decode_pending(raw: Any, namespace: str = "") -> list[dict[str, Any]]:
    """The reservations (dict form) a wire `pending` holds, in order.

    Both forms are read: groups with an `expires` and entries `name/uid[/generation]` (what the
    encoder writes), and the first form, entries `name/uid/generation/expires` (Unix seconds),
    read by their own expiry in whatever group. A malformed entry never makes the quota
    unreadable (an unreadable quota is skipped by the webhook: nothing would be enforced) and
    never holds less than the old layout would have:
    - an expiry that cannot be read — a group's `expires` that is not an RFC 3339 time, a
      first-form expiry that is not Unix seconds within 0..9999-12-31, a group without
      `expires` for entries that carry none, or an entry that is neither form at all —
      becomes an unreadable `expirationTime`: the charge holds, due for the controller's
      orphan audit at once (`expired`), which drops it once its binding is counted or proven
      never created (a name no binding can have is proof at once);
    - an unreadable generation holds the charge until the audit settles it
      (`HOLD_GENERATION`);
    - an unreadable charge is charged as unparseable text: admission fails closed (see
      `_read_charge`);
    - a group that is not an object, or a `pending` that is not a list, holds no entry to read.
    """
    if not isinstance(raw, list):
        return []
    out: list[dict[str, Any]] = []
    stamps: dict[str, str] = {}
    for group in raw:
        if not isinstance(group, Mapping):
            continue
        charge = _read_charge(group.get("charge"))
        expires = _read_expires(group)
        entries = group.get("bindings")
        # a cluster quota's group names its bindings' namespace; a quota's are its own
        ns = group.get("namespace")
        ns = ns if isinstance(ns, str) else namespace
        for entry in entries if isinstance(entries, list) else []:
            out.append(_read_entry(entry, charge, ns, expires, stamps))
    return out


def _identity(r: Any) -> tuple[str, int] | None:
    """(uid, generation) of a reservation in dict or model form; None when it has none."""
    if isinstance(r, Mapping):
        by = r.get("reservedBy")
        uid = by.get("uid") if isinstance(by, Mapping) else None
        generation = r.get("generation", 0)
        if isinstance(uid, str) and isinstance(generation, int):
            return (uid, generation)
        return None
    by = getattr(r, "reservedBy", None)  # a Reservation
    return None if by is None else (by.uid, r.generation)


def wire_reservations(status: Mapping[str, Any], namespace: str = "") -> list[Any]:
    """The pending charges of a status as the API server has it, as reservations in dict form
    (the model's `reservations`, before validation): `pending` decoded, followed by any
    old-layout `reservations` (a status written before the upgrade) that `pending` does not
    already hold (same uid and generation). For readers of raw objects (kubectl plugin);
    everyone else reads `KarmadaQuotaStatus.reservations`."""
    merged: list[Any] = decode_pending(status.get("pending"), namespace)
    old = status.get("reservations")
    if isinstance(old, list) and old:
        seen = {_identity(r) for r in merged}
        merged += [r for r in old if (_identity(r) or ("", -1)) not in seen]
    return merged


# Sizes: the webhook bounds `status.pending` (`--max-reservation-bytes`) by these

# JSON of one `status.pending[].bindings[]` entry besides its text (`pending_entry`): quotes
# and a comma (and a space, if the JSON is spaced); plus slack.
_RESERVATION_OVERHEAD = 6
# JSON of one `status.pending[]` group with an empty charge and no entry (keys, braces, an
# `expires` of 20 characters: 61 bytes, 67 spaced), plus slack; each resource of the charge
# adds its name, value and 8 (quotes, colon, comma, spaces).
_GROUP_OVERHEAD = 72


def reservation_size(r: Entry) -> int:
    """An upper bound of the JSON size of the reservation's `status.pending` entry
    (`name/uid[/generation]`); its group is `charge_size`.

    Exact up to the constant for ASCII names and uids, which object names and uids are (the
    API server validates them).
    """
    return _RESERVATION_OVERHEAD + len(pending_entry(r))


def charge_size(reserved: Mapping[str, str | int]) -> int:
    """An upper bound of the JSON size of a `status.pending` group for this charge, without
    its entries (exact up to the constant for ASCII resource names and quantities)."""
    return _GROUP_OVERHEAD + sum(len(k) + len(str(v)) + 8 for k, v in reserved.items())


def pending_size(reservations: Sequence[Entry], by_namespace: bool = False) -> int:
    """An upper bound of the JSON size of `status.pending` for these reservations: every
    entry, plus each distinct (charge, expiry[, namespace]) group once."""
    size = sum(reservation_size(r) for r in reservations)
    groups = pending_groups(reservations, by_namespace)
    return size + sum(
        charge_size(rs[0].reserved) + _namespace_size(ns) for (_, _, ns), rs in groups.items()
    )


def _namespace_size(namespace: str | None) -> int:
    """A cluster quota's group names its namespace: `"namespace": "<ns>", `."""
    return 0 if namespace is None else len(namespace) + 16


def without_refused(reservations: Sequence[E], refused: Sequence[Entry]) -> list[E]:
    """`reservations` minus one entry per refused one, matched by uid, generation, charge and
    expiry second (what `status.pending` keeps of an entry): never the binding's others."""
    wanted: dict[EntryKey, int] = {}
    for r in refused:
        key = entry_key(r)
        wanted[key] = wanted.get(key, 0) + 1
    kept: list[E] = []
    for r in reservations:
        key = entry_key(r)
        if wanted.get(key, 0) > 0:
            wanted[key] -= 1
            continue
        kept.append(r)
    return kept


def append_within(
    reservations: Sequence[E], new: Sequence[E], max_bytes: int, by_namespace: bool = False
) -> tuple[list[E], list[bool]]:
    """`reservations` with each of `new` that fits `max_bytes` appended, and whether each did.
    The bound is on the estimated size of `status.pending` (`pending_size`), where an entry
    costs its own size, plus its group's when its charge and expiry are new. Every entry
    already there is kept, expired or not: only the controller drops one (counted, or proven
    never created)."""
    keep = list(reservations)
    budget = max_bytes - pending_size(keep, by_namespace)
    groups = set(pending_groups(keep, by_namespace))
    fits: list[bool] = []
    for key, r in _keyed(new, by_namespace):
        group = charge_size(r.reserved) + _namespace_size(key[2])
        size = reservation_size(r) + (0 if key in groups else group)
        fits.append(size <= budget)
        if size > budget:
            continue
        budget -= size
        groups.add(key)
        keep.append(r)
    return keep, fits


# Folding: counting pending charges as used, and removing them by patch


def reserved(status: Mapping[str, Any]) -> dict[str, Quantity]:
    """Σ reserved per resource over every pending charge, expired or not (what admission adds:
    a charge holds until the controller counts or disproves it); `status.pending` and an old
    layout's `status.reservations` alike (`wire_reservations`)."""
    out: dict[str, Quantity] = {}
    for r in wire_reservations(status):
        if not isinstance(r, Mapping):
            continue
        for name, value in (r.get("reserved") or {}).items():
            try:
                q = Quantity.parse(str(value))
            except QuantityError:
                continue
            out[name] = out.get(name, Quantity.zero()) + q
    return out


def held(status: Mapping[str, Any]) -> dict[str, int]:
    """used + Σ pending charges, per resource (nanos; zeros dropped): what admission adds to."""
    out = {n: q.nanos for n, q in reserved(status).items()}
    for name, value in (status.get("used") or {}).items():
        out[name] = out.get(name, 0) + Quantity.parse(str(value)).nanos
    return {n: v for n, v in out.items() if v}


def pending_removals(current: Any, desired: Any) -> list[tuple[int, int | None, Any]] | None:
    """What the wire `pending` of `current` holds that `desired` no longer does, in index
    order: (group index, None, group) for a group none of whose entries `desired` holds (it
    goes whole, as the encoder never writes an empty group), (group index, entry index, entry)
    for every other entry it dropped. None when `desired` holds an entry `current` does not
    (or either is not the layout `encode_pending` writes): then no patch can say it.

    An entry is the same when its group's charge, `expires` (and `namespace`) are (as the
    encoder groups).
    """
    if not current:
        current = []
    if not desired:
        desired = []
    if not isinstance(current, list) or not isinstance(desired, list):
        return None
    wanted: Counter[tuple[Any, Any]] = Counter()
    for group in desired:
        key = _group_key(group)
        if key is None:
            return None
        for entry in group.get("bindings") or []:
            wanted[(key, entry)] += 1
    removals: list[tuple[int, int | None, Any]] = []
    for g, group in enumerate(current):
        key = _group_key(group)
        if key is None:
            return None
        entries = group.get("bindings") or []
        if not isinstance(entries, list):
            return None
        dropped: list[tuple[int, int | None, Any]] = []
        for i, entry in enumerate(entries):
            if isinstance(entry, str) and wanted[(key, entry)] > 0:
                wanted[(key, entry)] -= 1
            else:
                dropped.append((g, i, entry))
        removals += [(g, None, group)] if len(dropped) == len(entries) else dropped
    return None if +wanted else removals


def _group_key(group: Any) -> tuple[Any, Any, Any] | None:
    """(charge, expires, namespace) of a wire `pending` group (a cluster quota's groups name
    their bindings' namespace); None when it is not one."""
    if not isinstance(group, Mapping):
        return None
    charge, expires = group.get("charge") or {}, group.get("expires")
    if not isinstance(charge, Mapping) or not (expires is None or isinstance(expires, str)):
        return None
    return (charge_key(charge), expires, group.get("namespace"))


# Pruning: what the controller's recompute releases

RELEASED_OBSERVED = "observed"
# proven never created, or never stored at its generation (the orphan audit), or naming no
# possible binding
RELEASED_DISPROVED = "disproved"
# a ResourceBinding's name: a DNS subdomain (the API server validates custom resources' names)
_BINDING_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def possible_binding(name: str) -> bool:
    """Whether a ResourceBinding can have this name (a reservation naming none is proof at
    once that its binding was never created: only a writer bypassing the schema makes one)."""
    return bool(_BINDING_NAME.match(name))


def prune_reservations(
    reservations: Sequence[E],
    bindings: Mapping[str, Indexed],
    deleted: Callable[[str], bool],
    now: datetime,
    disproved: Mapping[EntryKey, int] | None = None,
) -> tuple[list[E], dict[str, int], datetime | None]:
    """(kept, released count per reason, earliest expiry yet to come among kept).

    Released: a reservation whose binding the index holds at its generation or later (counted
    in `used` by the same snapshot), or saw deleted (or the orphan audit proved absent), or
    whose name no binding can have, or up to `disproved[key]` entries of a key the orphan audit
    disproved (a later admission of the same key keeps its own). Everything else is kept,
    expired or not."""
    kept: list[E] = []
    released: dict[str, int] = {}
    earliest: datetime | None = None
    left = {k: n for k, n in (disproved or {}).items() if n > 0}
    for r in reservations:
        uid = r.reservedBy.uid
        entry = bindings.get(uid)
        if (entry is not None and entry.generation >= r.generation) or deleted(uid):
            released[RELEASED_OBSERVED] = released.get(RELEASED_OBSERVED, 0) + 1
            continue
        if not possible_binding(r.reservedBy.name) or _take(left, r):
            released[RELEASED_DISPROVED] = released.get(RELEASED_DISPROVED, 0) + 1
            continue
        kept.append(r)
        expires = parse_time(r.expirationTime)
        if expires is not None and not expired(r.expirationTime, now):
            earliest = expires if earliest is None or expires < earliest else earliest
    return kept, released, earliest


def _take(left: dict[EntryKey, int], r: Entry) -> bool:
    """Whether `r` is one of the disproved entries still to release (and count it)."""
    if not left:
        return False
    key = entry_key(r)
    n = left.get(key, 0)
    if n <= 0:
        return False
    left[key] = n - 1
    return True
