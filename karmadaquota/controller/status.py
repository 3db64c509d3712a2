"""Status helpers (pure): the human summary, condition bookkeeping, and the write decision.

The controller shares the quota's status with the webhook, which appends pending charges to it
several times a second in a storm. A whole-status PUT compare-and-swaps on resourceVersion, so
every webhook write in between made the controller's write lose, re-read and retry — and pending
charges piled up in the object, which then cost every write and watch event more. So the
controller writes a JSON patch (RFC 6902) that touches only what it changes and compare-and-swaps
on what only it writes (`status.controllerRevision`): the webhook's writes in between no longer
make it lose. Pending entries are removed one by one, each after a `test` that it is still the
entry at that index, and a group whose entries all go is removed whole after a `test` of the
whole group (the encoder never writes an empty one), from the highest index down so that no
removal moves another's target; a patch computed from an older version either removes exactly
the entries it meant or fails as a whole (422) and is retried like a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from karmadaquota import cohorts
from karmadaquota.api import Condition, KarmadaQuotaStatus
from karmadaquota.pending import held, pending_removals, wire_reservations
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.times import format_time

COND_READY = "Ready"
COND_VALID = "Valid"
COND_MEMBER_OBSERVED = "MemberObserved"
# Present (False) only while some binding of the namespace is charged as zero where invalid.
COND_BINDINGS_CHARGED = "BindingsCharged"
# karmada-apiserver sends the namespace's bindings to the webhook (kube.namespaces' label)
COND_ENFORCED = "Enforced"
# memberEnforcement ResourceQuota: some member's pods request more than Karmada placed there
COND_OUT_OF_BAND = "OutOfBandUsage"
# memberEnforcement ResourceQuota: every member holds its guard as the share policy wants
COND_GUARDED = "Guarded"
# Present (True) while replicas Karmada evicted from a cluster are charged (a failover waits
# for them to end, or for the cluster's release: karmadaquota.evictions)
COND_EVICTION_CHARGED = "EvictionCharged"
CONDITION_ORDER = (
    COND_READY,
    COND_VALID,
    COND_MEMBER_OBSERVED,
    COND_BINDINGS_CHARGED,
    COND_ENFORCED,
    COND_OUT_OF_BAND,
    COND_GUARDED,
    COND_EVICTION_CHARGED,
)

_ZERO = Quantity.zero()


def summary(used: Mapping[str, Quantity], hard: Mapping[str, Quantity]) -> str:
    """`pods: 30/500, requests.cpu: 12/100` — every hard name, sorted, canonical quantities."""
    return ", ".join(f"{n}: {used.get(n, _ZERO)}/{hard[n]}" for n in sorted(hard))


def merge_conditions(
    current: Sequence[Condition], wanted: Sequence[Condition], now: datetime
) -> list[Condition]:
    """`wanted` conditions, keeping lastTransitionTime of those whose status did not change.

    Conditions of other types (set by someone else) are kept after ours.
    """
    by_type = {c.type: c for c in current}
    ours = {c.type for c in wanted}
    out: list[Condition] = []
    for w in sorted(wanted, key=_order):
        old = by_type.get(w.type)
        stamp = (
            old.lastTransitionTime
            if old is not None and old.status == w.status and old.lastTransitionTime
            else format_time(now)
        )
        out.append(w.model_copy(update={"lastTransitionTime": stamp}))
    out.extend(c for c in current if c.type not in ours)
    return out


def _order(c: Condition) -> tuple[int, str]:
    try:
        return (CONDITION_ORDER.index(c.type), c.type)
    except ValueError:
        return (len(CONDITION_ORDER), c.type)


def dump(status: KarmadaQuotaStatus) -> dict[str, Any]:
    """The status as it goes on the wire (what is compared and written)."""
    out: dict[str, Any] = status.model_dump(mode="json", exclude_none=True)
    return out


def needs_write(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True unless the object's status already says exactly what we would write.

    The API server drops empty maps and lists of a status, so absent and empty are the same.
    """
    return bool(_normal(current or {}) != _normal(desired))


