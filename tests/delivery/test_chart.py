"""charts/karmadaquota, linted and rendered by the real helm (hack/build-binaries.sh helm).

The rendered objects are checked against the kustomize manifests they must reproduce (container
arguments, ports, probes; the karmada-apiserver RBAC and registration) and against the
production rules of DESIGN.md §14: a restricted securityContext, only declared writable mounts
(an emptyDir at /tmp), PodDisruptionBudgets, the hook Jobs' annotations and order, a
fail-closed registration that leaves the system namespaces alone, and copies of the CRD and
the alerting rules that cannot drift from their sources.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from karmadaquota import install

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "karmadaquota"
CACHE = Path(os.environ.get("KARMADAQUOTA_CACHE", Path.home() / ".cache" / "karmadaquota"))
HELM = CACHE / "bin" / "helm"
NS = "karmada-system"
SYSTEM_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease", "karmada-system"}

Doc = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def _helm() -> None:
    """No helm is a failure, never a skip: a fresh clone's `make unit` builds it first, and a
    run without it must not pass silently with the chart unchecked."""
    if not (HELM.is_file() and os.access(HELM, os.X_OK)):
        pytest.fail(f"{HELM} is missing: run `make helm` (bash hack/build-binaries.sh helm)")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # helm's own config, cache and data directories, away from the user's
    home = CACHE / "helm-home"
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    proc = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stderr}"
    return proc


def _set_args(sets: tuple[str, ...]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


@cache
def render(*sets: str) -> tuple[Doc, ...]:
    out = helm("template", "kq", str(CHART), "--namespace", NS, *_set_args(sets)).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def objects(docs: tuple[Doc, ...], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def one(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    found = objects(docs, kind)
    assert name in found, f"no {kind} {name}; have {sorted(found)}"
    return found[name]


def kustomize_container(path: str) -> Doc:
    deployment = yaml.safe_load((REPO / path).read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def karmada_objects(docs: tuple[Doc, ...]) -> dict[str, list[Doc]]:
    """The karmada-apiserver manifests of the chart's ConfigMap, per file."""
    cm = one(docs, "ConfigMap", "karmadaquota-karmada-apiserver")
    return {k: [d for d in yaml.safe_load_all(v) if d] for k, v in cm["data"].items()}


def by_kind(docs: list[Doc] | Iterator[Doc]) -> dict[tuple[str, str], Doc]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def pod_specs(docs: tuple[Doc, ...]) -> dict[str, Doc]:
    """Every pod template of the chart: both Deployments, the hook Jobs, the CronJob."""
    out = {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }
    for d in docs:
        if d["kind"] == "CronJob":
            out[f"CronJob/{d['metadata']['name']}"] = d["spec"]["jobTemplate"]["spec"]["template"][
                "spec"
            ]
    return out


# the pods that write or delete the issued kubeconfig Secrets on the host (componentCredentials)
HOST_WRITERS = {
    "Job/karmadaquota-install-apply",
    "Job/karmadaquota-install-delete",
    "CronJob/karmadaquota-rotate-credentials",
}


MODES = (
    ("certificates.mode=selfSigned",),
    ("certificates.mode=certManager",),
    ("certificates.mode=existingSecret", "certificates.existingSecret.name=my-cert"),
)


# ---- lint ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        (),
        *MODES,
        (
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
        ),
        ("crd.keepOnUninstall=false", "hooks.waitForWebhook=false", "logLevel=debug"),
    ],
    ids=lambda s: ",".join(s) or "defaults",
)
def test_helm_lint_strict(sets: tuple[str, ...]) -> None:
    helm("lint", "--strict", str(CHART), "--namespace", NS, *_set_args(sets))


def test_values_schema_refuses_an_unknown_certificate_mode() -> None:
    proc = helm("lint", "--strict", str(CHART), "--set", "certificates.mode=bogus", check=False)
    assert proc.returncode != 0
    assert "certificates/mode" in proc.stdout + proc.stderr


def test_existing_secret_mode_needs_a_name() -> None:
    proc = helm(
        "template", "kq", str(CHART), "--set", "certificates.mode=existingSecret", check=False
    )
    assert proc.returncode != 0
    assert "certificates.existingSecret.name is required" in proc.stderr


# ---- the copies cannot drift ---------------------------------------------------------------


def test_the_embedded_crd_is_api_crds_byte_for_byte() -> None:
    source = (REPO / "api" / "crds" / "quota.karmada.io_karmadaquotas.yaml").read_text()
    assert (CHART / "files" / "crds" / "quota.karmada.io_karmadaquotas.yaml").read_text() == source
    cm = one(render(), "ConfigMap", "karmadaquota-karmada-apiserver")
    assert cm["data"]["crd.yaml"] == source
    # not Helm's crds/ directory: those would be installed into the host cluster
    assert not (CHART / "crds").exists()


def test_the_alerts_are_deploy_monitorings() -> None:
    source = (REPO / "deploy" / "monitoring" / "alerts.yaml").read_text()
    assert (CHART / "files" / "alerts.yaml").read_text() == source
    docs = render("prometheusRule.enabled=true")
    rule = one(docs, "PrometheusRule", "karmadaquota")
    assert rule["spec"] == yaml.safe_load(source)


def test_the_dashboard_is_deploy_monitorings_for_the_grafana_sidecar() -> None:
    source = (REPO / "deploy" / "monitoring" / "grafana-dashboard.json").read_text()
    assert (CHART / "files" / "grafana-dashboard.json").read_text() == source
    assert "karmadaquota-dashboard" not in objects(render(), "ConfigMap")  # optional
    docs = render(
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.annotations.grafana_folder=Karmada",
    )
    cm = one(docs, "ConfigMap", "karmadaquota-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Karmada"}
    assert json.loads(cm["data"]["karmadaquota.json"]) == json.loads(source)


# ---- workloads -----------------------------------------------------------------------------


