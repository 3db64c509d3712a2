"""The ResourceBinding webhook's matchConditions send every change of the spec.

A spec change that skipped admission would be neither charged nor checked for its writer
(karmadaquota.trust: an untrusted writer may change no field of a binding's spec in a namespace
with a quota — issue 29's routes changed `requiredBy`, `replicaRequirements`,
`gracefulEvictionTasks`). Metadata-only and status updates stay unsent. (tests/test_chart.py
checks the chart registers the same conditions; every e2e test registers them from this
manifest.)
"""

from __future__ import annotations

from pathlib import Path

import yaml

from karmadaquota import queued

REPO = Path(__file__).resolve().parents[1]


def binding_webhook() -> dict[str, object]:
    doc = yaml.safe_load((REPO / "webhook/karmada/validatingwebhookconfiguration.yaml").read_text())
    hook: dict[str, object] = next(
        w for w in doc["webhooks"] if w["name"] == "resourcebinding.quota.karmada.io"
    )
    return hook


def test_the_match_condition_sends_every_spec_change() -> None:
    (condition,) = binding_webhook()["matchConditions"]  # type: ignore[misc]
    clauses = [c.strip() for c in condition["expression"].split(" ||")]
    assert clauses[0] == "request.operation != 'UPDATE'"
    assert clauses[1] == "object.spec != oldObject.spec"
    assert len(clauses) == 3  # and the queue annotation (below): nothing narrows the spec


def test_the_match_condition_sends_a_change_of_the_queued_annotation() -> None:
    """Removing (or adding) `quota.karmada.io/queued-by` alone moves a suspended, unplaced
    binding out of (into) the queue, from charged nothing to charged in full: such an UPDATE
    must reach the webhook."""
    (condition,) = binding_webhook()["matchConditions"]  # type: ignore[misc]
    expression = condition["expression"]
    key = f"'{queued.ANNOTATION}'"
    assert f"{key} in object.metadata.annotations" in expression
    assert f"{key} in oldObject.metadata.annotations" in expression


def test_creates_are_always_sent() -> None:
    """CREATE and UPDATE are the registered operations; the condition lets every CREATE through
    (its first clause), so a new binding is always charged."""
    hook = binding_webhook()
    (rule,) = hook["rules"]  # type: ignore[misc]
    assert rule["operations"] == ["CREATE", "UPDATE"]
