"""Queue instead of refuse (issue 20): the pure decisions, shared by webhook and controller.

- At creation (`decide`): in a namespace where a matching quota says `onExceed: Queue`, a new
  binding that does not fit — or that would pass others already queued by a StrictFIFO quota —
  is queued: `queue_patch` suspends its scheduling and names the quota (`queued.ANNOTATION`).
  A binding refused for anything but room (missing requests, invalid values), or over a quota
  that refuses, is left alone: the validating webhook refuses it as before.
- Later (`select`, the one wait-for-room engine `karmadaquota.room_selection`, which waking
  uses too):
  queued bindings are tried higher priority first, then oldest, then by name; BestEffortFIFO
  tries every one that fits, StrictFIFO none past the first that does not. Each pick is
  assumed admitted for the ones after it. The controller clears the suspension with
  `admit_patch` (resourceVersion precondition), an UPDATE the validating webhook charges
  exactly: a pick that no longer fits is refused there and stays queued.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from karmadaquota import api, queued, resources, room_selection, scopes
from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.charge import Charge
from karmadaquota.evaluate import REASON_EXCEEDED, QuotaView, evaluate
from karmadaquota.times import parse_time

REASON_EXCEEDED_QUEUE = "Exceeded"  # did not fit
REASON_BEHIND = "BehindQueue"  # fits, but a StrictFIFO quota has others queued

ADMITTED_ROOM = "room"  # the quota that queued it has room now
ADMITTED_QUOTA_GONE = "quota_deleted"  # the quota that queued it no longer exists
ADMITTED_REFUSE_MODE = "quota_refuse_mode"  # that quota switched to Refuse: its queue drains


@dataclass(frozen=True, slots=True)
class Policy:
    """What a quota says about queueing, and how many it has queued (controller's count)."""

    name: str
    queue: bool
    strict: bool
    queued: int = 0

    @classmethod
    def of(cls, quota: KarmadaQuota) -> Policy:
        return cls(
            quota.metadata.name,
            quota.spec.onExceed == api.ON_EXCEED_QUEUE,
            quota.spec.queueingStrategy == api.STRATEGY_STRICT,
            quota.status.queued,
        )


@dataclass(frozen=True, slots=True)
class QueueDecision:
    quota: str
    reason: str  # REASON_EXCEEDED_QUEUE or REASON_BEHIND
    message: str


def decide(
    views: Sequence[QuotaView], policies: Mapping[str, Policy], full: Charge
) -> QueueDecision | None:
    """Whether a new binding costing `full` is queued, and by which quota (None: not queued)."""
    matching = sorted(
        (v for v in views if scopes.matches(v.scopes, full.traits)), key=lambda v: v.name
    )
    if not any(_queues(policies, v.name) for v in matching):
        return None
    exceeded: list[tuple[str, str]] = []
    for v in matching:
        d = evaluate([v], full)
        if d.allowed:
            continue
        if d.reason != REASON_EXCEEDED:
            return None  # refused for another reason: the validating webhook says why
        exceeded.append((v.name, d.message))
    if exceeded:
        if all(_queues(policies, name) for name, _ in exceeded):
            name, message = exceeded[0]
            return QueueDecision(name, REASON_EXCEEDED_QUEUE, message)
        return None  # some quota refuses outright: queueing would not help
    for v in matching:
        p = policies.get(v.name)
        if p is not None and p.queue and p.strict and p.queued > 0:
            return QueueDecision(
                v.name,
                REASON_BEHIND,
                f"quota {v.name} is StrictFIFO and has {p.queued} workload(s) queued ahead",
            )
    return None


def _queues(policies: Mapping[str, Policy], name: str) -> bool:
    p = policies.get(name)
    return p is not None and p.queue


def suspended(obj: Mapping[str, Any]) -> bool:
    """A raw binding whose scheduling is suspended (by anyone)."""
    suspension = (obj.get("spec") or {}).get("suspension") or {}
    return isinstance(suspension, Mapping) and suspension.get("scheduling") is True


def queue_patch(obj: Mapping[str, Any], quota: str) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that queues a raw binding for `quota`: suspend its scheduling
    and name the quota; every other field is left as it is."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ops: list[dict[str, Any]] = []
    if not isinstance(meta.get("annotations"), Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append(
        {
            "op": "add",
            "path": f"/metadata/annotations/{_pointer(queued.ANNOTATION)}",
            "value": quota,
        }
    )
    if isinstance(spec.get("suspension"), Mapping):
        ops.append({"op": "add", "path": "/spec/suspension/scheduling", "value": True})
    else:
        ops.append({"op": "add", "path": "/spec/suspension", "value": {"scheduling": True}})
    return ops


def _pointer(key: str) -> str:
    """A JSON pointer token (RFC 6901): `~` and `/` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


def admit_patch(resource_version: str) -> dict[str, Any]:
    """The JSON merge patch that admits a queued binding: the annotation and the suspension
    go, on the version the decision was made from (a newer one answers 409)."""
    return {
        "metadata": {"resourceVersion": resource_version, "annotations": {queued.ANNOTATION: None}},
        "spec": {"suspension": {"scheduling": None}},
    }


# ---------------------------------------------------------------------------------------------
# the queue


@dataclass(frozen=True, slots=True)
class Template:
    """The resource template a queued binding propagates: where events go."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One queued binding as the controller's index holds it."""

    name: str
    uid: str
    resource_version: str
    quota: str
    charge: Charge  # what it costs once admitted
    created: datetime | None
    schedule_priority: int | None  # spec.schedulePriority.priority where Karmada set one
    template: Template

    @property
    def priority_class(self) -> str:
        return self.charge.traits.priority_class

    @classmethod
    def of(cls, binding: ResourceBinding, quota: str, full: Charge) -> QueueEntry:
        """The entry of a binding `quota` queued (`queued.queued_by`), costing `full`."""
        meta, spec = binding.metadata, binding.spec
        return cls(
            name=meta.name,
            uid=meta.uid,
            resource_version=meta.resourceVersion,
            quota=quota,
            charge=full,
            created=parse_time(meta.creationTimestamp) if meta.creationTimestamp else None,
            schedule_priority=spec.schedulePriority.priority if spec.schedulePriority else None,
            template=Template(
                spec.resource.apiVersion, spec.resource.kind, spec.resource.name, spec.resource.uid
            ),
        )


def priority(entry: QueueEntry, class_values: Mapping[str, int]) -> int:
    """The binding's schedulePriority where set, else its PriorityClass value, else 0."""
    if entry.schedule_priority is not None:
        return entry.schedule_priority
    return class_values.get(entry.priority_class, 0)


_NEVER = datetime.max


def order(entries: Iterable[QueueEntry], class_values: Mapping[str, int]) -> list[QueueEntry]:
    """Higher priority first, then oldest, then by name (a total order: stable across runs)."""

    def key(e: QueueEntry) -> tuple[int, datetime, str, str]:
        created = e.created.replace(tzinfo=None) if e.created is not None else _NEVER
        return (-priority(e, class_values), created, e.name, e.uid)

    return sorted(entries, key=key)


@dataclass(frozen=True, slots=True)
class Pick:
    entry: QueueEntry
    reason: str  # ADMITTED_*


def select(
    entries: Iterable[QueueEntry],
    views: Sequence[QuotaView],
    policies: Mapping[str, Policy],
    class_values: Mapping[str, int],
) -> list[Pick]:
    """The queued bindings to admit now, in the order to try them (`room_selection.select`).

    Queues are per quota that queued the binding: one whose quota is StrictFIFO (and still
    says Queue or Refuse: a quota switched to Refuse drains its queue in the same order) stops
    at its first entry that does not fit; every other queue is BestEffortFIFO. Fit is checked
    against every quota of the namespace, with each earlier pick counted as admitted.
    """
    # one order across queues, so a higher-priority entry of any queue goes first
    candidates = [
        room_selection.Candidate(
            e, e.charge, queue=e.quota, strict=(p := policies.get(e.quota)) is not None and p.strict
        )
        for e in order(entries, class_values)
    ]
    return [
        Pick(e, _admitted_reason(policies.get(e.quota)))
        for e in room_selection.select(candidates, views)
    ]


def _admitted_reason(policy: Policy | None) -> str:
    if policy is None:
        return ADMITTED_QUOTA_GONE
    if not policy.queue:
        return ADMITTED_REFUSE_MODE
    return ADMITTED_ROOM


def resources_of(entry: QueueEntry) -> str:
    """`name=value,...` of what the entry asks for, for logs and events."""
    return ",".join(
        f"{n}={q}" for n, q in sorted(resources.remove_zeros(entry.charge.total).items())
    )
