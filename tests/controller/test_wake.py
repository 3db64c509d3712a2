"""The controller's waker: patches what fits, drops what is gone, touches only its kinds."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from karmadaquota import waiting
from karmadaquota.api import KarmadaQuota, ObjectReference
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.wake import Kind, WakeConfig, Waker, kinds
from karmadaquota.kube.client import Body
from karmadaquota.scopes import BindingTraits
from karmadaquota.times import format_time
from tests.conftest import NOW, rl
from tests.fake_api import FakeApiServer

TRAITS = BindingTraits(has_replicas=True, best_effort=False, priority_class="")


def templates(
    *names: str, kind: str = "deployments", namespace: str = "ns", api: FakeApiServer | None = None
) -> FakeApiServer:
    """The fake API server holding workload templates `names` (uid `uid-<name>`)."""
    api = api or FakeApiServer()
    for n in names:
        api.create(
            f"/apis/apps/v1/namespaces/{namespace}/{kind}",
            {"metadata": {"name": n, "namespace": namespace, "uid": f"uid-{n}"}},
        )
    return api


def patches(api: FakeApiServer) -> list[tuple[str, Body]]:
    """The merge patches of templates, in order (path, body)."""
    return [(p, b) for m, p, b in api.writes if m == "PATCH" and p.startswith("/apis/apps/")]


def patched(api: FakeApiServer) -> list[str]:
    """The names of the templates patched, in order."""
    return [p.rsplit("/", 1)[1] for p, _ in patches(api)]


def quota(
    used: int, hard: int = 4, asks: Mapping[str, int] | None = None, kind: str = "Deployment"
) -> KarmadaQuota:
    refusals = [
        waiting.Refusal(
            template=ObjectReference(
                apiVersion="apps/v1", kind=kind, name=n, namespace="ns", uid=f"uid-{n}"
            ),
            binding=f"{n}-deployment",
            binding_uid=f"rb-{n}",
            requested=rl(pods=str(p)),
            traits=TRAITS,
            quota="team",
            at=NOW + timedelta(seconds=i),
        )
        for i, (n, p) in enumerate((asks or {}).items())
    ]
    raw: dict[str, Any] = {
        "metadata": {"name": "team", "namespace": "ns"},
        "spec": {"hard": {"pods": str(hard)}},
        "status": {
            "used": {"pods": str(used)},
            "waiting": [w.model_dump() for w in waiting.record([], refusals)],
        },
    }
    return KarmadaQuota.model_validate(raw)


def waker(api: FakeApiServer, **kw: Any) -> Waker:
    return Waker(api, ControllerMetrics(), WakeConfig(**kw))


async def test_wakes_in_order_what_fits_with_the_annotation_and_a_uid_precondition() -> None:
    api = templates("x", "y", "z")
    w = waker(api)
    q = quota(used=2, asks={"x": 2, "y": 2, "z": 1})
    await w.wake("ns", [q], NOW)
    assert patched(api) == ["x"]
    body = patches(api)[0][1]
    assert isinstance(body, dict)
    assert body["metadata"]["uid"] == "uid-x"
    assert body["metadata"]["annotations"] == {waiting.ANNOTATION: format_time(NOW, micro=True)}
    assert w.metrics.waiting._value.get() == 3
    # same state again (x not admitted yet): x holds its room, nobody else is woken
    await w.wake("ns", [q], NOW)
    assert patched(api) == ["x"]


async def test_more_room_wakes_the_next_ones_once() -> None:
    api = templates("x", "y", "z")
    w = waker(api)
    await w.wake("ns", [quota(used=2, asks={"x": 2, "y": 2, "z": 2})], NOW)
    # x admitted and off the list; two more pods of room: y only (z still does not fit)
    await w.wake("ns", [quota(used=4, hard=6, asks={"y": 2, "z": 2})], NOW)
    assert patched(api) == ["x", "y"]


async def test_a_deleted_template_leaves_the_list() -> None:
    api = templates("y")
    w = waker(api)
    again = await w.wake("ns", [quota(used=0, asks={"x": 1, "y": 9})], NOW)
    assert w.gone("ns", "uid-x")  # the patch answered 404
    assert again is not None  # come back at once to write the list without x
    assert patched(api) == []


async def test_an_audit_finds_templates_deleted_while_they_wait() -> None:
    api = templates("big")
    w = waker(api, audit_period=0.0)
    await w.wake("ns", [quota(used=4, asks={"big": 2})], NOW)
    assert not w.gone("ns", "uid-big")
    api.delete("/apis/apps/v1/namespaces/ns/deployments/big")
    await w.wake("ns", [quota(used=4, asks={"big": 2})], NOW)
    assert w.gone("ns", "uid-big")
    # once written away (no quota lists it), it is forgotten
    await w.wake("ns", [quota(used=4)], NOW)
    assert not w.gone("ns", "uid-big")


async def test_kinds_not_configured_are_never_touched() -> None:
    api = templates("job", kind="jobs")
    w = waker(api, audit_period=0.0)
    await w.wake("ns", [quota(used=0, asks={"job": 1}, kind="Job")], NOW)
    assert patches(api) == [] and api.calls["GET jobs"] == 0 and api.writes == []


async def test_a_deleted_quota_wakes_its_waiting_workloads() -> None:
    api = templates("x")
    w = waker(api)
    w.quota_deleted(quota(used=4, asks={"x": 3}))
    await w.wake("ns", [], NOW)
    assert patched(api) == ["x"]


def test_kind_flag_values() -> None:
    assert kinds(["apps/Deployment", "batch/CronJob", "/Pod", "x.io/Mouse=mice"]) == (
        Kind("apps", "Deployment", "deployments"),
        Kind("batch", "CronJob", "cronjobs"),
        Kind("", "Pod", "pods"),
        Kind("x.io", "Mouse", "mice"),
    )
    for bad in ("Deployment", "apps/deployment", "apps/", "a/b/C"):
        with pytest.raises(ValueError, match="invalid kind"):
            Kind.parse(bad)
