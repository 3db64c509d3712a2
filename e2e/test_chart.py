"""`helm install`, `helm upgrade` and `helm uninstall` of charts/karmadaquota, with a real helm,
on the bed (a member plays the cluster that hosts Karmada), every container run from the built
image under its declared securityContext (e2e.testbed.kubelet).

The chart, packaged as `make release` packages it, is installed with `helm install --wait
--rollback-on-failure` (Helm 3's `--atomic`) and upgraded with `helm upgrade --wait`, as
Terraform and Argo CD do (they wait for health before post-install hooks).

No kubelet runs here: the host's pods are kwok's, which mark them Running and Ready (and hook
Jobs' Complete) without running anything, so Helm's waits pass at once. Each container the
chart declares is then run for real from its rendered spec, in the order Helm runs them: the
pre-install hook (`install apply`: the CRD, the view/edit aggregation, identities and RBAC on
karmada-apiserver), the webhook and the controller, which must become ready with only that,
then the post-install hook (`install register`: the registration); after the upgrade the
pre-upgrade hook, a webhook from the new Deployment, the post-upgrade hook; before the
uninstall the pre-delete hook (`install delete`, the registration first), after it the
post-delete hook (`install delete-lease`). Substituted, and named so: the pre-install hook's
ConfigMap, which Helm deleted once kwok completed the Job, is created again from the release's
record of it for the real run; the webhook registration's URL port (the Service is not
reachable from the bed; the chart's URL host is set to 127.0.0.1, which its certificate then
names) and `hooks.waitForWebhook=false` for the same reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.testbed import TestBed, kubelet, product
from e2e.testbed.aio import eventually
from e2e.testbed.installed import (
    RB_PATH,
    SYSTEM,
    VWC,
    check_drain,
    check_end_to_end,
    check_first_quota_as_documented,
    check_tenant_reads_its_quota,
    forbidden_lines,
    materialize,
    pod_of,
    point_registration_at,
    probe,
)
from e2e.testbed.layout import cache_dir
from e2e.testbed.storm import binding
from karmadaquota.kube.client import KubeClient, KubeError

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "karmadaquota"
RELEASE = "karmadaquota"
VALUES = [
    "image.repository=localhost/karmadaquota",
    "karmadaApiserver.webhookURLHost=127.0.0.1",
    "hooks.waitForWebhook=false",
    "webhook.replicas=1",
    "controller.replicas=1",
]
# what the chart puts on karmada-apiserver, besides the CRD (kept on uninstall by default)
KARMADA_OBJECTS = [
    ("validatingwebhookconfiguration", VWC, None),
    ("clusterrole", "karmadaquota-webhook", None),
    ("clusterrole", "karmadaquota-controller", None),
    ("clusterrolebinding", "karmadaquota-webhook", None),
    ("clusterrolebinding", "karmadaquota-controller", None),
    ("clusterrole", "karmadaquota-view", None),
    ("clusterrole", "karmadaquota-edit", None),
    ("serviceaccount", "karmadaquota-webhook", SYSTEM),
    ("serviceaccount", "karmadaquota-controller", SYSTEM),
    ("lease", "karmadaquota-controller", SYSTEM),
]
HOST_KINDS = "deployment,service,secret,configmap,serviceaccount,poddisruptionbudget,job,cronjob"
# the components' kubeconfigs the hooks issue (componentCredentials): no Helm objects
ISSUED_FOR = ("webhook", "controller")
ISSUED = [f"karmadaquota-{c}-karmada" for c in ISSUED_FOR]


@dataclass
class Release:
    bed: TestBed
    host: str
    work: Path
    image: str

    def helm(self, *args: str) -> str:
        cmd = [
            str(cache_dir() / "bin" / "helm"),
            "--kubeconfig",
            str(self.bed.kubeconfig(self.host)),
        ]
        out = subprocess.run(
            [*cmd, "--namespace", SYSTEM, *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stderr}"
        return out.stdout

    def package(self) -> Path:
        """The chart as `make release` packages it (`helm package`, version and appVersion from
        pyproject.toml): what users install."""
        version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
        assert version, "pyproject.toml has a version"
        out = self.work / "chart"
        subprocess.run(
            [
                *(str(cache_dir() / "bin" / "helm"), "package", str(CHART)),
                *("--version", version.group(1), "--app-version", version.group(1)),
                *("--destination", str(out)),
            ],
            capture_output=True,
            check=True,
            timeout=60,
        )
        return out / f"karmadaquota-{version.group(1)}.tgz"

    def set_values(self, *extra: str) -> list[str]:
        return [a for v in [*VALUES, *extra] for a in ("--set", v)]

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        """The release's hooks as rendered, by their helm.sh/hook annotation."""
        docs = [d for d in yaml.safe_load_all(self.helm("get", "hooks", RELEASE)) if d]
        out: dict[str, list[dict[str, Any]]] = {}
        for d in docs:
            out.setdefault(d["metadata"]["annotations"]["helm.sh/hook"], []).append(d)
        return out

    def host_objects(self) -> list[str]:
        out = self.bed.kubectl(
            *("get", HOST_KINDS, "-n", SYSTEM, "-o", "name"),
            f"--selector=app.kubernetes.io/instance={RELEASE}",
            cluster=self.host,
        ).stdout
        return out.split()

    async def run_hook(self, phase: list[dict[str, Any]], name: str) -> str:
        """The hook phase's Job container run for real; its output once it exited 0. The
        phase's other objects (the pre-install hook's ConfigMap and identity) were deleted by
        Helm once kwok completed the Job: they are created again from the release's record
        for the run, and deleted after it as Helm does."""
        (job,) = (d for d in phase if d["kind"] == "Job")
        return await self.run_pod(pod_of(job), name, [d for d in phase if d["kind"] != "Job"])

    async def run_pod(self, pod: dict[str, Any], name: str, others: list[dict[str, Any]]) -> str:
        for d in others:
            assert not self.bed.get(
                d["kind"], d["metadata"]["name"], cluster=self.host, namespace=SYSTEM
            ), f"Helm left hook {d['kind']} {d['metadata']['name']} (hook-succeeded)"
            self.bed.kubectl("create", "-f", "-", input=yaml.safe_dump(d), cluster=self.host)
        try:
            run, _ = materialize(self.bed, self.host, pod, self.work / name, self.image)
            proc = kubelet.start(self.bed, name, run)
            try:
                code = await asyncio.to_thread(proc.popen.wait, 180)
            finally:
                proc.stop()
                kubelet.remove(name)
        finally:
            for d in others:
                self.bed.kubectl(
                    *("delete", d["kind"], d["metadata"]["name"], "-n", SYSTEM),
                    cluster=self.host,
                )
        assert code == 0, f"{name} exited {code}:\n{proc.tail()}"
        return proc.log.read_text()

    def issued(self, component: str) -> dict[str, Any] | None:
        """The kubeconfig the hooks issued for a component (componentCredentials), decoded."""
        secret = self.bed.get(
            "secret", f"karmadaquota-{component}-karmada", cluster=self.host, namespace=SYSTEM
        )
        if secret is None:
            return None
        config: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["karmada.config"]))
        return config

    def ca_bundle(self) -> bytes:
        cert = self.bed.get(
            "secret", "karmadaquota-webhook-cert", cluster=self.host, namespace=SYSTEM
        )
        assert cert, "the chart creates the serving certificate Secret"
        return base64.b64decode(cert["data"]["ca.crt"])

    def cert_data(self) -> dict[str, str]:
        cert = self.bed.get(
            "secret", "karmadaquota-webhook-cert", cluster=self.host, namespace=SYSTEM
        )
        return dict((cert or {}).get("data") or {})

    def deployment(self, name: str) -> dict[str, Any]:
        d = self.bed.get("deployment", f"karmadaquota-{name}", cluster=self.host, namespace=SYSTEM)
        assert d, f"the chart creates Deployment karmadaquota-{name}"
        return d

    async def start(self, component: str, tag: str) -> tuple[product.Proc, kubelet.Run, Any]:
        pod = pod_of(self.deployment(component))
        run, container = materialize(self.bed, self.host, pod, self.work / tag, self.image)
        proc = kubelet.start(self.bed, tag, run)
        ctx = None
        if component == "webhook":
            ctx = product.WebhookProc(proc, run.ports["--port"], self.ca_bundle()).ssl_context()
            url = f"https://127.0.0.1:{run.ports['--port']}/readyz"
            await product.wait_ready(url, ctx, proc)
        # both probe their metrics port (the webhook's HTTPS port may ask for client certificates)
        await probe(container, "--metrics-port", run, None)
        return proc, run, ctx


