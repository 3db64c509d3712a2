"""Guards watched and protected (controller.guard_watch, guard_keeper's watch, guard_policy).

The keeper runs its real informers against fake members built on the one fake API server
(tests/fake_members.py): a guard a member admin deletes or raises is put back from the watch's
event — never from the periodic re-read, which these tests push out of reach — and the
admission policy is installed, kept and reported per member.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller import guard_policy as gp
from karmadaquota.controller import guards as gd
from karmadaquota.controller.guard_keeper import (
    GUARD_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    GuardKeeper,
    guard_name,
)
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.kube.client import JSON
from karmadaquota.quantity import NANO
from tests.fake_members import PREFIX, FakeMember, Fleet
from tests.polling import until

NS = "team-a"
MEMBERS = ["member1", "member2"]
P = "pods"
GUARD = guard_name("team")


def kq() -> KarmadaQuota:
    return KarmadaQuota.model_validate(
        {
            "metadata": {"name": "team", "namespace": NS, "uid": "kq-uid"},
            "spec": {"hard": {"pods": "4"}, "memberEnforcement": "ResourceQuota"},
        }
    )


INPUTS = gd.GuardInputs(hard={P: 4 * NANO}, members=[gd.MemberState(m) for m in MEMBERS])


def sample(k: GuardKeeper, name: str, **labels: str) -> float:
    assert k.metrics is not None
    got = k.metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


class Env:
    """A keeper watching the fleet; `on_change` runs a sync as the reconciler's queue does."""

    def __init__(self, fleet: Fleet, k: GuardKeeper) -> None:
        self.fleet = fleet
        self.k = k
        self.changes: list[str] = []
        self.syncs: list[asyncio.Task[Any]] = []
        k.on_change = self.changed

    def changed(self, namespace: str) -> None:
        self.changes.append(namespace)
        self.syncs.append(asyncio.create_task(self.k.sync(kq(), INPUTS)))

    def guard(self, member: str) -> Mapping[str, Any] | None:
        return self.fleet.guard(member, NS, "team")

    def pods(self, member: str) -> str | None:
        g = self.guard(member)
        return None if g is None else str(g["spec"]["hard"][P])


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    # a re-read period no test reaches: every restoration comes from the watch
    k = GuardKeeper(
        fleet.registry(), ControllerMetrics(), poll=0.0, watch=True, reread_period=3600.0
    )
    e = Env(fleet, k)
    try:
        await k.sync(kq(), INPUTS)
        assert {m: e.pods(m) for m in MEMBERS} == {"member1": "2", "member2": "2"}
        await until(lambda: all(k.watches is not None and k.watches.synced(m) for m in MEMBERS))
        yield e
    finally:
        await k.close()
        await asyncio.gather(*e.syncs, return_exceptions=True)


async def test_a_guard_deleted_by_a_member_admin_is_put_back_from_the_watch(env: Env) -> None:
    env.fleet.members["member2"].tamper("DELETE", NS, GUARD)
    assert env.guard("member2") is None
    await until(lambda: env.pods("member2") == "2", 2.0, "member2's guard restored")
    assert env.changes == [NS]
    assert sample(env.k, "karmadaquota_guard_restores_total", member_cluster="member2",
                  change="deleted") == 1  # fmt: skip
    await until(lambda: all(t.done() for t in env.syncs))
    assert env.pods("member1") == "2"


async def test_a_guard_raised_by_a_member_admin_is_lowered_back(env: Env) -> None:
    env.fleet.hard = {P: 100 * NANO}  # the admin's raise breaks Σ ≤ hard itself
    env.fleet.members["member1"].tamper("PUT", NS, GUARD, {P: "50"})
    await until(lambda: env.pods("member1") == "2", 2.0, "member1's guard lowered back")
    g = env.guard("member1")
    assert g is not None and g["status"]["hard"] == {P: "2"}  # and enforced
    assert sample(env.k, "karmadaquota_guard_restores_total", member_cluster="member1",
                  change="changed") == 1  # fmt: skip


