"""The aggregating controller: recomputes KarmadaQuota usage from ResourceBindings and from the
member clusters, releases quota on delete and scale-down, expires reservations.

Pure modules (no I/O, unit-tested): `index` (bindings -> compact usage), `pods` (observed usage
of member pods), `recompute` (a quota's desired status, and what to write or audit), `status`
(summary, conditions, diff), `dirty` (per-namespace coalescing), `quotas` (the quota table).
I/O shells: `reconciler` (informers in, CAS status writes out), `members` (member pod watches),
`leader` (Lease election), `operator` (kopf: lifecycle and Clusters), `main`.
"""
