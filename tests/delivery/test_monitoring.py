"""Monitoring under a real Prometheus, checked without one: label names that survive any
Kubernetes scrape, runtime collectors on both registries, the webhook's plain-HTTP metrics port
and serving-certificate expiry, the Deployments' scrape annotations, and alerts.yaml and
docs/operations.md stating the same thresholds. (e2e/test_monitoring.py runs Prometheus' own
parsers and compares the queried metrics with what the running processes export.)"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from karmadaquota import cli
from karmadaquota.api import KarmadaQuotaStatus
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.serving.aux_port import serve_aux
from karmadaquota.serving.certs import CertificateError, CertReloader, not_after
from karmadaquota.serving.metrics_auth import LoopbackOnly
from karmadaquota.webhook.metrics import WebhookMetrics
from tests.conftest import rl

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
OPERATIONS = REPO / "docs" / "operations.md"
EXPIRY = "karmadaquota_webhook_serving_certificate_expiry_timestamp_seconds"

# Target labels a ServiceMonitor/PodMonitor or a kubernetes_sd_configs scrape attaches, and
# the external label multi-cluster Prometheus setups put on every series.
TARGET_LABELS = {
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
    "job",
    "instance",
    "node",
    "cluster",
}


# ---------------------------------------------------------------------------------------------
# label names and collectors


def populated() -> tuple[ControllerMetrics, WebhookMetrics]:
    """Both metric sets with every labelled series present at least once."""
    c = ControllerMetrics()
    status = KarmadaQuotaStatus.model_validate(
        {
            "reservations": [
                {
                    "reservedBy": {
                        "apiVersion": "v",
                        "kind": "ResourceBinding",
                        "name": "a",
                        "uid": "a",
                    },
                    "reserved": {"pods": "1"},
                    "expirationTime": "2026-01-01T12:01:00Z",
                }
            ],
            "aggregatedStatus": [
                {"clusterName": "m1", "used": {"pods": "1"}, "observed": {"pods": "1"}}
            ],
        }
    )
    c.set_quota("team-a", "q", rl(pods="1"), rl(pods="10"), status)
    c.member_up.labels("m1").set(1)
    c.member_pods.labels("m1").set(3)
    w = WebhookMetrics()
    w.observe_decision("CREATE", False, "QuotaExceeded", 0.001, 0.0005)
    w.connection("opened")
    w.observe_write("ok", 0.002)
    return c, w


def label_names(registry: CollectorRegistry, prefix: str = "karmadaquota_") -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.startswith(prefix):
                out.setdefault(s.name, set()).update(s.labels)
    return out


def test_no_series_label_collides_with_a_target_or_external_label() -> None:
    c, w = populated()
    names = label_names(c.registry) | label_names(w.registry)
    assert names["karmadaquota_quota_used"] == {"quota_namespace", "quota", "resource"}
    assert names["karmadaquota_quota_member_observed"] == {
        "quota_namespace",
        "quota",
        "resource",
        "member_cluster",
    }
    assert names["karmadaquota_member_observed"] == {"member_cluster"}
    clashes = {n: labels & TARGET_LABELS for n, labels in names.items() if labels & TARGET_LABELS}
    assert clashes == {}


def test_both_registries_carry_process_gc_and_platform_collectors() -> None:
    for registry in (ControllerMetrics().registry, WebhookMetrics().registry):
        names = {s.name for family in registry.collect() for s in family.samples}
        assert {
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
            "python_gc_collections_total",
            "python_info",
        } <= names


def test_both_registries_say_which_build_runs() -> None:
    """karmadaquota_build_info{version, python_version} 1, the Prometheus convention (as
    kube-state-metrics' kube_state_metrics_build_info): this package's version, this Python."""
    import platform

    from karmadaquota import __version__

    for registry in (ControllerMetrics().registry, WebhookMetrics().registry):
        (sample,) = [
            s
            for family in registry.collect()
            for s in family.samples
            if s.name == "karmadaquota_build_info"
        ]
        assert sample.labels == {
            "version": __version__,
            "python_version": platform.python_version(),
        }
        assert sample.value == 1


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def dashboard_strings(key: str) -> list[str]:
    out: list[str] = []

    def walk(v: Any, k: str = "") -> None:
        if isinstance(v, dict):
            for kk, vv in v.items():
                walk(vv, kk)
        elif isinstance(v, list):
            for vv in v:
                walk(vv, k)
        elif isinstance(v, str) and k == key:
            out.append(v)

    walk(json.loads(DASHBOARD.read_text()))
    return out


def used_label_names() -> set[str]:
    """Label names the rules and the dashboard group by, match on or print."""
    exprs = rule_exprs() + dashboard_strings("expr") + dashboard_strings("query")
    names: set[str] = set()
    for e in exprs:
        for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", e):
            names.update(n.strip() for n in group.split(",") if n.strip())
        for matchers in re.findall(r"\{([^{}]*)\}", e):
            names.update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
        names.update(re.findall(r"label_values\(.*,\s*(\w+)\s*\)$", e))
    alerts = yaml.safe_load(ALERTS.read_text())["groups"]
    for rule in (r for g in alerts for r in g["rules"]):
        for text in rule.get("annotations", {}).values():
            names.update(re.findall(r"\$labels\.(\w+)", text))
    for legend in dashboard_strings("legendFormat"):
        names.update(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    return names


def test_rules_and_dashboard_use_the_exported_label_names() -> None:
    c, w = populated()
    exported = set().union(*label_names(c.registry).values(), *label_names(w.registry).values())
    # `le` of histograms, `instance` (every target has it) to join process_* to our targets,
    # and karmada-apiserver's `name`, `error_type` of apiserver_admission_webhook_rejection_count
    allowed = exported | {"le", "instance", "name", "error_type"}
    used = used_label_names()
    assert {"quota_namespace", "member_cluster"} <= used
    assert used - allowed == set()


# ---------------------------------------------------------------------------------------------
# serving certificate expiry


def write_cert(
    path: Path, not_after: dt.datetime, *extra: dt.datetime, key_path: Path | None = None
) -> None:
    """A PEM file: a certificate valid until `not_after`, then one per `extra` (a chain)."""
    pems = []
    key = ec.generate_private_key(ec.SECP256R1())
    for i, end in enumerate((not_after, *extra)):
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cert-{i}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
            .not_valid_after(end)
            .sign(key, hashes.SHA256())
        )
        pems.append(cert.public_bytes(serialization.Encoding.PEM))
    path.write_bytes(b"".join(pems))
    if key_path is not None:
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


@pytest.mark.parametrize(
    "end",
    [
        dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=dt.UTC),  # UTCTime
        dt.datetime(2049, 12, 31, 23, 59, 59, tzinfo=dt.UTC),  # the last UTCTime year
        dt.datetime(2050, 1, 1, 0, 0, 0, tzinfo=dt.UTC),  # GeneralizedTime from 2050 on
        dt.datetime(2125, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
    ],
)
def test_not_after_reads_both_time_encodings(tmp_path: Path, end: dt.datetime) -> None:
    write_cert(tmp_path / "tls.crt", end)
    assert not_after(str(tmp_path / "tls.crt")) == end.timestamp()


def test_not_after_of_a_chain_is_the_earliest(tmp_path: Path) -> None:
    leaf, intermediate = (
        dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2029, 6, 1, tzinfo=dt.UTC),
    )
    write_cert(tmp_path / "tls.crt", leaf, intermediate)
    assert not_after(str(tmp_path / "tls.crt")) == intermediate.timestamp()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n",  # SEQ{INT 1}
    ],
)
def test_an_unreadable_certificate_is_a_certificate_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "tls.crt").write_bytes(content)
    with pytest.raises(CertificateError):
        not_after(str(tmp_path / "tls.crt"))


def gauge(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name)
    assert value is not None, name
    return value


def test_expiry_gauge_is_set_at_load_and_on_reload(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first, second = dt.datetime(2030, 1, 1, tzinfo=dt.UTC), dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    write_cert(cert, first, key_path=key)
    metrics = WebhookMetrics()
    reloader = CertReloader(str(cert), str(key), metrics.serving_certificate_loaded)
    assert gauge(metrics.registry, EXPIRY) == first.timestamp()
    write_cert(cert, second, key_path=key)
    later = os.stat(cert).st_mtime + 5
    os.utime(cert, (later, later))
    os.utime(key, (later, later))
    assert reloader.reload_if_changed()
    assert gauge(metrics.registry, EXPIRY) == second.timestamp()


def test_a_certificate_whose_expiry_cannot_be_read_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = WebhookMetrics()
    (tmp_path / "tls.crt").write_bytes(b"not a certificate")
    with caplog.at_level(logging.WARNING, logger="karmadaquota.webhook"):
        metrics.serving_certificate_loaded(str(tmp_path / "tls.crt"))
    assert "serving certificate expiry not read" in caplog.text
    assert gauge(metrics.registry, EXPIRY) == 0  # the alert fires: unknown is not "fine"


# ---------------------------------------------------------------------------------------------
# the webhook's plain-HTTP metrics port


async def test_plain_http_metrics_port_serves_the_webhook_registry() -> None:
    metrics = WebhookMetrics()
    metrics.cache_synced.set(1)
    listener = await serve_aux(metrics.registry, LoopbackOnly(), lambda: True, "127.0.0.1", 0)
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"http://127.0.0.1:{listener.port}/metrics") as r,
        ):
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
    finally:
        await listener.close()
    assert "karmadaquota_quota_cache_synced 1.0" in text
    assert "process_resident_memory_bytes" in text


def test_webhook_metrics_flags_reach_the_settings() -> None:
    parse = cli._parser().parse_args
    base = ["webhook", "--tls-cert-file=c", "--tls-private-key-file=k"]
    default = cli.webhook_config(parse(base))
    assert (default.metrics_bind_address, default.metrics_port) == ("127.0.0.1", 8081)
    assert default.port == 8443  # the serving port is another one
    given = cli.webhook_config(
        parse([*base, "--metrics-bind-address=0.0.0.0", "--metrics-port=9100"])
    )
    assert (given.metrics_bind_address, given.metrics_port) == ("0.0.0.0", 9100)


def flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")), None)


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_deployment_is_scraped_by_annotation_on_its_metrics_port(component: str) -> None:
    deployment = yaml.safe_load((REPO / component / "deployment.yaml").read_text())
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    port = flag(container["args"], "--metrics-port")
    assert port is not None and annotations["prometheus.io/port"] == port
    assert flag(container["args"], "--metrics-bind-address") == "0.0.0.0"
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named["metrics"] == int(port)


def test_pod_monitor_selects_both_deployments_on_their_metrics_port() -> None:
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    assert monitor["kind"] == "PodMonitor"
    spec = monitor["spec"]
    (expr,) = spec["selector"]["matchExpressions"]
    apps = set()
    for component in ("webhook", "controller"):
        deployment = yaml.safe_load((REPO / component / "deployment.yaml").read_text())
        apps.add(deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"])
    assert (expr["key"], expr["operator"], set(expr["values"])) == (
        "app.kubernetes.io/name",
        "In",
        apps,
    )
    assert [e["port"] for e in spec["podMetricsEndpoints"]] == ["metrics"]
    assert not any(e.get("honorLabels") for e in spec["podMetricsEndpoints"])


# ---------------------------------------------------------------------------------------------
# alerts.yaml and docs/operations.md state the same thresholds

_COMPARISON = re.compile(r"(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)")
_WINDOW = re.compile(r"\[(\d+[smhdwy](?::\d+[smhdwy])?)\]")
_DURATION = re.compile(r"\d+[smhdwy](?::\d+[smhdwy])?")
NONE = "—"


def comparisons(text: str) -> set[tuple[str, float]]:
    return {(op, float(n)) for op, n in _COMPARISON.findall(text)}


def rules_stated(alerts_yaml: str) -> dict[str, dict[str, Any]]:
    """Per alert: severity, the comparisons of its expression, its range windows, its `for`."""
    out = {}
    for group in yaml.safe_load(alerts_yaml)["groups"]:
        for rule in group["rules"]:
            expr = rule["expr"]
            out[rule["alert"]] = {
                "severity": rule["labels"]["severity"],
                "comparisons": comparisons(expr),
                "windows": set(_WINDOW.findall(expr)),
                "for": rule.get("for", NONE),
            }
    return out


def doc_stated(markdown: str) -> dict[str, dict[str, Any]]:
    """The same, from the alerts table of docs/operations.md."""
    section = markdown.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        alert, severity, threshold, window, for_ = cells[:5]
        out[alert.strip("`")] = {
            "severity": severity,
            "comparisons": comparisons(threshold),
            "windows": set(_DURATION.findall(window)) if window != NONE else set(),
            "for": for_.strip("`"),
        }
    return out


def differences(alerts_yaml: str, markdown: str) -> list[str]:
    rules, doc = rules_stated(alerts_yaml), doc_stated(markdown)
    diffs = [f"{a}: in alerts.yaml only" for a in rules.keys() - doc.keys()]
    diffs += [f"{a}: in docs/operations.md only" for a in doc.keys() - rules.keys()]
    for alert in rules.keys() & doc.keys():
        for key, value in rules[alert].items():
            if doc[alert][key] != value:
                diffs.append(f"{alert} {key}: rules {value!r}, doc {doc[alert][key]!r}")
    return sorted(diffs)


def test_alerts_yaml_and_operations_md_state_the_same_thresholds() -> None:
    rules, doc = ALERTS.read_text(), OPERATIONS.read_text()
    assert len(rules_stated(rules)) >= 10
    assert differences(rules, doc) == []


@pytest.mark.parametrize(
    ("where", "old", "new", "expected"),
    [
        ("rules", "  > 0.9 < 1\n", "  > 0.8 < 1\n", "KarmadaQuotaAlmostFull comparisons"),
        ("rules", "\n          < 14\n", "\n          < 21\n", "CertificateExpiring comparisons"),
        ("rules", "> 1\n        for: 10m\n", "> 1\n        for: 15m\n", "WebhookSlow for"),
        ("rules", "[30m])) > 0", "[1h])) > 0", "KarmadaQuotaChargesDisproved windows"),
        ("doc", "expires in `< 3` days", "expires in `< 2` days", "ExpiringSoon comparisons"),
        ("doc", "| critical | leaders", "| warning | leaders", "KarmadaQuotaNoLeader severity"),
    ],
)
def test_a_threshold_changed_in_one_place_only_is_caught(
    where: str, old: str, new: str, expected: str
) -> None:
    rules, doc = ALERTS.read_text(), OPERATIONS.read_text()
    if where == "rules":
        assert rules.count(old) == 1, old
        rules = rules.replace(old, new)
    else:
        assert doc.count(old) == 1, old
        doc = doc.replace(old, new)
    found = differences(rules, doc)
    assert len(found) == 1 and expected in found[0], found


def test_quota_alerts_follow_kubernetes_mixins_convention() -> None:
    """KubeQuotaAlmostFull (info, > 0.9 < 1, for 15m), KubeQuotaFullyUsed (info, == 1) and
    KubeQuotaExceeded (warning, > 1), over the same ratio."""
    rules = rules_stated(ALERTS.read_text())
    expected = {
        "KarmadaQuotaAlmostFull": ("info", {(">", 0.9), ("<", 1.0)}),
        "KarmadaQuotaFullyUsed": ("info", {("==", 1.0)}),
        "KarmadaQuotaExceeded": ("warning", {(">", 1.0)}),
    }
    for alert, (severity, compared) in expected.items():
        assert rules[alert]["severity"] == severity, alert
        assert rules[alert]["comparisons"] == compared | {(">", 0.0)}, alert  # hard > 0
        assert rules[alert]["for"] == "15m", alert
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    exprs = {r["alert"]: r["expr"] for g in groups for r in g["rules"]}
    ratios = {exprs[a].rsplit("\n", 2)[0].strip() for a in expected}
    assert len(ratios) == 1, "the three alerts must read the same ratio"


def test_every_alert_has_a_runbook_that_exists() -> None:
    runbooks = (REPO / "docs" / "runbooks.md").read_text()
    anchors = {line[3:].strip().lower() for line in runbooks.splitlines() if line.startswith("## ")}
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        url = rule["annotations"].get("runbook_url", "")
        page, _, anchor = url.partition("#")
        assert page.endswith("/docs/runbooks.md"), (rule["alert"], url)
        assert anchor == rule["alert"].lower() and anchor in anchors, (rule["alert"], url)


def test_the_rejection_alert_reads_karmada_apiservers_labels() -> None:
    """apiserver_admission_webhook_rejection_count{name, type, operation, error_type,
    rejection_code} (k8s.io/apiserver/pkg/admission/metrics); the rule selects our webhooks by
    `name` as webhook/karmada/ registers them."""
    (expr,) = [e for e in rule_exprs() if "apiserver_admission_webhook_rejection_count" in e]
    assert 'error_type="calling_webhook_error"' in expr
    pattern = re.search(r'name=~"([^"]+)"', expr)
    assert pattern is not None
    regex = pattern.group(1).replace("\\\\", "\\")  # PromQL string escapes
    registration = yaml.safe_load(
        (REPO / "webhook" / "karmada" / "validatingwebhookconfiguration.yaml").read_text()
    )
    names = [w["name"] for w in registration["webhooks"]]
    assert names and all(re.fullmatch(regex, n) for n in names)
    assert not re.fullmatch(regex, "validation.karmada.io")


def test_certificate_alerts_warn_at_14_days_and_page_at_3() -> None:
    rules = rules_stated(ALERTS.read_text())
    expiry = {
        name: r for name, r in rules.items() if name.startswith("KarmadaQuotaWebhookCertificate")
    }
    assert {(r["severity"], frozenset(r["comparisons"])) for r in expiry.values()} == {
        ("warning", frozenset({("<", 14.0)})),
        ("critical", frozenset({("<", 3.0)})),
    }
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    exprs = {r["alert"]: r["expr"] for g in groups for r in g["rules"]}
    assert all(EXPIRY in exprs[name] for name in expiry)


def test_the_controller_outage_alerts_read_what_is_exported() -> None:
    """KarmadaQuotaControllerDown and KarmadaQuotaPendingNotConfirmed select metrics the
    processes export (the latter: the webhook's pending charges past their expiry)."""
    rules = {
        r["alert"]: r["expr"]
        for g in yaml.safe_load(ALERTS.read_text())["groups"]
        for r in g["rules"]
    }
    assert "karmadaquota_leader" in rules["KarmadaQuotaControllerDown"]
    assert "karmadaquota_pending_overdue_seconds" in rules["KarmadaQuotaPendingNotConfirmed"]
    w = WebhookMetrics()
    w.watch_pending(lambda: (75.5, 3))
    assert w.registry.get_sample_value("karmadaquota_pending_overdue_seconds") == 75.5
    assert w.registry.get_sample_value("karmadaquota_pending_overdue_charges") == 3
