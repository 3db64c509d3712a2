"""Dequeue: let queued ResourceBindings go as room appears (the leader's side of queueing).

Admission is the webhook's word (its decision on a review); here a binding only leaves the
queue, and the UPDATE that clears it is admitted or refused by the webhook like any other.

After a namespace's quotas were recomputed, the leader picks the queued bindings that fit
(`queueing.select`: priority, then age; BestEffortFIFO or StrictFIFO per quota) and clears each
one's suspension with a merge patch on the resourceVersion it decided from. That UPDATE goes
through the validating webhook, which charges it exactly: a pick that no longer fits (another
webhook replica admitted something meanwhile) is refused there and stays queued, a newer
version answers 409 and is looked at again. Nothing here ever charges or writes a quota.

Priority is the binding's `spec.schedulePriority.priority` where Karmada set one, else the
value of the PriorityClass its pods name (read from karmada-apiserver, cached a minute).
Events go on the resource template: `Queued` once per binding per leader term, `Admitted`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from karmadaquota import queueing
from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import events, room
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.evaluate import QuotaView
from karmadaquota.kube import paths
from karmadaquota.kube.client import MERGE_PATCH, Api, Conflict, KubeError, NotFound

log = logging.getLogger("karmadaquota.admit")

EVENT_QUEUED = "Queued"
EVENT_ADMITTED = "Admitted"


@dataclass
class DequeueConfig:
    patch_timeout: float = 5.0
    # a PriorityClass value is read again after this long
    class_ttl: float = 60.0
    # after a lost precondition or an error, look at the namespace again this soon
    retry_after: float = 0.5
    events: bool = True


def priority_class_path(name: str) -> str:
    return f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}"


class Dequeuer:
    """Admits queued bindings (the queue's way of waiting for room, `controller.room`)."""

    def __init__(
        self, api: Api, metrics: ControllerMetrics, config: DequeueConfig | None = None
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.config = config or DequeueConfig()
        self._classes: dict[str, tuple[int, float]] = {}  # name -> (value, loop time read)
        self._announced: dict[str, set[str]] = {}  # namespace -> uids a Queued event named
        self._lengths: dict[str, set[str]] = {}  # namespace -> quotas with a queue gauge

    # ---- figures (every replica) -----------------------------------------------------------

    def publish(self, namespace: str, entries: Sequence[queueing.QueueEntry]) -> None:
        """The queue-length gauge of each quota of `namespace` that queued something."""
        counts: dict[str, int] = {}
        for e in entries:
            counts[e.quota] = counts.get(e.quota, 0) + 1
        for stale in self._lengths.get(namespace, set()) - counts.keys():
            self.metrics.queue_length.remove(namespace, stale)
        for quota, n in counts.items():
            self.metrics.queue_length.labels(namespace, quota).set(n)
        if counts:
            self._lengths[namespace] = set(counts)
        else:
            self._lengths.pop(namespace, None)

    # ---- the leader ------------------------------------------------------------------------

    async def dequeue(
        self,
        namespace: str,
        quotas: Sequence[KarmadaQuota],
        entries: Sequence[queueing.QueueEntry],
        now: datetime,
    ) -> float | None:
        """Admit what fits in `namespace`; the loop time to look again, if any."""
        return await room.run(_DequeuePass(self, namespace, quotas, entries, now), quotas)

    async def clear(
        self, namespace: str, pick: queueing.Pick, now: datetime, classes: Mapping[str, int]
    ) -> str:
        e = pick.entry
        extra = {
            "namespace": namespace,
            "binding": e.name,
            "uid": e.uid,
            "quota": e.quota,
            "priority": queueing.priority(e, classes),
        }
        try:
            await self.api.request(
                "PATCH",
                f"{paths.bindings(namespace)}/{e.name}",
                queueing.admit_patch(e.resource_version),
                timeout=self.config.patch_timeout,
                content_type=MERGE_PATCH,
            )
        except Conflict:
            result = "conflict"  # a newer version: its event brings it back
        except NotFound:
            result = "gone"
        except KubeError as err:
            # 403 QuotaExceeded: the webhook, which alone charges, found no room after all
            result = "refused" if err.status == 403 else "error"
            log.info("queued binding not admitted", extra={**extra, "error": str(err)})
        except (TimeoutError, OSError) as err:
            result = "error"
            log.warning("queued binding not admitted", extra={**extra, "error": str(err)})
        else:
            result = "admitted"
        self.metrics.queue_attempts.labels(result).inc()
        if result != "admitted":
            return result
        waited = (now - e.created).total_seconds() if e.created is not None else None
        self.metrics.queue_admissions.labels(pick.reason).inc()
        if waited is not None:
            self.metrics.queue_wait.observe(max(0.0, waited))
        self._announced.get(namespace, set()).discard(e.uid)
        log.info(
            "queued binding admitted",
            extra={
                **extra,
                "reason": pick.reason,
                "requested": queueing.resources_of(e),
                "waited_seconds": round(waited, 3) if waited is not None else None,
            },
        )
        waited_text = f" after {waited:.1f}s" if waited is not None else ""
        await self._event(
            namespace,
            e,
            EVENT_ADMITTED,
            f"admitted from the queue of quota {e.quota}{waited_text} ({pick.reason}): "
            f"scheduling resumed for {e.name}",
            now,
        )
        return result

    async def announce(
        self, namespace: str, entries: Sequence[queueing.QueueEntry], now: datetime
    ) -> None:
        """One Queued event per binding (again after a restart or a change of leader)."""
        seen = self._announced.setdefault(namespace, set())
        live = {e.uid for e in entries}
        seen &= live
        for e in entries:
            if e.uid in seen:
                continue
            seen.add(e.uid)
            await self._event(
                namespace,
                e,
                EVENT_QUEUED,
                f"queued by quota {e.quota} (onExceed: Queue): {e.name} requests "
                f"{queueing.resources_of(e)}; scheduling is suspended until it fits",
                now,
            )
        if not seen:
            self._announced.pop(namespace, None)

    def forget(self) -> None:
        """Leadership lost: the next leader term announces every queued binding again."""
        self._announced.clear()

    async def _event(
        self, namespace: str, e: queueing.QueueEntry, reason: str, message: str, now: datetime
    ) -> None:
        if self.config.events:
            await events.record(self.api, namespace, e.template, reason, message, now)

    async def class_values(self, names: set[str]) -> dict[str, int]:
        """PriorityClass values by name (a missing class counts as 0), cached."""
        loop_now = asyncio.get_running_loop().time()
        out: dict[str, int] = {}
        for name in sorted(n for n in names if n):
            held = self._classes.get(name)
            if held is not None and held[1] + self.config.class_ttl > loop_now:
                out[name] = held[0]
                continue
            try:
                obj = await self.api.get(priority_class_path(name))
                value = obj.get("value", 0)
                out[name] = int(value) if isinstance(value, int) else 0
            except NotFound:
                out[name] = 0
            except (KubeError, TimeoutError, OSError) as err:
                out[name] = held[0] if held is not None else 0
                log.warning(
                    "priority class not read", extra={"priority_class": name, "error": str(err)}
                )
                continue
            self._classes[name] = (out[name], loop_now)
        return out


class _DequeuePass:
    """One look at a namespace's queued bindings (`controller.room`'s loop)."""

    def __init__(
        self,
        dequeuer: Dequeuer,
        namespace: str,
        quotas: Sequence[KarmadaQuota],
        entries: Sequence[queueing.QueueEntry],
        now: datetime,
    ) -> None:
        self.dequeuer = dequeuer
        self.namespace = namespace
        self.entries = entries
        self.now = now
        self.policies = {q.metadata.name: queueing.Policy.of(q) for q in quotas}
        self.classes: dict[str, int] = {}
        self.again: float | None = None

    async def announce(self) -> bool:
        await self.dequeuer.announce(self.namespace, self.entries, self.now)
        return bool(self.entries)

    async def select(self, views: Sequence[QuotaView]) -> list[queueing.Pick]:
        self.classes = await self.dequeuer.class_values({e.priority_class for e in self.entries})
        return queueing.select(self.entries, views, self.policies, self.classes)

    def strict_queue(self, pick: queueing.Pick) -> str | None:
        policy = self.policies.get(pick.entry.quota)
        return pick.entry.quota if policy is not None and policy.strict else None

    async def act(self, pick: queueing.Pick) -> bool:
        result = await self.dequeuer.clear(self.namespace, pick, self.now, self.classes)
        if result in ("conflict", "error"):
            loop = asyncio.get_running_loop()
            self.again = loop.time() + self.dequeuer.config.retry_after
        return result == "admitted"

    async def retry_at(self, let_go: Sequence[queueing.Pick]) -> float | None:
        return self.again
