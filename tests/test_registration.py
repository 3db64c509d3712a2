"""The ResourceBinding webhook's matchConditions send every change but the status's.

An UPDATE that skipped admission would be neither charged nor checked for its writer
(karmadaquota.trust: an untrusted writer may change nothing of a binding in a namespace with a
quota but its status — issue 29's routes changed `requiredBy`, `replicaRequirements`,
`gracefulEvictionTasks`; issue 34's relabelled `resourcebinding.karmada.io/permanent-id`).
Status-only and no-op updates stay unsent. (tests/test_chart.py checks the chart registers the
same conditions; every e2e test registers them from this manifest, and
e2e/test_webhook.py::test_status_and_no_op_updates_never_reach_the_webhook has karmada-apiserver
evaluate them.)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from karmadaquota import trust

REPO = Path(__file__).resolve().parents[1]


def binding_webhook() -> dict[str, object]:
    doc = yaml.safe_load((REPO / "webhook/karmada/validatingwebhookconfiguration.yaml").read_text())
    hook: dict[str, object] = next(
        w for w in doc["webhooks"] if w["name"] == "resourcebinding.quota.karmada.io"
    )
    return hook


def expression() -> str:
    (condition,) = binding_webhook()["matchConditions"]  # type: ignore[misc]
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