@pytest.fixture
def release(testbed: TestBed, image: str, tmp_path: Path) -> Iterator[Release]:
    """The host with karmada-apiserver's admin kubeconfig as the chart expects it (Karmada's own
    chart stores it as Secret karmada-kubeconfig, key kubeconfig); whatever a failed test left
    is removed, the fail-closed registration first."""
    host = sorted(testbed.members)[0]
    rel = Release(testbed, host, tmp_path, image)
    if not testbed.get("namespace", SYSTEM, cluster=host):
        testbed.kubectl("create", "namespace", SYSTEM, cluster=host)
    testbed.kubectl(
        *("-n", SYSTEM, "create", "secret", "generic", "karmada-kubeconfig"),
        f"--from-file=kubeconfig={testbed.karmada_kubeconfig}",
        cluster=host,
    )
    try:
        yield rel
    finally:
        testbed.kubectl("delete", "validatingwebhookconfiguration", VWC, "--ignore-not-found")
        helm = [str(cache_dir() / "bin" / "helm"), "--kubeconfig", str(testbed.kubeconfig(host))]
        subprocess.run(
            [
                *helm,
                "--namespace",
                SYSTEM,
                "uninstall",
                RELEASE,
                "--no-hooks",
                "--ignore-not-found",
            ],
            capture_output=True,
            check=False,
        )
        for kind, name, ns in KARMADA_OBJECTS:
            args = ["delete", kind, name, "--ignore-not-found"]
            testbed.kubectl(*args, *(["-n", ns] if ns else []), check=False)
        testbed.kubectl(
            *("-n", SYSTEM, "delete", "secret", "karmada-kubeconfig", "--ignore-not-found"),
            *ISSUED,
            cluster=host,
        )
        testbed.kubectl(
            *("-n", SYSTEM, "delete", "serviceaccount,role,rolebinding,configmap"),
            *("karmadaquota-install-apply", "--ignore-not-found"),
            cluster=host,
        )


