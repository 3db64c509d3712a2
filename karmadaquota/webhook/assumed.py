"""What this webhook replica queued lately, assumed in its quota's queue until counted.

A StrictFIFO quota lets no new binding past the ones it has queued, and how many it has is the
controller's count, `status.queued` — which lags a queueing by the controller's reaction time
(tens of milliseconds). Until then the replica that queued a binding assumes it there itself,
as Kueue's cache assumes a workload's usage until the API server confirms it: kept beside the
quota store, not in the admission handler, and read back through `policy`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from karmadaquota import queueing
from karmadaquota.api import KarmadaQuota

# how long a binding this replica queued counts towards its quota's queue, before the
# controller's `status.queued` surely has it (its reaction time is tens of milliseconds)
QUEUED_RECENTLY = 2.0
# quotas remembered at most (beyond it, those not queued for recently are forgotten)
BOUND = 1024


class AssumedQueues:
    """(namespace, quota) -> times this replica queued a binding for it, within `window`."""

    def __init__(
        self, window: float = QUEUED_RECENTLY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self._clock = clock
        self._queued_at: dict[tuple[str, str], list[float]] = {}

    def assume(self, namespace: str, quota: str) -> None:
        """A binding was just queued for `quota` (a real review, not a dry run)."""
        now = self._clock()
        if len(self._queued_at) > BOUND:  # bounded: forget quotas not queued for recently
            since = now - self.window
            self._queued_at = {k: v for k, v in self._queued_at.items() if v[-1] > since}
        self._queued_at.setdefault((namespace, quota), []).append(now)

    def policy(self, namespace: str, quota: KarmadaQuota) -> queueing.Policy:
        """The quota's policy, its queue at least as long as what this replica queued for it
        within the last `window` seconds (not yet in the controller's count)."""
        policy = queueing.Policy.of(quota)
        key = (namespace, policy.name)
        stamps = self._queued_at.get(key)
        if not stamps:
            return policy
        since = self._clock() - self.window
        recent = [t for t in stamps if t > since]
        if recent:
            self._queued_at[key] = recent
        else:
            del self._queued_at[key]
        if len(recent) <= policy.queued:
            return policy
        return replace(policy, queued=len(recent))