async def test_a_guard_relabelled_by_a_member_admin_is_no_longer_ours_and_is_reported(
    env: Env,
) -> None:
    m = env.fleet.members["member2"]
    m.api.update(
        f"{PREFIX}{NS}/resourcequotas/{GUARD}",
        lambda o: o["metadata"]["labels"].pop(MANAGED_BY_LABEL),
    )
    await until(lambda: "member2" in env.k.problems(NS, "team"), 2.0, "reported")
    assert "not managed by karmadaquota" in env.k.problems(NS, "team")["member2"]
    assert env.k.errors == {}  # the member is not taken for unreachable


async def test_our_own_writes_are_not_taken_for_another_writer(env: Env) -> None:
    moved = gd.GuardInputs(
        hard={P: 4 * NANO},
        members=[gd.MemberState("member1", usage={P: 3 * NANO}), gd.MemberState("member2")],
    )
    await env.k.sync(kq(), moved)
    assert env.pods("member1") == "4" and env.pods("member2") == "0"  # lowered, then raised
    env.fleet.members["member1"].sync_status()  # status events of the quota controller
    await until(lambda: env.fleet.members["member1"].api.drained(), 2.0)
    await until(lambda: env.fleet.members["member2"].api.drained(), 2.0)
    assert env.changes == []
    assert sample(env.k, "karmadaquota_guard_restores_total", member_cluster="member1",
                  change="changed") == 0  # fmt: skip


async def test_a_resource_quota_labelled_ours_under_another_name_is_left_alone(
    env: Env,
) -> None:
    m = env.fleet.members["member1"]
    m.api.create(
        f"{PREFIX}{NS}/resourcequotas",
        {
            "metadata": {
                "name": "planted",
                "namespace": NS,
                "labels": {GUARD_LABEL: "team", MANAGED_BY_LABEL: MANAGED_BY},
            },
            "spec": {"hard": {P: "100"}},
        },
    )
    await until(lambda: m.api.drained(), 2.0)
    assert env.changes == []
    # a ResourceQuota can only refuse more: nothing of ours counts it
    await env.k.sync(kq(), INPUTS)
    assert env.pods("member1") == "2"


async def test_the_policy_names_the_identity_a_self_subject_review_gives(env: Env) -> None:
    k, fleet = env.k, env.fleet
    await until(lambda: k.protection() == {"member1": "", "member2": ""}, 2.0, "protected")
    for name, member in fleet.members.items():
        policy = member.policy()
        assert policy is not None
        validation = policy["spec"]["validations"][0]
        assert validation["expression"].startswith(
            f"request.userInfo.username == 'system:karmada:{name}' ||"
        )
        assert policy["spec"]["failurePolicy"] == "Fail"
        binding = member.api.get_object(f"{gp.BINDINGS}/{gp.POLICY_NAME}")
        assert binding["spec"] == {"policyName": gp.POLICY_NAME, "validationActions": ["Deny"]}
        assert sample(k, "karmadaquota_member_guards_protected", member_cluster=name) == 1


async def test_a_policy_a_member_admin_deleted_or_loosened_is_put_back() -> None:
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    k = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, watch=True,
                    protect_period=0.05)  # fmt: skip
    try:
        await k.sync(kq(), INPUTS)
        m = fleet.members["member1"]
        await until(lambda: m.policy() is not None, 2.0)
        m.api.delete(f"{gp.POLICIES}/{gp.POLICY_NAME}")
        await until(lambda: m.policy() is not None, 2.0, "the policy re-installed")
        m.api.update(
            f"{gp.POLICIES}/{gp.POLICY_NAME}",
            lambda o: o["spec"]["validations"][0].update(expression="true"),
        )

        def tightened() -> bool:
            p = m.policy()
            return p is not None and p["spec"]["validations"][0]["expression"] != "true"

        await until(tightened, 2.0, "the policy's expression put back")
    finally:
        await k.close()