@pytest.mark.parametrize("sets", [(), *MODES], ids=lambda s: ",".join(s) or "defaults")
def test_every_pod_runs_restricted(sets: tuple[str, ...]) -> None:
    specs = pod_specs(render(*sets))
    assert set(specs) == {
        "Deployment/karmadaquota-webhook",
        "Deployment/karmadaquota-controller",
        "Job/karmadaquota-install-apply",
        "Job/karmadaquota-install-register",
        "Job/karmadaquota-install-delete",
        "Job/karmadaquota-install-delete-lease",
        "CronJob/karmadaquota-rotate-credentials",
    }
    for where, spec in specs.items():
        # hook Jobs that write host Secrets mount their token; the Deployments mount theirs only
        # to review scrapers' tokens (metricsAuth)
        metrics = where.startswith("Deployment/") and "metricsAuth.mode=none" not in sets
        assert spec["automountServiceAccountToken"] is (where in HOST_WRITERS or metrics), where
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, where
        assert not spec.get("initContainers"), where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert "privileged" not in sc and "runAsUser" not in sc, where


@pytest.mark.parametrize("sets", [(), *MODES], ids=lambda s: ",".join(s) or "defaults")
def test_only_tmp_is_writable_and_everything_else_is_a_read_only_secret_or_configmap(
    sets: tuple[str, ...],
) -> None:
    for where, spec in pod_specs(render(*sets)).items():
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec["containers"]:
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            tmp = mounts.pop("/tmp")
            assert volumes[tmp["name"]] == {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}
            assert not tmp.get("readOnly"), where
            for path, m in mounts.items():
                assert m.get("readOnly") is True, f"{where}: {path} is writable"
                assert "subPath" not in m, f"{where}: {path}: subPath never sees updates"
                source = volumes[m["name"]]
                assert "secret" in source or "configMap" in source, f"{where}: {path}"


def test_the_webhook_container_is_the_kustomize_one() -> None:
    docs = render()
    pod = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["template"]["spec"]
    (chart,) = pod["containers"]
    kust = kustomize_container("webhook/deployment.yaml")
    for field in ("name", "args", "ports", "readinessProbe", "livenessProbe", "resources"):
        assert chart[field] == kust[field], field
    assert {m["mountPath"] for m in chart["volumeMounts"]} == {
        m["mountPath"] for m in kust["volumeMounts"]
    } | {"/tmp"}
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["serviceAccountName"] == "karmadaquota-webhook"
    template = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["template"]
    kust_template = yaml.safe_load((REPO / "webhook/deployment.yaml").read_text())["spec"][
        "template"
    ]
    assert template["metadata"]["annotations"] == kust_template["metadata"]["annotations"]


def test_the_controller_container_is_the_kustomize_one() -> None:
    docs = render()
    pod = one(docs, "Deployment", "karmadaquota-controller")["spec"]["template"]["spec"]
    (chart,) = pod["containers"]
    kust = kustomize_container("controller/deployment.yaml")
    for field in (
        "name",
        "args",
        "ports",
        "startupProbe",
        "readinessProbe",
        "livenessProbe",
        "resources",
    ):
        assert chart[field] == kust[field], field
    env = {e["name"]: e for e in chart["env"]}
    for e in kust["env"]:
        assert env[e["name"]] == e
    # the Lease the controller/karmada Role lets it renew
    assert env["KARMADAQUOTA_LEASE_NAME"]["value"] == "karmadaquota-controller"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {m["mountPath"] for m in chart["volumeMounts"]} == {
        m["mountPath"] for m in kust["volumeMounts"]
    }


def test_values_reach_the_arguments() -> None:
    docs = render(
        "logFormat=text",
        "logLevel=debug",
        "webhook.reservationTTL=90s",
        "webhook.port=9443",
        "webhook.metricsPort=9081",
        "webhook.extraArgs={--no-waiting-list}",
        "controller.resyncPeriod=10m",
        "controller.metricsPort=9090",
        "karmadaApiserver.namespace=quota-system",
        "webhook.terminationGracePeriodSeconds=45",
        "image.tag=0.2.0",
        "global.imageRegistry=registry.example",
    )
    webhook = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["template"]["spec"]
    controller = one(docs, "Deployment", "karmadaquota-controller")["spec"]["template"]["spec"]
    w_args = webhook["containers"][0]["args"]
    assert w_args[:3] == ["--log-format=text", "--log-level=debug", "webhook"]
    assert {"--reservation-ttl=90s", "--port=9443", "--metrics-port=9081"} <= set(w_args)
    assert w_args[-1] == "--no-waiting-list"
    assert webhook["containers"][0]["ports"] == [
        {"name": "https", "containerPort": 9443},
        {"name": "metrics", "containerPort": 9081},
    ]
    assert webhook["terminationGracePeriodSeconds"] == 45
    assert webhook["containers"][0]["image"] == "registry.example/karmadaquota:0.2.0"
    c_args = controller["containers"][0]["args"]
    assert {"--resync-period=10m", "--metrics-port=9090", "--namespace=quota-system"} <= set(c_args)


def test_image_tag_defaults_to_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for where, spec in pod_specs(render()).items():
        assert spec["containers"][0]["image"] == f"karmadaquota:{chart['appVersion']}", where


def test_pods_spread_over_nodes_by_default() -> None:
    docs = render()
    for name in ("karmadaquota-webhook", "karmadaquota-controller"):
        d = one(docs, "Deployment", name)
        (tsc,) = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert tsc["topologyKey"] == "kubernetes.io/hostname"
        assert tsc["whenUnsatisfiable"] == "ScheduleAnyway"
        assert tsc["labelSelector"]["matchLabels"] == d["spec"]["selector"]["matchLabels"]
        assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pod_disruption_budgets() -> None:
    docs = render()
    pdbs = objects(docs, "PodDisruptionBudget")
    assert set(pdbs) == {"karmadaquota-webhook", "karmadaquota-controller"}
    for name, pdb in pdbs.items():
        assert pdb["spec"]["minAvailable"] == 1
        selector = one(docs, "Deployment", name)["spec"]["selector"]
        assert pdb["spec"]["selector"] == selector
    off = render("webhook.podDisruptionBudget.enabled=false")
    assert set(objects(off, "PodDisruptionBudget")) == {"karmadaquota-controller"}


