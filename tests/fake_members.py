"""Fake member API servers holding ResourceQuotas, for the member guards' unit tests.

Each `FakeMember` is one `tests.fake_api.FakeApiServer` (`api`: etcd's rules — a
resourceVersion counter, PUT is a compare-and-swap that keeps the status, POST of an existing
name is 409, DELETE honours its uid precondition; lists and watches by label, so the keeper's
guard informer runs against it), is the keeper's client for that member (KubeClient's
`request`, `get`, `watch`), and plays the member's quota controller,
whose copy of `spec.hard` into `status.hard` is what the member's admission enforces: with
`lag=False` at once, with `lag=True` by the next GET (a quick controller), and never while
`stuck`. `down` refuses connections;
`lose_replies` applies a write and then loses the answer (an unknown outcome). It serves
admissionregistration.k8s.io/v1's policies where `minor` ≥ 30, answers a SelfSubjectReview with
`identity`, and refuses with 403 the paths a test puts in `forbid`. `tamper` is a member admin
writing directly (no policy is enforced by the fake).

`Fleet` is the set of members: every applied change is checked against Σ over members of what a
guard may hold (max(spec.hard, status.hard)) ≤ the global hard, and every request is recorded as
(member, verb, path) so a test can assert which verbs on which resources the guards use.

Members named in `pull` are Pull-mode Clusters (no endpoint): their guards reach them as Works
on `karmada` (a FakeApiServer, requests recorded as ("karmada", verb, path)), which `carry` —
karmada-agent — applies to the member's ResourceQuotas (its quota controller following as
above) and whose status it reflects (`reflect=False`: applied, not yet reflected). With
`agent_lag=False` the agent carries every Work at once after each write; else only when the
test calls `carry`.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import guard_policy as gp
from karmadaquota.controller.guard_keeper import may_hold
from karmadaquota.controller.members import Members
from karmadaquota.kube.client import JSON, KubeError, NotFound
from tests.fake_api import FakeApiServer
from tests.fake_api import parse as _parse

PREFIX = "/api/v1/namespaces/"
RQ = ("/api/v1", "resourcequotas")
NAMESPACES = ("/api/v1", "namespaces")
WORKS = ("/apis/work.karmada.io/v1alpha1", "works")
VAP_RESOURCES = ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]


class FakeMember:
    def __init__(self, fleet: Fleet, name: str, lag: bool = False) -> None:
        self.fleet = fleet
        self.name = name
        self.lag = lag
        self.api = FakeApiServer()
        self._down = False
        self.lose_replies = 0
        self.namespaces: set[str] | None = None  # None: every namespace exists
        self.stuck = False
        self.minor = 35  # Kubernetes 1.<minor>: ValidatingAdmissionPolicy v1 from 1.30
        self.identity = f"system:karmada:{name}"
        self.forbid: set[str] = set()  # a request whose path holds one of these: 403

    @property
    def quotas(self) -> dict[tuple[str, str], JSON]:
        """The stored ResourceQuotas by (namespace, name) (the live dict)."""
        return self.api.objects(RQ)

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            self.api.end_watches()  # its connections are cut

    def policy(self) -> JSON | None:
        return self.api.objects(("/apis/admissionregistration.k8s.io/v1", VAP_RESOURCES[0])).get(
            ("", gp.POLICY_NAME)
        )

    def sync_status(self) -> None:
        """The member's quota controller: status.hard := spec.hard everywhere."""
        if self.stuck:
            return
        for (ns, name), obj in list(self.quotas.items()):
            hard = dict(obj["spec"].get("hard") or {})
            if (obj.get("status") or {}).get("hard") != hard:

                def status(o: JSON, hard: dict[str, Any] = hard) -> None:
                    o.setdefault("status", {})["hard"] = hard

                self.api.update(f"{PREFIX}{ns}/resourcequotas/{name}", status)
        self.fleet.check()

    def tamper(
        self, method: str, ns: str, name: str, hard: Mapping[str, str] | None = None
    ) -> None:
        """A member admin deletes (DELETE) or edits (PUT: spec.hard := hard) a ResourceQuota
        directly; the quota controller follows an edit at once."""
        path = f"{PREFIX}{ns}/resourcequotas/{name}"
        if method == "DELETE":
            self.api.delete(path)
            return
        assert hard is not None
        self.api.update(path, lambda o: o["spec"].update(hard=dict(hard)))
        if not self.lag:
            self.api.update(path, lambda o: o.setdefault("status", {}).update(hard=dict(hard)))

    def _key(self, path: str) -> tuple[str, str | None]:
        assert path.startswith(PREFIX), path
        parts = path[len(PREFIX) :].split("/")
        assert parts[1] == "resourcequotas", path
        return parts[0], parts[2] if len(parts) > 2 else None

    # ---- the client (KubeClient's interface): what the guard keeper and its watch call ----

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        return self.serve(method, path, body, params, content_type)

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return self.serve("GET", path, None, params)

    async def close(self) -> None:
        return None

    def serve(
        self,
        method: str,
        path: str,
        body: JSON | None,
        params: Mapping[str, str] | None,
        content_type: str = "application/json",
    ) -> JSON:
        """Any request: a guard's by name (`handle`), or the keeper's other requests."""
        if path.startswith(PREFIX):
            return self.handle(method, path, body, content_type)
        self.fleet.requests.append((self.name, method, path))
        if self.down:
            raise OSError(f"connect {self.name}: connection refused")
        for needle in self.forbid:
            if needle in path:
                raise KubeError(403, "Forbidden", f"{path} is forbidden for {self.identity}")
        if path == gp.GROUP_PATH:
            if self.minor < 30:
                raise NotFound(404, "NotFound", "the server could not find the requested resource")
            return {"kind": "APIResourceList", "resources": [{"name": n} for n in VAP_RESOURCES]}
        if path == gp.SELF_SUBJECT_REVIEWS and method == "POST":
            return {**(body or {}), "status": {"userInfo": {"username": self.identity}}}
        assert path.startswith((gp.POLICIES, gp.BINDINGS, "/api/v1/resourcequotas")), path
        return self.api.handle(method, _parse(path), body, params or {}, "application/json")

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        self.fleet.requests.append((self.name, "WATCH", path.split("?")[0]))
        if self.down:
            raise OSError(f"connect {self.name}: connection refused")
        async for event in self.api.watch(path, resource_version, timeout_seconds):
            yield event

    def handle(
        self, method: str, path: str, body: JSON | None, content_type: str = "application/json"
    ) -> JSON:
        """A guard's request: the member's API server (the FakeApiServer's rules), then its
        quota controller."""
        self.fleet.requests.append((self.name, method, path))
        if self.down:
            raise OSError(f"connect {self.name}: connection refused")
        ns = self._key(path)[0]
        if self.namespaces is not None and ns not in self.namespaces:
            raise NotFound(404, "NotFound", f'namespaces "{ns}" not found')
        if method == "GET" and self.lag:
            self.sync_status()
        if method == "POST" and ("", ns) not in self.api.objects(NAMESPACES):
            self.api.create("/api/v1/namespaces", {"metadata": {"name": ns}})  # it exists
        result = self.api.handle(method, _parse(path), body, {}, content_type)
        self.fleet.check()  # before the quota controller: the spec alone must fit
        if method in ("POST", "PUT") and not self.lag and not self.stuck:
            key_name = result["metadata"]["name"]
            self.api.update(
                f"{PREFIX}{ns}/resourcequotas/{key_name}",
                lambda o: o.setdefault("status", {}).update(hard=dict(o["spec"].get("hard") or {})),
            )
            self.fleet.check()
            result = copy.deepcopy(self.quotas[(ns, key_name)])
        if method != "GET" and self.lose_replies > 0:
            self.lose_replies -= 1
            raise TimeoutError(f"{self.name}: the reply was lost")
        return result


