"""The aggregating controller (DESIGN §6): recomputes KarmadaQuota usage from ResourceBindings
and from the member clusters, releases quota on delete and scale-down, expires reservations.

Pure modules (no I/O, unit-tested): `index` (bindings -> compact usage), `pods` (observed usage
of member pods), `recompute` (a quota's desired status), `status` (summary, conditions, diff),
`dirty` (per-namespace coalescing). I/O shells: `members` (member pod watches), `leader`
(Lease election), `writer` (CAS status writes), `operator` (kopf wiring), `main`.
"""
