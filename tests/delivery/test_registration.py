"""The ResourceBinding webhook's matchConditions send every change but the status's.

An UPDATE that skipped admission would be neither charged nor checked for its writer
(karmadaquota.trust: an untrusted writer may change nothing of a binding in a namespace with a
quota but its status — issue 29's routes changed `requiredBy`, `replicaRequirements`,
`gracefulEvictionTasks`; issue 34's relabelled `resourcebinding.karmada.io/permanent-id`).
Status-only and no-op updates stay unsent. (tests/delivery/test_chart.py checks the chart
registers the same conditions; every e2e test registers them from this manifest, and
e2e/test_webhook.py::test_status_and_no_op_updates_never_reach_the_webhook has karmada-apiserver
evaluate them.)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from karmadaquota import queued, trust

REPO = Path(__file__).resolve().parents[2]


def binding_webhook() -> dict[str, object]:
    doc = yaml.safe_load((REPO / "webhook/karmada/validatingwebhookconfiguration.yaml").read_text())
    hook: dict[str, object] = next(
        w for w in doc["webhooks"] if w["name"] == "resourcebinding.quota.karmada.io"
    )
    return hook


def expression(name: str = "changed-beyond-status") -> str:
    conditions = binding_webhook()["matchConditions"]
    assert [c["name"] for c in conditions] == [  # type: ignore[attr-defined]
        "changed-beyond-status",
        "not-a-cluster-admins-metadata-update",
    ]
    (condition,) = [c for c in conditions if c["name"] == name]  # type: ignore[attr-defined]
    return str(condition["expression"])


def server_written() -> str:
    """trust.SERVER_WRITTEN as the expression's list literal, in the manifest's order."""
    listed = re.findall(r"!\(k in \[([^]]*)\]\)", expression())
    assert len(listed) == 2 and listed[0] == listed[1], listed
    names = re.findall(r"'([^']+)'", listed[0])
    assert set(names) == trust.SERVER_WRITTEN and len(names) == len(trust.SERVER_WRITTEN)
    return listed[0]


def test_every_field_but_the_status_and_what_the_api_server_writes_is_compared() -> None:
    """Any top-level field but `metadata` and `status`, and any metadata field (labels,
    annotations, finalizers, owner references, ...) but exactly those karmadaquota.trust lets
    an untrusted writer's review differ in, in either direction: a field Karmada adds tomorrow
    is sent, not skipped. Nothing else narrows the condition."""
    top = f"k != 'metadata' && k != '{trust.STATUS}'"
    meta = f"!(k in [{server_written()}])"
    assert expression() == " || ".join(
        [
            "request.operation != 'UPDATE'",
            f"object.exists(k, {top} && (!(k in oldObject) || object[k] != oldObject[k]))",
            f"oldObject.exists(k, {top} && !(k in object))",
            f"object.metadata.exists(k, {meta} && (!(k in oldObject.metadata) || "
            "object.metadata[k] != oldObject.metadata[k]))",
            f"oldObject.metadata.exists(k, {meta} && !(k in object.metadata))",
        ]
    )


def test_creates_are_always_sent() -> None:
    """CREATE and UPDATE are the registered operations; the condition lets every CREATE through
    (its first clause), so a new binding is always charged."""
    hook = binding_webhook()
    (rule,) = hook["rules"]  # type: ignore[misc]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["resources"] == ["resourcebindings"]  # not the status subresource


def test_only_a_cluster_admins_update_of_metadata_alone_is_not_sent() -> None:
    """Karmada's controllers (system:masters) add a finalizer after each create and remove it
    on deletion: the webhook allows a trusted writer's metadata-only update at once, so it is
    not sent (a webhook outage must not hold deletions up). Anything else of theirs is: a
    change beyond the metadata (their spec is charged), or of the queue annotation (a queued
    binding is charged nothing). Everyone else's metadata change is sent (the first
    condition), however trusted the webhook's flags make them."""
    top = f"k != 'metadata' && k != '{trust.STATUS}'"

    def queued_by(obj: str) -> str:
        a = f"{obj}.metadata.annotations"
        return f"(has({a}) && '{queued.ANNOTATION}' in {a} ? {a}['{queued.ANNOTATION}'] : '')"

    assert expression("not-a-cluster-admins-metadata-update") == " || ".join(
        [
            "request.operation != 'UPDATE'",
            "!('system:masters' in request.userInfo.groups)",
            f"object.exists(k, {top} && (!(k in oldObject) || object[k] != oldObject[k]))",
            f"oldObject.exists(k, {top} && !(k in object))",
            f"{queued_by('object')} != {queued_by('oldObject')}",
        ]
    )