class Fleet:
    """Every fake member, the global hard to hold them to, and the requests they saw."""

    def __init__(
        self,
        names: list[str],
        hard: Mapping[str, int],
        lag: bool = False,
        pull: Collection[str] = (),
        agent_lag: bool = False,
    ) -> None:
        self.hard = dict(hard)  # nano-units
        self.members = {n: FakeMember(self, n, lag) for n in names}
        self.requests: list[tuple[str, str, str]] = []
        self.worst: dict[str, int] = {}  # the largest Σ seen per name
        self.pull = set(pull)
        self.agent_lag = agent_lag
        self.karmada = FakeApiServer()
        for name in self.pull:
            self.karmada.create("/api/v1/namespaces", {"metadata": {"name": f"karmada-es-{name}"}})

    # ---- karmada-apiserver and karmada-agent (Pull-mode members) ----------------------------

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        """karmada-apiserver, as the guard keeper's Works reach it."""
        self.requests.append(("karmada", method, path))
        try:
            return await self.karmada.request(method, path, body, params, timeout, content_type)
        finally:
            if method != "GET" and not self.agent_lag:
                for name in sorted(self.pull):
                    self.carry(name)

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    def works(self, member: str) -> dict[str, JSON]:
        return {
            name: obj
            for (ns, name), obj in self.karmada.objects(WORKS).items()
            if ns == f"karmada-es-{member}"
        }

    def carry(self, member: str, reflect: bool = True) -> None:
        """karmada-agent of a Pull member: apply its Works (a deleted one's ResourceQuota
        removed, then Karmada's finalizer), then reflect each ResourceQuota's status."""
        m = self.members[member]
        for name, work in self.works(member).items():
            path = f"/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{member}/works/{name}"
            manifest = work["spec"]["workload"]["manifests"][0]
            ns, rq = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
            rq_path = f"{PREFIX}{ns}/resourcequotas/{rq}"
            if work["metadata"].get("deletionTimestamp"):
                if (ns, rq) in m.quotas:
                    m.api.delete(rq_path)
                self.karmada.update(path, lambda o: o["metadata"].update(finalizers=[]))
                continue
            if (ns, rq) in m.quotas:

                def apply(o: JSON, manifest: JSON = manifest) -> None:
                    o["spec"] = copy.deepcopy(manifest["spec"])
                    o["metadata"]["labels"] = dict(manifest["metadata"].get("labels") or {})

                m.api.update(rq_path, apply)
            else:
                if ("", ns) not in m.api.objects(NAMESPACES):
                    m.api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
                m.api.create(f"{PREFIX}{ns}/resourcequotas", copy.deepcopy(manifest))
            self.check()
            m.sync_status()  # its quota controller (unless stuck)
            if reflect:
                self.reflect(member, name)

    def reflect(self, member: str, work: str) -> None:
        """The agent's work status controller: the ResourceQuota's status into its Work."""
        manifest = self.works(member)[work]["spec"]["workload"]["manifests"][0]
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        rq = self.members[member].quotas.get(key)
        if rq is None or "status" not in rq:
            return
        entry = {
            "identifier": {"ordinal": 0, "version": "v1", "kind": "ResourceQuota"},
            "status": copy.deepcopy(rq["status"]),
        }
        applied = {"type": "Applied", "status": "True", "reason": "AppliedSuccessful"}
        self.karmada.update(
            f"/apis/work.karmada.io/v1alpha1/namespaces/karmada-es-{member}/works/{work}",
            lambda o: o.update(status={"manifestStatuses": [entry], "conditions": [applied]}),
        )

    def check(self) -> None:
        for name, limit in self.hard.items():
            total = sum(
                may_hold(obj).get(name, 0)
                for m in self.members.values()
                for obj in m.quotas.values()
            )
            self.worst[name] = max(self.worst.get(name, 0), total)
            assert total <= limit, f"Σ guards of {name} = {total} > hard {limit}"

    def guard(self, member: str, ns: str, quota: KarmadaQuota | str) -> JSON | None:
        from karmadaquota.controller.guard_keeper import guard_name

        name = quota if isinstance(quota, str) else quota.metadata.name
        return self.members[member].quotas.get((ns, guard_name(name)))

    def factory(self, host: str, token: str, ca: bytes | None, insecure: bool) -> Any:
        return self.members[host.removeprefix("https://")]

    def cluster(self, name: str) -> JSON:
        if name in self.pull:
            return {"metadata": {"name": name}, "spec": {"syncMode": "Pull"}}
        return {
            "metadata": {"name": name},
            "spec": {
                "apiEndpoint": f"https://{name}",
                "secretRef": {"namespace": "karmada-cluster", "name": name},
            },
        }

    def registry(self) -> Members:
        """Members (no pod watches) whose clients reach these fakes."""

        async def secrets(ns: str, name: str) -> JSON:
            return {"data": {"token": "dG9rZW4="}}

        members = Members(secrets, lambda _: None, enabled=False, client_factory=self.factory)
        for name in self.members:
            members.apply(self.cluster(name))
        return members