async def test_a_member_below_1_30_is_watched_and_restored_only_and_says_so() -> None:
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    fleet.members["member2"].minor = 29
    k = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, watch=True)
    try:
        await k.sync(kq(), INPUTS)
        await until(lambda: set(k.protection()) == set(MEMBERS), 2.0)
        assert k.protection()["member1"] == ""
        assert "Kubernetes < 1.30" in k.protection()["member2"]
        assert sample(k, "karmadaquota_member_guards_protected", member_cluster="member2") == 0
        assert fleet.members["member2"].policy() is None
        # nothing but discovery was asked of it about policies
        asked = {p for c, _, p in fleet.requests if c == "member2" and "admissionreg" in p}
        assert asked == {gp.GROUP_PATH}
    finally:
        await k.close()


async def test_a_credential_not_allowed_to_install_the_policy_is_reported() -> None:
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    fleet.members["member1"].forbid = {gp.POLICIES}
    k = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, watch=True)
    try:
        await k.sync(kq(), INPUTS)
        await until(lambda: set(k.protection()) == set(MEMBERS), 2.0)
        assert k.protection()["member1"].startswith("not allowed to install")
        assert k.protection()["member2"] == ""
    finally:
        await k.close()


async def test_a_guard_deleted_before_the_answer_of_its_write_is_read_is_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restore's answer (the guard as written) read after the watch's event of its
    deletion must not make the keeper believe the guard is there: the next sync restores it
    (issue 28's e2e: a guard deleted 1 ms after it was put back stayed deleted)."""
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    m = fleet.members["member2"]
    k = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, watch=True,
                    reread_period=3600.0)  # fmt: skip
    changes: list[str] = []
    k.on_change = changes.append  # the syncs are run by hand, one at a time, as a queue does
    original = FakeMember.request
    raced: list[bool] = []

    async def request(self: FakeMember, method: str, path: str, *a: Any, **kw: Any) -> JSON:
        answer = await original(self, method, path, *a, **kw)
        if self is m and method == "POST" and changes and not raced:
            raced.append(True)
            m.tamper("DELETE", NS, GUARD)  # deleted again before the keeper reads the answer
            await until(lambda: len(changes) == 2, 2.0, "the watch delivered the deletion")
        return answer

    try:
        await k.sync(kq(), INPUTS)
        await until(lambda: k.watches is not None and k.watches.synced("member2"), 2.0)
        monkeypatch.setattr(FakeMember, "request", request)
        m.tamper("DELETE", NS, GUARD)
        await until(lambda: changes == [NS], 2.0, "the deletion seen")
        await k.sync(kq(), INPUTS)  # puts it back; deleted again before the answer is read
        assert raced and fleet.guard("member2", NS, "team") is None
        await k.sync(kq(), INPUTS)  # the sync the second deletion asked for
        g = fleet.guard("member2", NS, "team")
        assert g is not None and g["spec"]["hard"] == {P: "2"}
    finally:
        await k.close()


async def test_without_the_watch_the_guards_are_read_again_each_period() -> None:
    """The fallback (a member whose guards cannot be listed): a deleted guard is found by the
    periodic re-read, not at once."""
    fleet = Fleet(MEMBERS, {P: 4 * NANO})
    fleet.members["member2"].forbid = {"/api/v1/resourcequotas"}
    now = [1000.0]
    k = GuardKeeper(fleet.registry(), ControllerMetrics(), poll=0.0, watch=True,
                    clock=lambda: now[0])  # fmt: skip
    changes: list[str] = []
    k.on_change = changes.append
    try:
        await k.sync(kq(), INPUTS)
        await until(lambda: k.watches is not None and k.watches.synced("member1"), 2.0)
        assert k.watches is not None and not k.watches.synced("member2")
        fleet.members["member2"].tamper("DELETE", NS, GUARD)
        await k.sync(kq(), INPUTS)
        assert fleet.guard("member2", NS, "team") is None  # not seen yet
        now[0] += 61
        await k.sync(kq(), INPUTS)
        assert fleet.guard("member2", NS, "team") is not None
        assert changes == []
    finally:
        await k.close()