def _normal(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items() if v not in _EMPTY}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


# written by the webhook too: a patch that changes it tests that it is still as read
SHARED_FIELDS = ("waiting",)
REVISION = "controllerRevision"
_PENDING = ("pending", "reservations")
_EMPTY: tuple[Any, ...] = (None, {}, [], "")


@dataclass(frozen=True)
class StatusWrite:
    """One status write of the controller: a JSON patch, or a whole status to PUT."""

    patch: list[dict[str, Any]] | None = None
    status: dict[str, Any] | None = None


def status_write(
    current: Mapping[str, Any] | None, desired: Mapping[str, Any]
) -> StatusWrite | None:
    """How to turn the status as read (`current`) into `desired`; None when nothing changes.

    A JSON patch when the status carries a controller revision and pending charges in the
    current layout, and `desired` only drops pending entries (the controller never adds any);
    otherwise (the first write, an old layout, anything unexpected) a whole status with the next
    revision, for a PUT that compare-and-swaps on resourceVersion as before.
    """
    current = current or {}
    revision = current.get(REVISION)
    if not needs_write(_without(current, REVISION), _without(desired, REVISION)):
        return None
    put = StatusWrite(status={**desired, REVISION: _next(revision)})
    if not isinstance(revision, int) or isinstance(revision, bool) or "reservations" in current:
        return put
    if cohorts.narrows(current, desired):
        return put  # lends or gives back only what no charge took since it was read (cohorts)
    removals = pending_removals(current.get("pending"), desired.get("pending"))
    if removals is None:
        return put
    ops: list[dict[str, Any]] = []
    for name in sorted((set(current) | set(desired)) - {REVISION, *_PENDING}):
        have, want = current.get(name), desired.get(name)
        if _normal(have) == _normal(want):
            continue
        path = f"/status/{name}"
        if name in SHARED_FIELDS and name in current:
            ops.append({"op": "test", "path": path, "value": have})
        if want in _EMPTY:
            if name in current:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": want})
    for group, entry, value in reversed(removals):  # highest index first: nothing shifts
        path = f"/status/pending/{group}"
        if entry is not None:
            path += f"/bindings/{entry}"
        ops += [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
    if not ops:
        return None
    revision_ops = [
        {"op": "test", "path": f"/status/{REVISION}", "value": revision},
        {"op": "replace", "path": f"/status/{REVISION}", "value": revision + 1},
    ]
    return StatusWrite(patch=revision_ops + ops)


# what counting admitted pending charges as used moves in a status besides them: admission
# reads none of it (it adds the pending charges to `used` itself)
_FOLDED = frozenset({"used", *_PENDING, "summary", "aggregatedStatus", "namespaces", REVISION})


def fold_only(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True when writing `desired` over `current` only counts pending charges as used: every
    other field is as it is, and used + Σ pending is the same for every resource. Admission
    reads the same room from either, so such a write may wait (`Reconciler`'s `fold_delay`):
    a stream of admissions into one quota is then not raced by the controller's own writes,
    each of which makes the webhook's next compare-and-swap lose."""
    current = current or {}
    for name in (set(current) | set(desired)) - _FOLDED:
        if _normal(current.get(name)) != _normal(desired.get(name)):
            return False
    try:
        return held(current) == held(desired)
    except QuantityError:
        return False


def pending_count(status: Mapping[str, Any] | None) -> int:
    """How many pending charges a status as read carries (the webhook rewrites them all with
    every charge it adds)."""
    return len(wire_reservations(status or {}))


def _next(revision: Any) -> int:
    ok = isinstance(revision, int) and not isinstance(revision, bool) and revision >= 0
    return revision + 1 if ok else 1


def _without(status: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != name}
