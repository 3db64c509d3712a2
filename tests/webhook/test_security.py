"""Security properties that are cheap to pin down: a non-root image, and logs that never carry
credentials or the objects under review."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from karmadaquota import logs
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import build_app
from tests.fake_api import Replica, quota_doc
from tests.webhook.test_webhook_app import review
from tests.webhook_fakes import binding_doc

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-SENTINEL-value"


def test_the_image_runs_as_a_non_root_numeric_user() -> None:
    stages = (REPO / "Dockerfile").read_text().split("\nFROM ")
    users = re.findall(r"^USER\s+(\S+)", stages[-1], re.MULTILINE)
    assert users, "the final stage sets no USER: the container would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it


def _hostile(name: str, **changes: Any) -> dict[str, Any]:
    doc = binding_doc(name, cpu="1")
    doc["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied": SECRET}
    doc["metadata"]["labels"] = {"token": SECRET[:60]}
    doc["spec"]["resource"]["name"] = name
    doc["spec"]["credentials"] = {"password": SECRET, "authorization": f"Bearer {SECRET}"}
    doc["spec"].update(changes)
    return doc


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_no_log_line_carries_the_object_or_a_credential(
    fmt: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.setup(fmt, "debug")
    store = Replica(quota_doc(hard={"requests.cpu": "2", "pods": "100"}))
    cache = store.quota_store()
    client = TestClient(TestServer(build_app(Webhook(cache, Batcher(store), WebhookMetrics()))))
    await client.start_server()
    bodies: list[bytes] = [
        json.dumps(review(_hostile("admitted"))).encode(),
        json.dumps(review(_hostile("over", replicas=5))).encode(),  # denied: over quota
        json.dumps(review(_hostile("negative", replicas=-1))).encode(),  # denied: invalid
        json.dumps(review(_hostile("dry"), dry_run=True)).encode(),
        json.dumps(review(_hostile("typed", replicas=SECRET))).encode(),  # schema error
        json.dumps({"request": {"uid": SECRET, "object": SECRET}}).encode(),  # malformed
        b'{"apiVersion": "' + SECRET.encode() + b'", ',  # not JSON
    ]
    try:
        with caplog.at_level(logging.DEBUG):
            for body in bodies:
                resp = await client.post(
                    "/validate-resourcebinding",
                    data=body,
                    headers={"Authorization": f"Bearer {SECRET}"},
                )
                await resp.read()
    finally:
        await client.close()
    written = capsys.readouterr().err + caplog.text
    assert "admission decision" in written  # the decisions were logged ...
    assert "namespace" in written and "negative" in written  # ... naming what they decided
    assert SECRET not in written  # ... and never what the object or the request carried
    assert "BEGIN" not in written and "PRIVATE KEY" not in written