# ---- the rendered policy (pure) -------------------------------------------------------------


def test_the_identity_is_quoted_as_a_cel_string() -> None:
    assert gp.cel_string("system:serviceaccount:a:b") == "'system:serviceaccount:a:b'"
    assert gp.cel_string("o'neil\\x") == "'o\\'neil\\\\x'"
    with pytest.raises(gp.IdentityError, match="control characters"):
        gp.cel_string("a\nb")
    with pytest.raises(gp.IdentityError, match="empty"):
        gp.cel_string("")


def test_the_policy_matches_guard_writes_by_label_and_lets_a_terminating_namespace_go() -> None:
    p = gp.policy("me")
    constraints = p["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourcequotas"],  # not resourcequotas/status: the quota controller
        }
    ]
    assert constraints["objectSelector"] == {
        "matchExpressions": [{"key": GUARD_LABEL, "operator": "Exists"}]
    }
    assert gp.expression("me") == (
        "request.userInfo.username == 'me' || (request.operation == 'DELETE' && "
        "has(namespaceObject.metadata.deletionTimestamp))"
    )
    assert gp.binding()["spec"]["policyName"] == p["metadata"]["name"]


def test_a_stored_policy_with_server_defaults_is_up_to_date_and_a_changed_one_is_not() -> None:
    want = gp.policy("me")
    stored = {**want, "spec": {**want["spec"], "auditAnnotations": None, "variables": None}}
    stored["spec"]["matchConstraints"] = {
        **want["spec"]["matchConstraints"],
        "matchPolicy": "Equivalent",
        "namespaceSelector": {},
    }
    assert gp.up_to_date(stored, want)
    other = gp.policy("someone-else")
    assert not gp.up_to_date(other, want)
    assert not gp.up_to_date(None, want)
    assert (
        gp.replacing({"metadata": {"resourceVersion": "7"}}, want)["metadata"]["resourceVersion"]
        == "7"
    )


def test_discovery_decides_whether_a_member_serves_the_policy() -> None:
    names = ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
    assert gp.supports_policy({"resources": [{"name": n} for n in names]})
    assert not gp.supports_policy({"resources": [{"name": "validatingwebhookconfigurations"}]})
    assert not gp.supports_policy({})


async def test_the_watch_and_the_policy_ask_only_what_docs_security_lists(env: Env) -> None:
    await until(lambda: set(env.k.protection()) == set(MEMBERS), 2.0)
    env.fleet.members["member2"].tamper("DELETE", NS, GUARD)
    await until(lambda: env.pods("member2") == "2", 2.0)
    await env.k.remove(kq())
    asked = {(verb, path) for _, verb, path in env.fleet.requests}
    guards = f"{PREFIX}{NS}/resourcequotas"
    allowed = {
        ("GET", f"{guards}/{GUARD}"),
        ("POST", guards),
        ("PUT", f"{guards}/{GUARD}"),
        ("DELETE", f"{guards}/{GUARD}"),
        ("GET", "/api/v1/resourcequotas"),  # list, by label
        ("WATCH", "/api/v1/resourcequotas"),  # watch, by label
        ("GET", gp.GROUP_PATH),  # discovery
        ("POST", gp.SELF_SUBJECT_REVIEWS),
        ("GET", f"{gp.POLICIES}/{gp.POLICY_NAME}"),
        ("POST", gp.POLICIES),
        ("GET", f"{gp.BINDINGS}/{gp.POLICY_NAME}"),
        ("POST", gp.BINDINGS),
    }
    allowed |= {
        ("PUT", f"{gp.POLICIES}/{gp.POLICY_NAME}"),  # put back as it should be
        ("PUT", f"{gp.BINDINGS}/{gp.POLICY_NAME}"),
    }
    assert asked <= allowed, asked - allowed
    assert ("WATCH", "/api/v1/resourcequotas") in asked
