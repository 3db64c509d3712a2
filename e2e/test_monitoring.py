"""deploy/monitoring/ checked by real tools: Prometheus' own parsers read the alerting rules and
every dashboard query (hack/promql-check), and every metric they select is one the running
webhook and controller export on the bed — or karmada-apiserver, for the rule on its webhook
calls — after the activity that makes labelled series appear (an admission, a denial, a status
write, a reservation, pods observed in the members). The webhook is read on its plain-HTTP
metrics port, as Prometheus scrapes it, and serves the same on its HTTPS port."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.layout import Inputs
from e2e.testbed.storm import binding
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import KubeClient, KubeError

pytestmark = pytest.mark.e2e

MONITORING = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
FILES = [MONITORING / "grafana-dashboard.json", MONITORING / "alerts.yaml"]


def promql_check(*files: Path) -> subprocess.CompletedProcess[str]:
    tool = Inputs.discover().binary("promql-check")
    if not tool.exists():
        pytest.fail(f"{tool} missing: run hack/build-binaries.sh promql-check")
    return subprocess.run(
        [str(tool), *map(str, files)], capture_output=True, text=True, timeout=60, check=False
    )


def queried_metrics() -> set[str]:
    proc = promql_check(*FILES)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["expressions"] >= 30  # every panel target and rule was read
    return set(report["metrics"])


def test_rules_and_dashboard_parse_with_prometheus_parsers(tmp_path: Path) -> None:
    metrics = queried_metrics()
    assert {"karmadaquota_quota_used", "karmadaquota_leader"} <= metrics
    # the checker is a real parser: a broken expression and an unknown rule field fail
    rules = FILES[1].read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text(rules.replace("sum(karmadaquota_leader) < 1", "sum(karmadaquota_leader) <"))
    proc = promql_check(broken)
    assert proc.returncode == 1 and "KarmadaQuotaNoLeader" in proc.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(rules.replace("    for: 5m", "    fro: 5m", 1))
    proc = promql_check(typo)
    assert proc.returncode == 1 and "field fro not found" in proc.stderr
    dashboard = tmp_path / "dashboard.json"
    dashboard.write_text(FILES[0].read_text().replace("histogram_quantile(0.99,", "histogram(", 1))
    proc = promql_check(dashboard)
    assert proc.returncode == 1 and "histogram" in proc.stderr


@dataclass
class Running:
    webhook: product.WebhookProc
    controller_metrics: str


@pytest.fixture(scope="module")
async def running(testbed: TestBed) -> AsyncIterator[Running]:
    await asyncio.to_thread(product.install_crd, testbed)
    controller, port = product.start_controller(testbed, "controller-monitoring")
    hook = await product.start_webhook(testbed, "webhook-monitoring")
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield Running(hook, f"http://127.0.0.1:{port}/metrics")
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()


def sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


async def https_metrics(hook: product.WebhookProc) -> str:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{hook.base}/metrics", ssl=hook.ssl_context()) as r,
    ):
        return await r.text()


async def apiserver_metric_names(testbed: TestBed) -> set[str]:
    """Sample names karmada-apiserver exports (only names are read: its exposition is large)."""
    text = (await testbed.akubectl("get", "--raw", "/metrics")).stdout
    return {
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def exported(run: Running, testbed: TestBed) -> set[str]:
    async with aiohttp.ClientSession() as s, s.get(run.controller_metrics) as r:
        controller = await r.text()
    webhook = sample_names(await run.webhook.metrics())
    assert run.webhook.metrics_port is not None, "read on the plain-HTTP metrics port"
    assert webhook == sample_names(await https_metrics(run.webhook))
    return sample_names(controller) | webhook | await apiserver_metric_names(testbed)


async def test_every_queried_metric_is_exported(
    testbed: TestBed, running: Running, namespace: str
) -> None:
    wanted = queried_metrics()
    ns = namespace
    await testbed.aapply(product.quota(ns, "team", {"requests.cpu": "1", "pods": "4"}))
    # a queue (onExceed: Queue) for the queue series; named after "team", which refuses first
    queue_hard = {"count/deployments.apps": "1"}
    await testbed.aapply(product.quota(ns, "waitline", queue_hard, onExceed="Queue"))

    def initialised() -> bool:
        q = testbed.get("karmadaquota", "team", namespace=ns) or {}
        w = testbed.get("karmadaquota", "waitline", namespace=ns) or {}
        return {"requests.cpu", "pods"} <= set(q.get("status", {}).get("used", {})) and set(
            queue_hard
        ) <= set(w.get("status", {}).get("used", {}))

    await eventually(initialised, 60, "status.used initialised")
    # placed in the members and observed there (per-member series), admitted (a status write)
    members = list(testbed.members)
    web = [deployment(ns, "web", 2, {"cpu": "250m"}), divided_policy(ns, "web", members, "web")]
    await testbed.aapply(web)
    api = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    try:
        path = f"/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
        with pytest.raises(KubeError, match="exceeded quota: team"):
            await api.post(path, binding(ns, "too-big", cpu="2"))

        async def web_placed() -> bool:
            rb = await api.get(f"{path}/web-deployment")
            return bool(rb["spec"].get("clusters"))

        await eventually(web_placed, 60, "web placed")
        # fits team, not waitline (one Deployment: web's): queued (through Karmada, which
        # retries a create refused before the queueing registration took effect)
        waits = deployment(ns, "waits", 1, {"cpu": "10m"})
        await testbed.aapply([waits, divided_policy(ns, "waits", members, "waits")])
    finally:
        await api.close()

    async def all_exported() -> bool:
        missing = wanted - await exported(running, testbed)
        assert not missing, f"not exported: {sorted(missing)}"
        return True

    await eventually(all_exported, 120, "every metric the dashboard and rules query")


async def test_serving_certificate_expiry_is_the_served_certificates(running: Running) -> None:
    hook = running.webhook
    _, writer = await asyncio.open_connection(
        "127.0.0.1", hook.port, ssl=hook.ssl_context(), server_hostname="127.0.0.1"
    )
    try:
        served = writer.get_extra_info("peercert")
    finally:
        writer.close()
        await writer.wait_closed()
    families = {f.name: f for f in text_string_to_metric_families(await hook.metrics())}
    (sample,) = families[
        "karmadaquota_webhook_serving_certificate_expiry_timestamp_seconds"
    ].samples
    assert sample.value == ssl.cert_time_to_seconds(served["notAfter"])
