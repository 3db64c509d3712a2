"""Fake member API servers holding ResourceQuotas, for the member guards' unit tests.

Each `FakeMember` is one `tests.fake_api.FakeApiServer` (etcd's rules: a resourceVersion
counter, PUT is a compare-and-swap, POST of an existing name is 409; lists and watches by
label, so the keeper's guard informer runs against it) and plays the member's quota controller,
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
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import guard_policy as gp
from karmadaquota.controller.guard_keeper import may_hold
from karmadaquota.controller.members import Members
from karmadaquota.kube.client import JSON, Conflict, KubeError, NotFound
from tests.fake_api import FakeApiServer
from tests.fake_api import parse as _parse

PREFIX = "/api/v1/namespaces/"
RQ = ("/api/v1", "resourcequotas")
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

    def serve(
        self, method: str, path: str, body: JSON | None, params: Mapping[str, str] | None
    ) -> JSON:
        """Any request: a guard's by name (`handle`), or the keeper's other requests."""
        if path.startswith(PREFIX):
            return self.handle(method, path, body)
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

    def handle(self, method: str, path: str, body: JSON | None) -> JSON:
        self.fleet.requests.append((self.name, method, path))
        if self.down:
            raise OSError(f"connect {self.name}: connection refused")
        ns, name = self._key(path)
        if self.namespaces is not None and ns not in self.namespaces:
            raise NotFound(404, "NotFound", f'namespaces "{ns}" not found')
        result = self._apply(method, ns, name, body)
        if method != "GET" and self.lose_replies > 0:
            self.lose_replies -= 1
            raise TimeoutError(f"{self.name}: the reply was lost")
        return result

    def _apply(self, method: str, ns: str, name: str | None, body: JSON | None) -> JSON:
        if method == "GET":
            assert name is not None
            if self.lag:
                self.sync_status()
            obj = self.quotas.get((ns, name))
            if obj is None:
                raise NotFound(404, "NotFound", f'resourcequotas "{name}" not found')
            return copy.deepcopy(obj)
        if method == "POST":
            assert body is not None
            key = (ns, body["metadata"]["name"])
            if key in self.quotas:
                raise Conflict(409, "AlreadyExists", "already exists")
            obj = copy.deepcopy(body)
            obj.pop("status", None)
            obj["metadata"]["namespace"] = ns
            self.api.create(f"{PREFIX}{ns}/resourcequotas", obj)
            key_name = key[1]
        elif method == "PUT":
            assert body is not None and name is not None
            have = self.quotas.get((ns, name))
            if have is None:
                raise NotFound(404, "NotFound", "gone")
            if body["metadata"].get("resourceVersion") != have["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(body)
            obj["status"] = copy.deepcopy(have.get("status") or {})  # PUT never writes status
            obj["metadata"]["uid"] = have["metadata"]["uid"]

            def replace(o: JSON, obj: JSON = obj) -> None:
                o.clear()
                o.update(obj)

            self.api.update(f"{PREFIX}{ns}/resourcequotas/{name}", replace)
            key_name = name
        elif method == "DELETE":
            assert name is not None
            if (ns, name) not in self.quotas:
                raise NotFound(404, "NotFound", "gone")
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid and uid != self.quotas[(ns, name)]["metadata"]["uid"]:
                raise Conflict(409, "Conflict", "uid precondition")
            self.api.delete(f"{PREFIX}{ns}/resourcequotas/{name}")
            self.fleet.check()
            return {"kind": "Status", "status": "Success"}
        else:
            raise KubeError(405, "MethodNotAllowed", method)
        self.fleet.check()  # before the quota controller: the spec alone must fit
        path = f"{PREFIX}{ns}/resourcequotas/{key_name}"
        if not self.lag and not self.stuck:
            self.api.update(
                path,
                lambda o: o.setdefault("status", {}).update(hard=dict(o["spec"].get("hard") or {})),
            )
            self.fleet.check()
        return copy.deepcopy(self.quotas[(ns, key_name)])


class FakeMemberClient:
    def __init__(self, member: FakeMember) -> None:
        self.member = member

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        return self.member.serve(method, path, body, params)

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return self.member.serve("GET", path, None, params)

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        return self.member.watch(path, resource_version, timeout_seconds)

    async def close(self) -> None:
        return None


class Fleet:
    """Every fake member, the global hard to hold them to, and the requests they saw."""

    def __init__(self, names: list[str], hard: Mapping[str, int], lag: bool = False) -> None:
        self.hard = dict(hard)  # nano-units
        self.members = {n: FakeMember(self, n, lag) for n in names}
        self.requests: list[tuple[str, str, str]] = []
        self.worst: dict[str, int] = {}  # the largest Σ seen per name

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
        return FakeMemberClient(self.members[host.removeprefix("https://")])

    def cluster(self, name: str) -> JSON:
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
