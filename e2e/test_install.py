"""The install of docs/install.md, done for real on the bed as an operator would.

`kubectl apply -k` puts `api/`, `webhook/karmada/` and `controller/karmada/` on
karmada-apiserver and `webhook/`, `controller/` on a host cluster (a member of the bed plays the
host); the kubeconfig step of docs/install.md runs as written (TokenRequest tokens of the
ServiceAccounts the manifests create). The webhook and the controller run from the image built
from this tree (hack/build-image.sh) exactly as the applied Deployments declare — args, env,
securityContext, the applied Secrets read-only at their mountPaths, only the declared emptyDirs
writable (e2e.testbed.kubelet) — with the identities the RBAC manifests grant. Only what cannot
hold on one shared machine is substituted, each named in e2e.testbed.kubelet: the host network
with listen addresses 127.0.0.1 and free ports; and the webhook registration's URL host (the
Service is not reachable from the bed) and its caBundle, which `hack/gen-webhook-certs.sh` fills
in.

Drift fails the test: a flag the CLI does not accept, a Secret or key the Deployment mounts that
the documented steps do not create, a probe or Service port that is not the one the arguments
serve, or a right the RBAC manifests do not grant (`is forbidden` in a log, or a check below).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.testbed import TestBed, kubelet, product
from e2e.testbed.installed import (
    SYSTEM,
    VWC,
    check_drain,
    check_end_to_end,
    check_tenant_reads_its_quota,
    container_port,
    flag,
    forbidden_lines,
    materialize,
    pod_of,
    point_registration_at,
    probe,
    run_documented,
)
from karmadaquota.kube.client import KubeClient

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
KARMADA_KUSTOMIZATIONS = ["webhook/karmada", "controller/karmada"]
HOST_KUSTOMIZATIONS = ["webhook", "controller"]
# The documented kubeconfig step, run as written.
KUBECONFIG_STEP = re.compile(r"<!-- install: kubeconfigs[^\n]*-->\s*```bash\n(.*?)```", re.S)


@contextlib.contextmanager
def installed(bed: TestBed, host: str, work: Path) -> Iterator[None]:
    """docs/install.md steps 1-4 with kubectl; everything but the CRD removed afterwards."""

    def kubectl(*args: str, cluster: str = "karmada") -> str:
        return bed.kubectl(*args, cluster=cluster).stdout

    try:
        if not bed.get("namespace", SYSTEM, cluster=host):
            kubectl("create", "namespace", SYSTEM, cluster=host)
        kubectl("apply", "-k", str(REPO / "api"))
        for k in KARMADA_KUSTOMIZATIONS:
            kubectl("apply", "-k", str(REPO / k))
        # the kubeconfig step as documented, against the bed's kubeconfigs
        shutil.copy(bed.karmada_kubeconfig, work / "karmada-apiserver.config")
        shutil.copy(bed.kubeconfig(host), work / "host.config")
        (script,) = KUBECONFIG_STEP.findall((REPO / "docs" / "install.md").read_text())
        run_documented(bed, script, work, "kubeconfig step")
        for k in HOST_KUSTOMIZATIONS:
            kubectl("apply", "-k", str(REPO / k), cluster=host)
        yield
    finally:
        # the registration first: with failurePolicy Fail it would refuse every binding
        bed.kubectl("delete", "validatingwebhookconfiguration", VWC, "--ignore-not-found")
        for k in KARMADA_KUSTOMIZATIONS:
            bed.kubectl("delete", "-k", str(REPO / k), "--ignore-not-found", check=False)
        for k in HOST_KUSTOMIZATIONS:
            bed.kubectl("delete", "-k", str(REPO / k), "--ignore-not-found", cluster=host)
        for name in ("webhook-config", "controller-config", "webhook-cert"):
            bed.kubectl(
                *("delete", "secret", f"karmadaquota-{name}", "-n", SYSTEM, "--ignore-not-found"),
                cluster=host,
            )


@pytest.mark.smoke
async def test_install_as_documented_refuses_and_counts(
    testbed: TestBed, karmada_client: KubeClient, namespace: str, tmp_path: Path, image: str
) -> None:
    """Both Deployments' containers run from the built image under their declared
    securityContext (e2e.testbed.kubelet): read-only root, uid/gid without a passwd entry,
    only the declared emptyDirs writable. Before the fix the webhook died at start-up with
    `No usable temporary directory found` and the controller with `getpwuid(): uid not found`."""
    host = sorted(testbed.members)[0]
    cert = testbed.serving_cert("install-webhook")
    procs: list[product.Proc] = []
    with installed(testbed, host, tmp_path):
        # the serving certificate Secret, as hack/gen-webhook-certs.sh creates it on the host
        testbed.kubectl(
            *("-n", SYSTEM, "create", "secret", "tls", "karmadaquota-webhook-cert"),
            f"--cert={cert.cert}",
            f"--key={cert.key}",
            cluster=host,
        )
        deployments = {
            name: testbed.get("deployment", f"karmadaquota-{name}", cluster=host, namespace=SYSTEM)
            for name in ("webhook", "controller")
        }
        assert all(deployments.values()), "webhook/ and controller/ create both Deployments"
        hook, hook_c = materialize(
            testbed, host, pod_of(deployments["webhook"]), tmp_path / "w", image
        )
        ctrl, ctrl_c = materialize(
            testbed, host, pod_of(deployments["controller"]), tmp_path / "c", image
        )
        try:
            procs.append(kubelet.start(testbed, "install-webhook", hook))
            procs.append(kubelet.start(testbed, "install-controller", ctrl))
            port = hook.ports["--port"]
            ctx = product.WebhookProc(procs[0], port, cert.ca_bundle).ssl_context()
            await product.wait_ready(f"https://127.0.0.1:{port}/readyz", ctx, procs[0])
            await probe(hook_c, "--metrics-port", hook, None)  # the HTTPS port may ask certs
            await probe(ctrl_c, "--metrics-port", ctrl, None)
            await asyncio.to_thread(point_registration_at, testbed, port, cert.ca_bundle)
            await check_ports(testbed, host, deployments)
            await check_end_to_end(testbed, karmada_client, namespace)
            await check_tenant_reads_its_quota(testbed, namespace)  # api/rbac/
            assert forbidden_lines(*procs) == []
            for p in procs:
                assert p.popen.poll() is None, f"{p.name} exited:\n{p.tail()}"
            await check_drain(procs[0], port, ctx)
        finally:
            for p in procs:
                p.stop()
                kubelet.remove(p.name)


async def check_ports(bed: TestBed, host: str, deployments: dict[str, Any]) -> None:
    """The Service reaches the webhook's serving port; the scrape annotation names the
    controller's metrics port."""
    svc = bed.get("service", "karmadaquota-webhook", cluster=host, namespace=SYSTEM)
    assert svc, "webhook/ creates the Service the registration names"
    (webhook_c,) = deployments["webhook"]["spec"]["template"]["spec"]["containers"]
    serving = int(flag(webhook_c["args"], "--port") or 0)
    for p in svc["spec"]["ports"]:
        assert container_port(webhook_c, p["targetPort"]) == serving
    template = deployments["controller"]["spec"]["template"]
    (ctrl_c,) = template["spec"]["containers"]
    scrape = template["metadata"].get("annotations", {}).get("prometheus.io/port")
    assert scrape == flag(ctrl_c["args"], "--metrics-port")