async def test_helm_install_upgrade_uninstall(
    release: Release, testbed: TestBed, karmada_client: KubeClient, namespace: str
) -> None:
    api = karmada_client
    procs: list[product.Proc] = []
    # a first install: no CRD yet (the pods cannot become ready without it; the pre-install
    # hook applies it again, and it is kept on uninstall)
    testbed.kubectl("delete", "crd", "karmadaquotas.quota.karmada.io", "--ignore-not-found")
    try:
        # ---- install, waiting for health: the pre-install hook applies what the pods need,
        # the post-install hook registers the webhook once they serve
        release.helm(
            "install",
            RELEASE,
            str(release.package()),
            *release.set_values(),
            "--wait",
            "--rollback-on-failure",  # Helm 3's --atomic (deprecated under that name in Helm 4)
            "--timeout",
            "3m",
        )
        hooks = release.hooks()
        assert set(hooks) == {
            "pre-install,pre-upgrade",
            "post-install,post-upgrade",
            "pre-delete",
            "post-delete",
        }
        await release.run_hook(hooks["pre-install,pre-upgrade"], "chart-hook-apply")
        crd = testbed.get("crd", "karmadaquotas.quota.karmada.io") or {}
        assert any(
            c["type"] == "Established" and c["status"] == "True"
            for c in crd.get("status", {}).get("conditions", [])
        )
        for kind, name, ns in KARMADA_OBJECTS:
            if kind in ("clusterrole", "clusterrolebinding", "serviceaccount"):
                assert testbed.get(kind, name, namespace=ns), f"pre-install applies {kind} {name}"
        assert testbed.get("validatingwebhookconfiguration", VWC) is None, (
            "the fail-closed registration must wait for the post-install hook"
        )
        # least privilege: each component's own token, in the Secret its Deployment mounts
        for component in ("webhook", "controller"):
            config = release.issued(component) or {}
            (user,) = config.get("users") or [{}]
            assert user.get("name") == f"system:serviceaccount:{SYSTEM}:karmadaquota-{component}"
        secrets_role = testbed.get(
            "role", "karmadaquota-controller-cluster-secrets", namespace="karmada-cluster"
        )
        (rule,) = (secrets_role or {}).get("rules") or [{}]
        clusters = json.loads(testbed.kubectl("get", "clusters", "-o", "json").stdout)["items"]
        assert sorted(rule.get("resourceNames", [])) == sorted(
            c["spec"]["secretRef"]["name"] for c in clusters
        ), "the controller reads the member credentials of the registered clusters only"
        # ready (their probes answer) with only what the pre-install hook applied
        webhook, run, ctx = await release.start("webhook", "chart-webhook")
        procs.append(webhook)
        controller, _, _ = await release.start("controller", "chart-controller")
        procs.append(controller)
        await release.run_hook(hooks["post-install,post-upgrade"], "chart-hook-register")
        vwc = testbed.get("validatingwebhookconfiguration", VWC)
        assert vwc, "the post-install hook registers the webhook"
        ca = release.ca_bundle()
        assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in vwc["webhooks"]} == {ca}
        selector = vwc["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]
        assert SYSTEM in selector["values"] and selector["operator"] == "NotIn"
        await asyncio.to_thread(point_registration_at, testbed, run.ports["--port"], ca)
        await check_end_to_end(testbed, api, namespace)
        await check_tenant_reads_its_quota(testbed, namespace)
        await check_first_quota_as_documented(testbed, release.work / "first-quota")

        # ---- rotation: the CronJob issues fresh tokens into the same Secrets
        before = {c: (release.issued(c) or {})["users"][0]["user"]["token"] for c in ISSUED_FOR}
        cron = testbed.get(
            "cronjob", "karmadaquota-rotate-credentials", cluster=release.host, namespace=SYSTEM
        )
        assert cron, "the chart creates the rotation CronJob"
        await release.run_pod(
            cron["spec"]["jobTemplate"]["spec"]["template"]["spec"], "chart-rotate", []
        )
        for c in ISSUED_FOR:
            token = (release.issued(c) or {})["users"][0]["user"]["token"]
            assert token and token != before[c], f"{c}: the rotation issued no new token"

        # ---- upgrade: a changed flag rolls the webhook; the CA and the caBundle stay
        cert_before = release.cert_data()
        release.helm(
            "upgrade",
            RELEASE,
            str(release.package()),
            # as docs/install.md says: the install's values kept (the URL host 127.0.0.1, one
            # replica each: a dropped one would re-sign the certificate or roll differently)
            "--reset-then-reuse-values",
            *("--set", "webhook.reservationTTL=45s"),
            "--wait",
            "--timeout",
            "3m",
        )
        assert release.cert_data() == cert_before, "an upgrade re-signed or replaced the cert"
        assert release.deployment("webhook")["spec"]["replicas"] == 1, "the install's values"
        hooks = release.hooks()
        await release.run_hook(hooks["pre-install,pre-upgrade"], "chart-hook-apply-2")
        assert (
            "--reservation-ttl=45s"
            in pod_of(release.deployment("webhook"))["containers"][0]["args"]
        )
        rolled, run2, _ = await release.start("webhook", "chart-webhook-2")  # maxSurge: 1
        procs.append(rolled)
        await release.run_hook(hooks["post-install,post-upgrade"], "chart-hook-register-2")
        vwc = testbed.get("validatingwebhookconfiguration", VWC) or {}
        assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in vwc["webhooks"]} == {ca}
        await asyncio.to_thread(point_registration_at, testbed, run2.ports["--port"], ca)
        await check_drain(webhook, run.ports["--port"], ctx)  # the old pod, terminated
        with pytest.raises(KubeError, match=r"exceeded quota: team"):
            await api.post(RB_PATH.format(ns=namespace), binding(namespace, "c", cpu="2"))
        assert forbidden_lines(*procs) == []

        # ---- uninstall: the registration goes first, then everything but the CRD
        await release.run_hook(hooks["pre-delete"], "chart-hook-delete")
        assert testbed.get("validatingwebhookconfiguration", VWC) is None
        # with the registration gone, bindings are no longer checked: the fail-closed webhook
        # can stop without refusing anything
        await api.post(RB_PATH.format(ns=namespace), binding(namespace, "d", cpu="2"))
        release.helm("uninstall", RELEASE, "--wait", "--timeout", "3m")
        for p in procs:  # what deleting the Deployments does to their pods
            p.stop()
            kubelet.remove(p.name)
        await release.run_hook(hooks["post-delete"], "chart-hook-delete-lease")

        def nothing_left() -> bool:
            left = [
                f"{kind}/{name}"
                for kind, name, ns in KARMADA_OBJECTS
                if testbed.get(kind, name, namespace=ns) is not None
            ]
            assert left == [], f"left on karmada-apiserver: {left}"
            assert release.host_objects() == [], "left on the host"
            assert [c for c in ISSUED_FOR if release.issued(c)] == [], "issued kubeconfigs left"
            return True

        await eventually(nothing_left, 30, "nothing of the release left on either API server")
        assert testbed.get("crd", "karmadaquotas.quota.karmada.io"), "the CRD is kept"
    finally:
        for p in procs:
            p.stop()
            kubelet.remove(p.name)