def test_service_accounts_mount_no_token() -> None:
    sas = objects(render(), "ServiceAccount")
    assert set(sas) == {
        "karmadaquota-webhook",
        "karmadaquota-controller",
        "karmadaquota-install",
        "karmadaquota-install-apply",  # the pre-install hook's (componentCredentials)
    }
    assert all(sa["automountServiceAccountToken"] is False for sa in sas.values())


def test_the_webhook_service_targets_the_webhook_pods() -> None:
    docs = render()
    svc = one(docs, "Service", "karmadaquota-webhook")
    pods = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"] == pods
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https"}]


# ---- kubeconfigs ---------------------------------------------------------------------------


def _kubeconfig_volume(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    spec = one(docs, kind, name)["spec"]["template"]["spec"]
    (vol,) = (v for v in spec["volumes"] if v["name"] == "karmada-config")
    return dict(vol["secret"])


ADMIN = {
    "secretName": "karmada-kubeconfig",
    "items": [{"key": "kubeconfig", "path": "karmada.config"}],
}
HOOKS = [
    ("Job", "karmadaquota-install-apply"),
    ("Job", "karmadaquota-install-register"),
    ("Job", "karmadaquota-install-delete"),
    ("Job", "karmadaquota-install-delete-lease"),
    ("CronJob", "karmadaquota-rotate-credentials"),
]


def _pod_kubeconfig_volume(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    if kind != "CronJob":
        return _kubeconfig_volume(docs, kind, name)
    spec = one(docs, kind, name)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (vol,) = (v for v in spec["volumes"] if v["name"] == "karmada-config")
    return dict(vol["secret"])


def test_by_default_each_component_uses_its_own_issued_kubeconfig() -> None:
    """Least privilege by default: the components mount the kubeconfigs the pre-install hook
    issues for their own ServiceAccounts; only the hooks hold the admin kubeconfig."""
    docs = render()
    for component in ("webhook", "controller"):
        assert _kubeconfig_volume(docs, "Deployment", f"karmadaquota-{component}") == {
            "secretName": f"karmadaquota-{component}-karmada",
            "items": [{"key": "karmada.config", "path": "karmada.config"}],
        }
    for kind, name in HOOKS:
        assert _pod_kubeconfig_volume(docs, kind, name) == ADMIN, name
    # the Secrets are the hook's, not Helm objects: a Helm object would be created after the
    # pre-install hook wrote them, and fail
    assert not objects(docs, "Secret").keys() & {
        "karmadaquota-webhook-karmada",
        "karmadaquota-controller-karmada",
    }


def test_the_admin_kubeconfig_for_the_components_is_an_explicit_opt_in() -> None:
    docs = render("componentCredentials.enabled=false")
    for kind, name in [
        ("Deployment", "karmadaquota-webhook"),
        ("Deployment", "karmadaquota-controller"),
        *HOOKS[:4],
    ]:
        assert _kubeconfig_volume(docs, kind, name) == ADMIN, name
    assert "CronJob" not in {d["kind"] for d in docs}
    assert not objects(docs, "Secret").keys() & {
        "karmadaquota-webhook-kubeconfig",
        "karmadaquota-controller-kubeconfig",
    }
    (apply_c,) = one(docs, "Job", "karmadaquota-install-apply")["spec"]["template"]["spec"][
        "containers"
    ]
    assert not any(a.startswith(("--issue-kubeconfig", "--member-")) for a in apply_c["args"])


def test_issuing_the_kubeconfigs_hooks_and_rotation() -> None:
    """The pre-install hook issues both kubeconfigs (and narrows member credentials) with a
    hook-phase identity that may write only those Secrets; the CronJob does it again with the
    release's; the pre-delete hook deletes them."""
    docs = render()
    jobs = objects(docs, "Job")
    apply_pod = jobs["karmadaquota-install-apply"]["spec"]["template"]["spec"]
    (c,) = apply_pod["containers"]
    issue_args = [
        "--issue-kubeconfig=karmada-system/karmadaquota-webhook=karmadaquota-webhook-karmada",
        "--issue-kubeconfig=karmada-system/karmadaquota-controller=karmadaquota-controller-karmada",
        "--token-ttl=168h",
        "--member-secrets-role=karmada-cluster/karmadaquota-controller-cluster-secrets",
    ]
    assert c["args"][-4:] == issue_args
    assert apply_pod["serviceAccountName"] == "karmadaquota-install-apply"
    names = ["karmadaquota-webhook-karmada", "karmadaquota-controller-karmada"]
    for role, verbs in [
        (one(docs, "Role", "karmadaquota-install-apply"), ["get", "update"]),
        (one(docs, "Role", "karmadaquota-install"), ["get", "update", "delete"]),
    ]:
        assert role["rules"] == [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": names, "verbs": verbs},
        ]
    hook_phase = {
        (d["kind"], d["metadata"]["name"]): d["metadata"]["annotations"]["helm.sh/hook"]
        for d in docs
        if d["metadata"].get("name") == "karmadaquota-install-apply"
    }
    assert hook_phase == {
        (kind, "karmadaquota-install-apply"): "pre-install,pre-upgrade"
        for kind in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")
    }
    binding = one(docs, "RoleBinding", "karmadaquota-install")
    assert binding["subjects"][0]["name"] == "karmadaquota-install"
    cron = one(docs, "CronJob", "karmadaquota-rotate-credentials")
    assert cron["spec"]["schedule"] == "17 */12 * * *"
    cron_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron_pod["serviceAccountName"] == "karmadaquota-install"
    (rc,) = cron_pod["containers"]
    assert rc["args"][1:3] == ["install", "kubeconfigs"]
    assert rc["args"][-4:] == issue_args
    (d,) = jobs["karmadaquota-install-delete"]["spec"]["template"]["spec"]["containers"]
    assert [a for a in d["args"] if a.startswith("--host-secret")] == [
        f"--host-secret={n}" for n in names
    ]
    from karmadaquota.cli import _parser

    for args in (c["args"], rc["args"], d["args"]):
        _parser().parse_args(args)
    # the controller's member credentials: rules left to the hooks (never widened on apply)
    (role,) = [
        r
        for r in karmada_objects(docs)["controller-rbac.yaml"]
        if r["metadata"]["name"] == "karmadaquota-controller-cluster-secrets"
        and r["kind"] == "Role"
    ]
    assert "rules" not in role
    # no standing, non-expiring token of either identity: only the issued, expiring ones
    assert not [
        d
        for docs_ in karmada_objects(docs).values()
        for d in docs_
        if d.get("type") == "kubernetes.io/service-account-token"
    ]
    # a component given its own kubeconfig is not issued one
    docs = render("webhook.kubeconfig.secretName=mine")
    (c,) = objects(docs, "Job")["karmadaquota-install-apply"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert [a for a in c["args"] if a.startswith("--issue-kubeconfig")] == [issue_args[1]]


def test_per_component_kubeconfigs() -> None:
    docs = render(
        "webhook.kubeconfig.secretName=karmadaquota-webhook-config",
        "controller.kubeconfig.content=apiVersion: v1",
    )
    assert _kubeconfig_volume(docs, "Deployment", "karmadaquota-webhook") == {
        "secretName": "karmadaquota-webhook-config",
        "items": [{"key": "karmada.config", "path": "karmada.config"}],
    }
    assert _kubeconfig_volume(docs, "Deployment", "karmadaquota-controller") == {
        "secretName": "karmadaquota-controller-kubeconfig",
        "items": [{"key": "karmada.config", "path": "karmada.config"}],
    }
    secret = one(docs, "Secret", "karmadaquota-controller-kubeconfig")
    assert base64.b64decode(secret["data"]["karmada.config"]) == b"apiVersion: v1"
    # the hooks keep the admin kubeconfig: they create CRDs, RBAC and registrations
    for job in ("apply", "register", "delete"):
        hook = _kubeconfig_volume(docs, "Job", f"karmadaquota-install-{job}")
        assert hook["secretName"] == "karmada-kubeconfig"


# ---- hooks ---------------------------------------------------------------------------------


def test_hook_jobs_are_annotated_and_run_install() -> None:
    docs = render()
    jobs = objects(docs, "Job")
    apply_job, register_job = (
        jobs["karmadaquota-install-apply"],
        jobs["karmadaquota-install-register"],
    )
    delete_job = jobs["karmadaquota-install-delete"]
    lease_job = jobs["karmadaquota-install-delete-lease"]
    policy = "before-hook-creation,hook-succeeded"
    hooks = [
        (apply_job, "pre-install,pre-upgrade"),
        (register_job, "post-install,post-upgrade"),
        (delete_job, "pre-delete"),
        (lease_job, "post-delete"),
    ]
    for job, hook in hooks:
        ann = job["metadata"]["annotations"]
        assert ann["helm.sh/hook"] == hook
        assert ann["helm.sh/hook-delete-policy"] == policy
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    apply_args = [
        "--log-format=json",
        "install",
        "apply",
        "--kubeconfig=/etc/karmada/config/karmada.config",
        "--manifests=/etc/karmadaquota/manifests",
        "--timeout=5m",
    ]
    (a,) = apply_job["spec"]["template"]["spec"]["containers"]
    # then the componentCredentials flags (test_issuing_the_kubeconfigs_hooks_and_rotation)
    assert a["args"][:6] == apply_args
    (c,) = register_job["spec"]["template"]["spec"]["containers"]
    assert c["args"] == [
        *apply_args,
        "--ca-bundle-file=/var/serving-cert/ca.crt",
        "--wait-webhook-url=https://karmadaquota-webhook.karmada-system.svc:443/readyz",
    ]
    (d,) = delete_job["spec"]["template"]["spec"]["containers"]
    assert d["args"][1:3] == ["install", "delete"]
    assert "--delete-crd" not in d["args"]  # crd.keepOnUninstall defaults to true

    spec = register_job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["manifests"]["configMap"]["name"] == "karmadaquota-karmada-apiserver"
    assert volumes["serving-cert"]["secret"] == {
        "secretName": "karmadaquota-webhook-cert",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    # the CLI the hooks run parses these arguments
    from karmadaquota.cli import _parser

    (lease,) = lease_job["spec"]["template"]["spec"]["containers"]
    assert lease["args"][1:] == [
        "install",
        "delete-lease",
        "--kubeconfig=/etc/karmada/config/karmada.config",
        "--lease=karmada-system/karmadaquota-controller",
        "--timeout=5m",
    ]
    controller = objects(docs, "Deployment")["karmadaquota-controller"]
    (cc,) = controller["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in cc["env"]}
    ns = next(a.split("=", 1)[1] for a in cc["args"] if a.startswith("--namespace="))
    assert f"--lease={ns}/{env['KARMADAQUOTA_LEASE_NAME']}" in lease["args"]
    # pre-install and post-delete run while the release's objects do not exist: nothing of
    # the release is used but their own hook objects
    assert apply_job["spec"]["template"]["spec"]["serviceAccountName"] == (
        "karmadaquota-install-apply"  # a pre-install hook too
    )
    assert "serviceAccountName" not in lease_job["spec"]["template"]["spec"]
    lease_pod = lease_job["spec"]["template"]["spec"]
    assert {v["name"] for v in lease_pod["volumes"]} == {"karmada-config", "tmp"}
    for job_args in (a["args"], c["args"], d["args"], lease["args"]):
        _parser().parse_args(job_args)


def _hook_phase(doc: Doc) -> tuple[str, int]:
    ann = doc["metadata"].get("annotations") or {}
    return ann.get("helm.sh/hook", ""), int(ann.get("helm.sh/hook-weight", "0"))


def test_what_the_pods_need_is_applied_before_them_and_the_registration_after(
    tmp_path: Path,
) -> None:
    """`helm install --wait` runs pre-install hooks, then waits for the pods to be Ready, and
    only then runs post-install hooks: everything the pods need (the CRD, their identities and
    rights) must come from a pre-install hook, the fail-closed registration from a post-install
    one, and a pre-install hook may use nothing the release creates (it does not exist yet)."""
    docs = render()
    jobs = objects(docs, "Job")
    apply_pod = jobs["karmadaquota-install-apply"]["spec"]["template"]["spec"]
    (cm_volume,) = (v for v in apply_pod["volumes"] if "configMap" in v)
    cm = one(docs, "ConfigMap", cm_volume["configMap"]["name"])
    assert _hook_phase(cm) == ("pre-install,pre-upgrade", -10)  # before the Job (weight 0)
    assert cm["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == (
        "before-hook-creation,hook-succeeded"
    )
    release_objects = {(d["kind"], d["metadata"]["name"]) for d in docs if not _hook_phase(d)[0]}
    for v in apply_pod["volumes"]:
        for kind, ref in (
            ("Secret", v.get("secret", {}).get("secretName")),
            ("ConfigMap", v.get("configMap", {}).get("name")),
        ):
            assert (kind, ref) not in release_objects, f"pre-install hook mounts {kind} {ref}"
    # the pre-install manifests: everything but the registrations, the CRD first
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text)
    pre = install.apply_order(install.load_manifests(tmp_path))
    kinds = {o.kind.kind for o in pre}
    assert pre[0].kind.kind == "CustomResourceDefinition"
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= kinds
    assert not kinds & {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    assert {o.name for o in pre if o.kind.kind == "ClusterRole"} >= {
        "karmadaquota-view",
        "karmadaquota-edit",
    }
    # the post-install hook: the registrations only, from the release's ConfigMap
    register_pod = jobs["karmadaquota-install-register"]["spec"]["template"]["spec"]
    (reg,) = (v for v in register_pod["volumes"] if "configMap" in v)
    assert {i["key"] for i in reg["configMap"]["items"]} == {
        "validatingwebhookconfiguration.yaml",
        "mutatingwebhookconfiguration.yaml",
    }
    full = karmada_objects(docs)
    assert set(full) == set(cm["data"]) | {i["key"] for i in reg["configMap"]["items"]}
    for key, text in cm["data"].items():
        assert [d for d in yaml.safe_load_all(text) if d] == full[key], key


def test_uninstall_deletes_the_crd_only_when_asked() -> None:
    docs = render("crd.keepOnUninstall=false", "hooks.waitForWebhook=false")
    jobs = objects(docs, "Job")
    assert (
        "--delete-crd"
        in jobs["karmadaquota-install-delete"]["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    apply_args = jobs["karmadaquota-install-register"]["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert not any(a.startswith("--wait-webhook-url") for a in apply_args)


# ---- what karmada-apiserver gets -----------------------------------------------------------


def test_the_manifests_are_what_install_applies(tmp_path: Path) -> None:
    for name, text in one(render(), "ConfigMap", "karmadaquota-karmada-apiserver")["data"].items():
        (tmp_path / name).write_text(text)
    objs = install.load_manifests(tmp_path)
    kinds = [o.kind.kind for o in install.apply_order(objs)]
    assert kinds[0] == "CustomResourceDefinition"
    assert kinds[-1] == "ValidatingWebhookConfiguration"
    assert install.delete_order(objs)[0].kind.kind == "ValidatingWebhookConfiguration"


def _registration(docs: tuple[Doc, ...]) -> Doc:
    (vwc,) = karmada_objects(docs)["validatingwebhookconfiguration.yaml"]
    return vwc


def test_the_registration_is_fail_closed_fast_and_skips_system_namespaces() -> None:
    vwc = _registration(render())
    assert vwc["metadata"]["name"] == "karmadaquota"
    kust = yaml.safe_load(
        (REPO / "webhook/karmada/validatingwebhookconfiguration.yaml").read_text()
    )
    assert [w["name"] for w in vwc["webhooks"]] == [w["name"] for w in kust["webhooks"]]
    for w, k in zip(vwc["webhooks"], kust["webhooks"], strict=True):
        assert w["failurePolicy"] == "Fail"
        assert w["timeoutSeconds"] <= 3
        (expr,) = w["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name"
        assert expr["operator"] == "NotIn"
        assert SYSTEM_NAMESPACES | {"karmada-cluster"} <= set(expr["values"])
        path = k["clientConfig"]["url"].rsplit("/", 1)[1]
        assert w["clientConfig"] == {
            "url": f"https://karmadaquota-webhook.karmada-system.svc:443/{path}"
        }
        # the rest is the kustomize registration's
        same = {f: v for f, v in k.items() if f not in ("clientConfig", "namespaceSelector")}
        assert {f: w.get(f) for f in same} == same


def test_the_queue_registration_is_the_kustomize_one() -> None:
    """The MutatingWebhookConfiguration (queueing): CREATE only, the enforced namespaces, Ignore
    on failure (the validating webhook alone charges), at the chart's Service URL."""
    (mwc,) = karmada_objects(render())["mutatingwebhookconfiguration.yaml"]
    kust = yaml.safe_load((REPO / "webhook/karmada/mutatingwebhookconfiguration.yaml").read_text())
    assert mwc["metadata"]["name"] == kust["metadata"]["name"] == "karmadaquota"
    ((w,), (k,)) = (mwc["webhooks"], kust["webhooks"])
    assert w["clientConfig"] == {
        "url": "https://karmadaquota-webhook.karmada-system.svc:443/mutate-resourcebinding"
    }
    assert w["namespaceSelector"]["matchLabels"] == k["namespaceSelector"]["matchLabels"]
    assert w["rules"][0]["operations"] == ["CREATE"]
    same = {f: v for f, v in k.items() if f not in ("clientConfig", "namespaceSelector")}
    assert {f: w.get(f) for f in same} == same


def test_the_webhook_url_host_is_overridable_and_in_the_certificate() -> None:
    docs = render("karmadaApiserver.webhookURLHost=quota.example.internal")
    for w in _registration(docs)["webhooks"]:
        assert w["clientConfig"]["url"].startswith("https://quota.example.internal:443/")
    assert "quota.example.internal" in _serving_cert(docs)[0]


def test_the_rbac_is_the_kustomize_rbac() -> None:
    manifests = karmada_objects(render("componentCredentials.enabled=false"))
    for component in ("webhook", "controller"):
        chart = by_kind(manifests[f"{component}-rbac.yaml"])
        kust = by_kind(
            d
            for f in ("rbac.yaml", "serviceaccount.yaml")
            for d in yaml.safe_load_all((REPO / component / "karmada" / f).read_text())
        )
        assert set(chart) == set(kust), component
        for key, k in kust.items():
            c = chart[key]
            assert c["metadata"].get("namespace") == k["metadata"].get("namespace"), key
            for field in ("rules", "roleRef", "subjects", "type"):
                assert c.get(field) == k.get(field), (key, field)
            assert c["metadata"].get("annotations") == k["metadata"].get("annotations"), key


def test_the_aggregated_roles_are_the_kustomize_ones() -> None:
    """Namespace users read quotas through view/edit/admin (api/rbac/): the same names, rules
    and aggregation labels; nothing on quotas beyond reading for edit and admin."""
    chart = by_kind(karmada_objects(render())["aggregated-roles.yaml"])
    kust = by_kind(
        yaml.safe_load_all((REPO / "api/rbac/aggregate-to-view-edit-admin.yaml").read_text())
    )
    assert (
        set(chart)
        == set(kust)
        == {
            ("ClusterRole", "karmadaquota-view"),
            ("ClusterRole", "karmadaquota-edit"),
        }
    )
    for key, k in kust.items():
        assert chart[key]["rules"] == k["rules"], key
        aggregation = {
            label: v
            for label, v in chart[key]["metadata"]["labels"].items()
            if label.startswith("rbac.authorization.k8s.io/")
        }
        assert aggregation == k["metadata"]["labels"], key
    verbs = {v for r in kust[("ClusterRole", "karmadaquota-view")]["rules"] for v in r["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert kust[("ClusterRole", "karmadaquota-edit")]["rules"] == []


def test_controller_extra_rules_are_appended() -> None:
    rule = "controller.extraRules[0].apiGroups[0]=batch"
    docs = render(
        rule,
        "controller.extraRules[0].resources[0]=jobs",
        "controller.extraRules[0].verbs={get,patch}",
    )
    role = by_kind(karmada_objects(docs)["controller-rbac.yaml"])[
        ("ClusterRole", "karmadaquota-controller")
    ]
    assert role["rules"][-1] == {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "patch"],
    }


# ---- certificates --------------------------------------------------------------------------


def _serving_cert(docs: tuple[Doc, ...]) -> tuple[list[str], Doc]:
    secret = one(docs, "Secret", "karmadaquota-webhook-cert")
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(names.get_values_for_type(x509.DNSName)), secret


def test_self_signed_secret_holds_the_ca_and_a_certificate_it_signed() -> None:
    docs = render()
    dns, secret = _serving_cert(docs)
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert "karmadaquota-webhook.karmada-system.svc" in dns
    # what an upgrade compares to decide whether to re-sign (names, expiry)
    annotations = secret["metadata"]["annotations"]
    assert annotations["karmadaquota.io/dns-names"].split(",") == dns
    assert int(annotations["karmadaquota.io/not-after"]) > 0
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    # ECDSA P-256: each TLS handshake the API server opens costs the webhook one signature
    for c in (ca, cert):
        key = c.public_key()
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    # the CA, kept across upgrades (lookup) so the caBundle never changes; never mounted
    ca_secret = one(docs, "Secret", "karmadaquota-webhook-ca")
    assert ca_secret["data"]["tls.crt"] == secret["data"]["ca.crt"]
    for spec in pod_specs(docs).values():
        assert all(
            v.get("secret", {}).get("secretName") != "karmadaquota-webhook-ca"
            for v in spec["volumes"]
        )


def test_cert_manager_mode_issues_the_secret_from_a_ca_issuer_chain() -> None:
    docs = render("certificates.mode=certManager")
    assert "karmadaquota-webhook-cert" not in objects(docs, "Secret")
    cert = one(docs, "Certificate", "karmadaquota-webhook")
    assert cert["spec"]["secretName"] == "karmadaquota-webhook-cert"
    assert "karmadaquota-webhook.karmada-system.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == "karmadaquota-ca"
    ca_issuer = one(docs, "Issuer", "karmadaquota-ca")
    ca_cert = one(docs, "Certificate", "karmadaquota-webhook-ca")
    assert ca_cert["spec"]["isCA"] is True
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    assert one(docs, "Issuer", "karmadaquota-selfsigned")["spec"] == {"selfSigned": {}}

    own = render(
        "certificates.mode=certManager",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
        "certificates.certManager.issuerRef.name=corp-ca",
    )
    assert not objects(own, "Issuer")
    assert one(own, "Certificate", "karmadaquota-webhook")["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "corp-ca",
    }


def test_existing_secret_mode_mounts_that_secret() -> None:
    docs = render(*MODES[2])
    assert not {"karmadaquota-webhook-cert", "karmadaquota-webhook-ca"} & set(
        objects(docs, "Secret")
    )
    webhook = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["template"]["spec"]
    hook = one(docs, "Job", "karmadaquota-install-register")["spec"]["template"]["spec"]
    for spec in (webhook, hook):
        (vol,) = (v for v in spec["volumes"] if v["name"] == "serving-cert")
        assert vol["secret"]["secretName"] == "my-cert"


# ---- monitoring ----------------------------------------------------------------------------


def test_monitoring_objects_are_off_by_default_and_select_the_metrics_services() -> None:
    assert not {"ServiceMonitor", "PrometheusRule"} & {d["kind"] for d in render()}
    docs = render("serviceMonitor.enabled=true")
    services = objects(docs, "Service")
    monitors = objects(docs, "ServiceMonitor")
    assert set(monitors) == {"karmadaquota-webhook", "karmadaquota-controller"}
    for name, monitor in monitors.items():
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [
            s for s in services.values() if selector.items() <= s["metadata"]["labels"].items()
        ]
        assert [s["metadata"]["name"] for s in matched] == [f"{name}-metrics"]
        pods = one(docs, "Deployment", name)["spec"]["selector"]["matchLabels"]
        assert matched[0]["spec"]["selector"] == pods
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics"
        (port,) = matched[0]["spec"]["ports"]
        assert port["targetPort"] == "metrics"


# ---- network and metrics security (docs/security.md) ---------------------------------------


def test_network_policies_admit_the_webhook_port_from_karmada_apiserver_only() -> None:
    docs = render()
    policies = objects(docs, "NetworkPolicy")
    assert set(policies) == {"karmadaquota-webhook", "karmadaquota-controller"}
    apiserver = [{"podSelector": {"matchLabels": {"app": "karmada-apiserver"}}}]
    scrapers = [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    for name, policy in policies.items():
        pods = one(docs, "Deployment", name)["spec"]["selector"]["matchLabels"]
        assert policy["spec"]["podSelector"] == {"matchLabels": pods}
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
        assert all(len(r["ports"]) == 1 for r in policy["spec"]["ingress"])
        assert rules.pop("metrics") == scrapers
        assert rules == ({"https": apiserver} if name.endswith("webhook") else {})
        # the named ports exist on the pods they select
        (c,) = one(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
        assert {p["name"] for p in c["ports"]} >= {
            r["ports"][0]["port"] for r in policy["spec"]["ingress"]
        }


def test_network_policy_selectors_come_from_values_and_an_empty_one_is_refused() -> None:
    docs = render(
        "networkPolicy.karmadaApiserver[0].podSelector.matchLabels.component=kas",
        "networkPolicy.scrapers[0].namespaceSelector.matchLabels.team=obs",
    )
    webhook = one(docs, "NetworkPolicy", "karmadaquota-webhook")
    rules = {r["ports"][0]["port"]: r["from"] for r in webhook["spec"]["ingress"]}
    assert rules["https"] == [{"podSelector": {"matchLabels": {"component": "kas"}}}]
    assert rules["metrics"][0]["namespaceSelector"] == {"matchLabels": {"team": "obs"}}
    assert not objects(render("networkPolicy.enabled=false"), "NetworkPolicy")
    # `from: []` would admit every source: the schema refuses an empty list
    for key in ("scrapers", "karmadaApiserver"):
        proc = helm(
            *("template", "kq", str(CHART)),
            *("--set-json", f"networkPolicy.{key}=[]"),
            check=False,
        )
        assert proc.returncode != 0 and "minItems" in proc.stderr + proc.stdout, key


def _args(docs: tuple[Doc, ...], name: str) -> list[str]:
    pod = one(docs, "Deployment", name)["spec"]["template"]["spec"]
    return list(pod["containers"][0]["args"])


def test_metrics_need_a_token_the_host_api_server_authorizes_by_default() -> None:
    docs = render()
    for name in ("karmadaquota-webhook", "karmadaquota-controller"):
        args = _args(docs, name)
        assert "--metrics-auth=tokenreview" in args, name
        assert "--metrics-bind-address=0.0.0.0" in args, name
    (role,) = [r for n, r in objects(docs, "ClusterRole").items() if n.endswith("metrics-auth")]
    assert role["rules"] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    binding = one(docs, "ClusterRoleBinding", "karmadaquota-metrics-auth")
    assert binding["roleRef"]["name"] == "karmadaquota-metrics-auth"
    assert {(s["name"], s["namespace"]) for s in binding["subjects"]} == {
        ("karmadaquota-webhook", NS),
        ("karmadaquota-controller", NS),
    }
    reader = one(docs, "ClusterRole", "karmadaquota-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "karmadaquota-metrics-reader" not in objects(docs, "ClusterRoleBinding")
    prom = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    bound = render(
        "metricsAuth.readers[0].kind=ServiceAccount",
        "metricsAuth.readers[0].name=prometheus-k8s",
        "metricsAuth.readers[0].namespace=monitoring",
    )
    assert one(bound, "ClusterRoleBinding", "karmadaquota-metrics-reader")["subjects"] == [prom]
    monitors = objects(render("serviceMonitor.enabled=true"), "ServiceMonitor")
    for monitor in monitors.values():
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_metrics_auth_none_serves_metrics_to_the_pod_only_and_mounts_no_token() -> None:
    docs = render("metricsAuth.mode=none")
    for name in ("karmadaquota-webhook", "karmadaquota-controller"):
        assert "--metrics-auth=none" in _args(docs, name)
        pod = one(docs, "Deployment", name)["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
    assert not {n for n in objects(docs, "ClusterRole") if "metrics" in n}
    assert "bearerTokenFile" not in str(
        render("metricsAuth.mode=none", "serviceMonitor.enabled=true")
    )
    proc = helm("template", "kq", str(CHART), "--set", "metricsAuth.mode=open", check=False)
    assert proc.returncode != 0


def test_the_webhook_probes_use_the_metrics_port() -> None:
    pod = one(render(), "Deployment", "karmadaquota-webhook")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] == "metrics", probe
        assert c[probe]["httpGet"].get("scheme", "HTTP") == "HTTP", probe


def test_client_ca_makes_the_webhook_require_client_certificates() -> None:
    assert not [a for a in _args(render(), "karmadaquota-webhook") if "client-ca" in a]
    docs = render("webhook.clientCA.secretName=kas-client-ca")
    assert "--client-ca-file=/var/client-ca/ca.crt" in _args(docs, "karmadaquota-webhook")
    pod = one(docs, "Deployment", "karmadaquota-webhook")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/var/client-ca"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/var/client-ca"]["name"]]["secret"] == {
        "secretName": "kas-client-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }


def test_the_docs_upgrade_keeping_new_chart_defaults() -> None:
    """`helm upgrade --reuse-values` freezes the old chart's defaults, so values a newer chart
    adds render empty; the docs say `--reset-then-reuse-values` (the chart e2e upgrades so)."""
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    upgrades = [
        (doc.name, line)
        for doc in docs
        for line in doc.read_text().splitlines()
        if "helm upgrade" in line and "values" in line
    ]
    assert upgrades, "docs/install.md shows the upgrade"
    assert [u for u in upgrades if "--reuse-values" in u[1]] == []


def test_the_webhook_trusts_the_controllers_identity_and_the_admins() -> None:
    """docs/security.md: who may write bindings where a quota is. The controller admits queued
    bindings with its own identity on karmada-apiserver; Karmada's components are admins."""
    args = _args(render(), "karmadaquota-webhook")
    assert "--trusted-user=system:serviceaccount:karmada-system:karmadaquota-controller" in args
    assert "--trusted-group=system:masters" in args
    more = _args(
        render("webhook.trustedUsers={system:karmada:*}", "webhook.trustedGroups={karmada}"),
        "karmadaquota-webhook",
    )
    assert "--trusted-user=system:karmada:*" in more
    assert "--trusted-group=karmada" in more and "--trusted-group=system:masters" not in more


def test_the_platform_team_extends_the_override_allow_list() -> None:
    """docs/security.md: webhook.overrideAllowedPaths become --override-allowed-path flags;
    the schema refuses what is not a JSON pointer below the root."""
    assert not [a for a in _args(render(), "karmadaquota-webhook") if "override-allowed" in a]
    paths = "{/spec/template/spec/priorityClassName,/spec/template/spec/containers/*/workingDir}"
    args = _args(render(f"webhook.overrideAllowedPaths={paths}"), "karmadaquota-webhook")
    assert "--override-allowed-path=/spec/template/spec/priorityClassName" in args
    assert "--override-allowed-path=/spec/template/spec/containers/*/workingDir" in args
    for bad in ('["spec/replicas"]', '["/"]'):
        proc = helm(
            *("template", "kq", str(CHART)),
            *("--set-json", f"webhook.overrideAllowedPaths={bad}"),
            check=False,
        )
        assert proc.returncode != 0 and "overrideAllowedPaths" in proc.stderr + proc.stdout, bad


def test_cluster_override_policies_reach_the_override_webhook() -> None:
    """A ClusterOverridePolicy is cluster scoped: its rule has scope Cluster, and the webhook
    decides where it may apply (karmadaquota.webhook.override: admit_override)."""
    (hook,) = [
        w
        for w in _registration(render())["webhooks"]
        if w["name"] == "overridepolicy.quota.karmada.io"
    ]
    scopes = {r["resources"][0]: r["scope"] for r in hook["rules"]}
    assert scopes == {"overridepolicies": "Namespaced", "clusteroverridepolicies": "Cluster"}


def test_declared_workload_kinds_reach_both_programs_with_the_rights_to_read_them() -> None:
    """docs/charging.md, "Which kinds are charged": both programs charge with the same kinds,
    so `workloadKinds` gives each the same `--workload-kind` and the rights to watch it."""
    cloneset = (
        "workloadKinds[0].apiVersion=apps.kruise.io/v1alpha1",
        "workloadKinds[0].kind=CloneSet",
        "workloadKinds[0].resource=clonesets",
        "workloadKinds[0].replicas=spec.replicas",
        "workloadKinds[0].podTemplate=spec.template",
    )
    rc = tuple(
        s.replace("[0]", "[1]")
        for s in (
            "workloadKinds[0].apiVersion=v1",
            "workloadKinds[0].kind=ReplicationController",
            "workloadKinds[0].resource=replicationcontrollers",
            "workloadKinds[0].replicas=spec.replicas",
            "workloadKinds[0].podTemplate=spec.template",
        )
    )
    docs = render(*cloneset, *rc)
    want = [
        "--workload-kind=apps.kruise.io/v1alpha1/CloneSet=clonesets:spec.replicas:spec.template",
        "--workload-kind=v1/ReplicationController=replicationcontrollers:spec.replicas:"
        "spec.template",
    ]
    manifests = karmada_objects(docs)
    for component, verbs in (
        ("webhook", ["get", "list", "watch"]),
        ("controller", ["list", "watch"]),
    ):
        args = _args(docs, f"karmadaquota-{component}")
        assert [a for a in args if a.startswith("--workload-kind")] == want, component
        role = by_kind(manifests[f"{component}-rbac.yaml"])[
            ("ClusterRole", f"karmadaquota-{component}")
        ]
        assert {"apiGroups": ["apps.kruise.io"], "resources": ["clonesets"], "verbs": verbs} in (
            role["rules"]
        ), component
        assert {"apiGroups": [""], "resources": ["replicationcontrollers"], "verbs": verbs} in (
            role["rules"]
        ), component
    assert not [a for a in _args(render(), "karmadaquota-webhook") if "workload-kind" in a]
    # their templates reach /validate-template as the built-in kinds' do (a pod that grows)
    (vwc,) = manifests["validatingwebhookconfiguration.yaml"]
    hooks = {w["name"]: w for w in vwc["webhooks"]}
    declared = hooks["declared-template.quota.karmada.io"]
    assert declared["clientConfig"]["url"].endswith("/validate-template")
    assert [(r["apiGroups"], r["apiVersions"], r["resources"]) for r in declared["rules"]] == [
        (["apps.kruise.io"], ["v1alpha1"], ["clonesets"]),
        ([""], ["v1"], ["replicationcontrollers"]),
    ]
    (default,) = karmada_objects(render())["validatingwebhookconfiguration.yaml"]
    assert "declared-template.quota.karmada.io" not in {w["name"] for w in default["webhooks"]}
