"""The one store of KarmadaQuotas both shells read: informer-fed, with "fold my own write".

As client-go's informer store with its `MutationCache`: the quota informer (`kube.informer`:
list, watch, relist on 410, version order) fills it, and a writer folds the object its write
returned in at once (`fold`), so its next decision starts from what it wrote; the informer then
skips the watch's echo of that write, and a late event carrying an older resourceVersion never
rolls the store back. The webhook reads parsed quotas on every review; the controller reads the
raw object too (the base of its status write). A record keeps whichever form it was given and
makes the other on first use: during a storm the webhook writes the quota many times between
two recomputes, and only the last version is ever parsed by the controller. Parsed models of
records that keep their raw object are held for the most recently read ones only (`ParsedQuotas`):
at 5,000 quotas the models of all of them were 110 MiB held beside the raw objects.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import orjson

from karmadaquota.api import KarmadaQuota, read_cluster_quota, read_quota
from karmadaquota.kube import paths
from karmadaquota.kube.informer import Informer, Lister
from karmadaquota.kube.retry import Backoff
from karmadaquota.kube.versions import parse_rv
from karmadaquota.pending import expired, wire_reservations
from karmadaquota.times import parse_time

RECONNECT = Backoff(1.0, 1.0)
# the KarmadaQuotas whose parsed model the controller and the webhook keep (the most recently
# read): a recompute's and its jobs' namespaces, or the namespaces under review, many times over
PARSED_KEPT = 1024

# parses a raw quota (None when unreadable): `read_quota`, or `read_cluster_quota`
Reader = Callable[[Mapping[str, Any]], KarmadaQuota | None]


class UnreadableQuota(Exception):
    """A namespace holds a quota that cannot be parsed: what it limits is unknown, so admission
    in that namespace is refused (fail closed) until it is fixed or deleted."""

    def __init__(self, namespace: str, names: list[str]) -> None:
        self.namespace, self.names = namespace, names
        super().__init__(
            f"KarmadaQuota {', '.join(names)} in namespace {namespace} cannot be read "
            "(see the webhook's log); bindings there are refused until it is fixed or deleted"
        )


class ParsedQuotas:
    """Which records keep their parsed model: the `size` most recently read. Past it, the least
    recently read one drops its model and is parsed again from its raw object when next read
    (parsing is pure: the same raw object gives an equal model). A record held as a model only
    (a write of the webhook's, folded) or an unreadable one is never dropped: it has nothing to
    parse again from, or nothing to drop. None: every model is kept."""

    __slots__ = ("_held", "size")

    def __init__(self, size: int | None) -> None:
        self.size = size
        self._held: OrderedDict[QuotaRecord, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def read(self, record: QuotaRecord) -> None:
        """`record` was read: it is the most recent; the least recent past `size` drops."""
        if self.size is None:
            return
        held = self._held
        if record in held:
            held.move_to_end(record)
            return
        held[record] = None
        while len(held) > self.size:
            held.popitem(last=False)[0].drop_parsed()


KEEP_ALL = ParsedQuotas(None)


def _exact(data: bytes) -> bytes:
    """A copy of `data` allocated to its size: orjson's own result keeps twice its length
    allocated (tracemalloc: 8 KB held for a 4 KB quota)."""
    return memoryview(data).tobytes()


class QuotaRecord:
    """One quota as last stored: the raw object or the model, the other made on first use.

    The raw object is held as its JSON (bytes, 4 KB for a quota whose dict held 11 KB of Python
    objects) and decoded on each read of `raw` (a status write's base: microseconds beside the
    recompute). `metadata.managedFields` (the API server's field-ownership bookkeeping, often
    the bulk of a quota's metadata) is not kept: a status write that omits it leaves the
    server's as it is, and with a thousand quotas it would be megabytes held for nothing.
    """

    __slots__ = (
        "_on_exceed",
        "_parsed",
        "_quota",
        "_read",
        "_wire",
        "name",
        "namespace",
        "rv",
        "uid",
    )

    def __init__(
        self,
        raw: Mapping[str, Any] | None,
        quota: KarmadaQuota | None = None,
        read: Reader = read_quota,
        parsed: ParsedQuotas = KEEP_ALL,
    ) -> None:
        self._read = read
        self._parsed = parsed
        self._on_exceed: str | None = None  # spec.onExceed once parsed ("": unreadable)
        if raw is not None:
            meta = dict(raw.get("metadata") or {})
            meta.pop("managedFields", None)
            self._wire: bytes | None = _exact(orjson.dumps({**raw, "metadata": meta}))
            self._quota: KarmadaQuota | bool | None = False  # False: not parsed yet
        else:
            assert quota is not None, "a record holds a raw quota or a parsed one"
            self._wire, self._quota = None, quota
            m = quota.metadata
            meta = {"namespace": m.namespace, "name": m.name, "uid": m.uid}
            meta["resourceVersion"] = m.resourceVersion
        self.namespace = str(meta.get("namespace") or "")
        self.name = str(meta.get("name") or "")
        self.uid = str(meta.get("uid") or "")
        self.rv = parse_rv(meta.get("resourceVersion"))

    @property
    def raw(self) -> dict[str, Any]:
        """The object as the API server has it (dumped from the model when folded as one): a
        new dict each time, the caller's to change."""
        if self._wire is None:
            assert isinstance(self._quota, KarmadaQuota)
            self._wire = _exact(
                orjson.dumps(self._quota.model_dump(mode="json", exclude_none=True))
            )
        raw: dict[str, Any] = orjson.loads(self._wire)
        return raw

    @property
    def quota(self) -> KarmadaQuota | None:
        """The parsed quota; None (logged once) when it cannot be read."""
        if self._quota is False:
            assert self._wire is not None
            self._quota = self._read(orjson.loads(self._wire))
        if not isinstance(self._quota, KarmadaQuota):
            self._on_exceed = ""
            return None
        self._on_exceed = self._quota.spec.onExceed
        if self._wire is not None:
            self._parsed.read(self)
        return self._quota

    @property
    def on_exceed(self) -> str | None:
        """The quota's `spec.onExceed`, None when it cannot be read: kept when the model is
        dropped. The enforcement label asks it of every namespace a cluster quota selects, at
        each of its recomputes; parsing them all again churned the models kept."""
        if self._on_exceed is None:
            _ = self.quota
        return self._on_exceed or None

    def drop_parsed(self) -> None:
        """Forget the parsed model (`ParsedQuotas`) when the raw object can make it again."""
        if self._wire is not None and isinstance(self._quota, KarmadaQuota):
            self._quota = False

    def expirations(self) -> list[str]:
        """The `expirationTime` of each pending charge, read from the model when it is parsed
        and from the raw status otherwise, without parsing (and keeping) the whole quota: what
        the webhook's metrics read of every quota at each scrape."""
        if self._quota is None:
            return []  # unreadable: skipped by admission too
        if isinstance(self._quota, KarmadaQuota):
            return [r.expirationTime for r in self._quota.status.reservations]
        assert self._wire is not None
        if b'"pending"' not in self._wire and b'"reservations"' not in self._wire:
            return []  # most quotas most of the time: nothing decoded
        status = orjson.loads(self._wire).get("status")
        if not isinstance(status, Mapping):
            return []
        return [
            str(r.get("expirationTime", ""))
            for r in wire_reservations(status)
            if isinstance(r, Mapping)
        ]


class QuotaStore:
    """namespace -> name -> QuotaRecord, fed by its informer (this is its `Handler`).

    KarmadaQuotas; a `ClusterQuotaStore` holds ClusterKarmadaQuotas (all under namespace "").

    `on_put` and `on_delete` see each record the informer stores or removes (the controller
    marks the namespace dirty; the webhook counts its quotas); `on_relisted` follows a full
    list. A folded write is stored without a call.
    """

    # the kind held: where it is listed and watched, the informer's name, how a record parses
    PATH = paths.quotas()
    INFORMER = "karmadaquotas"
    parse: staticmethod[[Mapping[str, Any]], KarmadaQuota | None] = staticmethod(read_quota)

    def __init__(
        self,
        client: Lister | None,
        *,
        on_put: Callable[[QuotaRecord], None] | None = None,
        on_delete: Callable[[QuotaRecord], None] | None = None,
        on_relisted: Callable[[int], None] | None = None,
        page_size: int = 500,
        relist_period: float | None = None,
        backoff: Backoff = RECONNECT,
        parsed: int | None = None,
    ) -> None:
        self._parsed = ParsedQuotas(parsed)  # None: every parsed model is kept
        self._by_ns: dict[str, dict[str, QuotaRecord]] = {}
        self._client = client
        self._lookups: dict[str, asyncio.Future[None]] = {}  # live reads in flight
        self._on_put = on_put
        self._on_delete = on_delete
        self._on_relisted = on_relisted
        self.informer = Informer(
            self.PATH,
            self,
            client,
            page_size=page_size,
            relist_period=relist_period,
            backoff=backoff,
            name=self.INFORMER,
        )
        self.synced = self.informer.synced

    def __len__(self) -> int:
        return sum(len(b) for b in self._by_ns.values())

    def namespaces(self) -> list[str]:
        return sorted(self._by_ns)

    def has(self, namespace: str) -> bool:
        return bool(self._by_ns.get(namespace))

    def records(self, namespace: str) -> list[QuotaRecord]:
        """The namespace's quotas by name, readable or not."""
        return sorted(self._by_ns.get(namespace, {}).values(), key=lambda r: r.name)

    def quotas(self, namespace: str) -> list[KarmadaQuota]:
        """The namespace's readable quotas by name (an unreadable one is logged, and skipped)."""
        return [q for r in self.records(namespace) if (q := r.quota) is not None]

    def enforced(self, namespace: str) -> list[KarmadaQuota]:
        """The namespace's quotas by name, for admission: raises `UnreadableQuota` naming
        those that cannot be parsed (skipping one would admit what it limits: fail open)."""
        records = self.records(namespace)
        quotas = [q for r in records if (q := r.quota) is not None]
        if len(quotas) < len(records):
            raise UnreadableQuota(namespace, [r.name for r in records if r.quota is None])
        return quotas

    def overdue(self, now: datetime) -> tuple[float, int]:
        """(seconds the oldest pending charge is past its expiry, 0 when none is; how many
        are) over every quota held: charges the controller has neither counted in `used` nor
        disproved by their expiry — with no controller they pile up and the quotas fill. An
        unreadable expiry counts, with no age."""
        oldest, count = 0.0, 0
        for bucket in self._by_ns.values():
            for record in bucket.values():
                for expiration in record.expirations():
                    if not expired(expiration, now):
                        continue
                    count += 1
                    expires = parse_time(expiration)
                    if expires is not None:
                        oldest = max(oldest, (now - expires).total_seconds())
        return oldest, count

    async def lookup(self, namespace: str) -> bool:
        """Whether the namespace holds a quota: the store, or on a miss a live LIST of the
        namespace's quotas (folded in), as Kubernetes' quota admission reads live on a miss —
        a quota created a moment ago may not have reached the watch yet. Concurrent misses of
        one namespace share one read. Raises what the read raises (the caller refuses)."""
        if self.has(namespace):
            return True
        flight = self._lookups.get(namespace)
        if flight is None:
            flight = asyncio.ensure_future(self._list(namespace))
            self._lookups[namespace] = flight
            flight.add_done_callback(lambda _: self._lookups.pop(namespace, None))
        await asyncio.shield(flight)
        return self.has(namespace)

    async def _list(self, namespace: str) -> None:
        if self._client is None:
            raise RuntimeError("no API client to read quotas live")
        got = await self._client.get(paths.quotas(namespace))
        for item in got.get("items") or []:
            if isinstance(item, Mapping):
                self.fold(item)

    def get(self, namespace: str, name: str) -> QuotaRecord | None:
        return self._by_ns.get(namespace, {}).get(name)

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self.informer.run()

    # ---- fold my own write -----------------------------------------------------------------

    def fold(self, raw: Mapping[str, Any]) -> QuotaRecord | None:
        """Fold in a quota a write of ours returned (or a fresh read) unless a newer version
        is held; the record held afterwards."""
        return self._fold(QuotaRecord(raw, read=self.parse, parsed=self._parsed))

    def fold_quota(self, quota: KarmadaQuota) -> QuotaRecord | None:
        """`fold` for a quota already parsed (what the webhook's batch wrote)."""
        return self._fold(QuotaRecord(None, quota, self.parse, self._parsed))

    def _fold(self, record: QuotaRecord) -> QuotaRecord | None:
        # not reported to `on_put`: the writer knows what it wrote (the controller would
        # otherwise recompute a namespace again after each of its own writes)
        if self.informer.hold(record.namespace, record.name, record.uid, record.rv):
            self._by_ns.setdefault(record.namespace, {})[record.name] = record
            return record
        return self.get(record.namespace, record.name)

    # ---- informer.Handler --------------------------------------------------------------------

    def added(self, obj: Mapping[str, Any]) -> None:
        self._put(QuotaRecord(obj, read=self.parse, parsed=self._parsed))

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        bucket = self._by_ns.get(ns)
        record = bucket.pop(name, None) if bucket is not None else None
        if record is None:
            return
        if not bucket:
            del self._by_ns[ns]
        if self._on_delete is not None:
            self._on_delete(record)

    def relisted(self, resource_version: int) -> None:
        if self._on_relisted is not None:
            self._on_relisted(resource_version)

    def _put(self, record: QuotaRecord) -> None:
        self._by_ns.setdefault(record.namespace, {})[record.name] = record
        if self._on_put is not None:
            self._on_put(record)


class ClusterQuotaStore(QuotaStore):
    """The store of ClusterKarmadaQuotas (cluster-scoped: all under namespace "")."""

    PATH = paths.cluster_quotas()
    INFORMER = "clusterkarmadaquotas"
    parse = staticmethod(read_cluster_quota)


# the name the controller and the webhook build it by
cluster_quota_store = ClusterQuotaStore
