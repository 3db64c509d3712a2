"""The Karmada control plane as local processes.

karmada-apiserver is a kube-apiserver with its own etcd, set up for aggregation (front-proxy
CA, ``--requestheader-*``, ``--proxy-client-*``). Around it run kube-controller-manager (the
controllers Karmada's own deployment enables), karmada-aggregated-apiserver (which serves
``cluster.karmada.io``: the Cluster API is not a CRD), karmada-controller-manager (with the
``ResourceQuotaEstimate`` feature gate, which makes its resource detector copy the pod
template's ``priorityClassName`` into ``spec.replicaRequirements``), karmada-scheduler and
karmada-webhook.

Reaching local processes from the API server:

* The APIService ``v1alpha1.cluster.karmada.io`` points to a Service of type ExternalName
  whose ``externalName`` is ``127.0.0.1``, with ``spec.service.port`` set to the aggregated
  apiserver's port. The aggregator resolves an ExternalName service to ``externalName:port``
  (no endpoints, no ``--enable-aggregator-routing``) and verifies the serving certificate
  against ``<service>.<namespace>.svc``, which is one of its SANs.
* Karmada's webhook configurations (``artifacts/deploy/webhook-configuration.yaml`` in the
  Karmada module) already use ``clientConfig.url``; the host is rewritten to
  ``127.0.0.1:<port>`` and our CA is the caBundle.
* Karmada's CRDs are installed from ``charts/karmada/_crds`` (copied into the cache by
  ``hack/build-binaries.sh``) following its kustomization; the two conversion-webhook patches
  (ResourceBinding, ClusterResourceBinding) are kept, rewritten to URL form
  ``https://127.0.0.1:<webhook port>/convert``, as Karmada installs them.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from . import kubeconfig
from .cluster import MemberCluster
from .kube import COMPONENT_TIMEOUT, KubeCore
from .layout import KARMADA, Home, Inputs
from .pki import CertificateAuthority, CertKey
from .ports import free_port
from .process import Component, StartupError, Supervisor, stop_records, wait_for
from .report import Reporter
from .rest import RestClient, condition

SYSTEM_NAMESPACE = "karmada-system"
CLUSTER_NAMESPACE = "karmada-cluster"
AGGREGATED_SERVICE = "karmada-aggregated-apiserver"
WEBHOOK_SERVICE = "karmada-webhook"
CLUSTER_APISERVICE = "v1alpha1.cluster.karmada.io"
FEATURE_GATES = "ResourceQuotaEstimate=true"
KARMADA_KCM_CONTROLLERS = (
    "namespace",
    "garbagecollector",
    "serviceaccount-token",
    "clusterrole-aggregation",
    # the built-in ResourceQuota admission's usage, for the side-by-side benchmark on Pods
    "resourcequota",
)
CLUSTER_READY_TIMEOUT = 90.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Merge a strategic-merge patch that only touches maps (as Karmada's CRD patches do)."""
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


class KarmadaControlPlane:
    def __init__(
        self,
        home: Home,
        inputs: Inputs,
        supervisor: Supervisor,
        reporter: Reporter,
        apiserver_args: Sequence[str] = (),
        feature_gates: Sequence[str] = (),
        webhook_args: Sequence[str] = (),
        controller_manager_args: Sequence[str] = (),
    ) -> None:
        self.home = home
        self.apiserver_args = list(apiserver_args)
        # gates added to ResourceQuotaEstimate on karmada-webhook and karmada-controller-manager
        self.feature_gates = ",".join([FEATURE_GATES, *feature_gates])
        self.webhook_args = list(webhook_args)
        # extra flags for karmada-controller-manager (e.g. failover.CONTROLLER_MANAGER_ARGS)
        self.controller_manager_args = list(controller_manager_args)
        self.inputs = inputs
        self.report = reporter
        self.core = KubeCore(KARMADA, home, inputs, supervisor, reporter, component_prefix=KARMADA)
        self.aggregated_port = free_port()
        self.webhook_port = free_port()
        self.webhook_health_port = free_port()
        self.controller_manager_health_port = free_port()
        self.scheduler_health_port = free_port()
        self.components: dict[str, Component] = {}

    @property
    def server(self) -> str:
        return self.core.server

    @property
    def kubeconfig(self) -> Path:
        return self.home.kubeconfig(KARMADA)

    @property
    def ca(self) -> CertificateAuthority:
        return self.core.ca

    def ports(self) -> dict[str, int]:
        p = self.core.ports
        return {
            "etcd-client": p.etcd_client,
            "etcd-peer": p.etcd_peer,
            "karmada-apiserver": p.apiserver,
            "kube-controller-manager": p.controller_manager,
            "karmada-aggregated-apiserver": self.aggregated_port,
            "karmada-webhook": self.webhook_port,
            "karmada-webhook-health": self.webhook_health_port,
            "karmada-controller-manager-health": self.controller_manager_health_port,
            "karmada-scheduler-health": self.scheduler_health_port,
        }

    # ---- preparation ---------------------------------------------------------------------

    def prepare(self) -> None:
        core = self.core
        core.prepare(
            [
                "karmada-apiserver",
                f"karmada-apiserver.{SYSTEM_NAMESPACE}.svc",
                f"karmada-apiserver.{SYSTEM_NAMESPACE}.svc.cluster.local",
            ]
        )
        pki = core.pki_dir
        self._service_cert(AGGREGATED_SERVICE).write(pki, "aggregated-apiserver")
        webhook_dir = pki / "webhook"
        webhook_dir.mkdir(parents=True, exist_ok=True)
        cert = self._service_cert(WEBHOOK_SERVICE)
        (webhook_dir / "tls.crt").write_bytes(cert.cert_pem)
        (webhook_dir / "tls.key").write_bytes(cert.key_pem)
        (webhook_dir / "tls.key").chmod(0o600)
        kubeconfig.write(self.kubeconfig, core.admin_kubeconfig())

    def _service_cert(self, service: str) -> CertKey:
        return self.core.ca.serving(
            service,
            [
                f"{service}.{SYSTEM_NAMESPACE}.svc",
                f"{service}.{SYSTEM_NAMESPACE}.svc.cluster.local",
            ],
        )

    # ---- manifests -----------------------------------------------------------------------

    def webhook_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.webhook_port}{path}"

    def crds(self) -> list[dict[str, Any]]:
        root = self.inputs.karmada_crds
        try:
            kust = yaml.safe_load((root / "kustomization.yaml").read_text())
        except OSError as e:
            raise StartupError(
                f"Karmada CRDs not found in {root} ({e}); run hack/build-binaries.sh karmada"
            ) from e
        crds: dict[str, dict[str, Any]] = {}
        for res in kust.get("resources", []):
            for doc in yaml.safe_load_all((root / res).read_text()):
                if doc:
                    crds[doc["metadata"]["name"]] = doc
        for entry in kust.get("patches", []):
            path = entry["path"] if isinstance(entry, Mapping) else entry
            patch = yaml.safe_load((root / path).read_text())
            conv = patch.get("spec", {}).get("conversion", {}).get("webhook", {})
            if "clientConfig" in conv:
                conv["clientConfig"] = {
                    "url": self.webhook_url("/convert"),
                    "caBundle": _b64(self.core.ca.cert_pem),
                }
            _merge(crds[patch["metadata"]["name"]], patch)
        return list(crds.values())

    def webhook_configurations(self) -> list[dict[str, Any]]:
        src = self.inputs.karmada_module / "artifacts" / "deploy" / "webhook-configuration.yaml"
        try:
            text = src.read_text()
        except OSError as e:
            raise StartupError(
                f"{src} not found ({e}); run hack/build-binaries.sh karmada (it downloads the "
                "Karmada module)"
            ) from e
        text = text.replace("{{caBundle}}", _b64(self.core.ca.cert_pem))
        prefix = f"https://{WEBHOOK_SERVICE}.{SYSTEM_NAMESPACE}.svc:443"
        docs = [d for d in yaml.safe_load_all(text) if d]
        for doc in docs:
            for hook in doc.get("webhooks", []):
                url = hook["clientConfig"]["url"]
                if not url.startswith(prefix):
                    raise StartupError(f"unexpected webhook URL {url!r} in {src}")
                hook["clientConfig"]["url"] = self.webhook_url(url[len(prefix) :])
        return docs

    def aggregation_objects(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": AGGREGATED_SERVICE, "namespace": SYSTEM_NAMESPACE},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": CLUSTER_APISERVICE},
                "spec": {
                    "caBundle": _b64(self.core.ca.cert_pem),
                    "group": "cluster.karmada.io",
                    "groupPriorityMinimum": 2000,
                    "service": {
                        "name": AGGREGATED_SERVICE,
                        "namespace": SYSTEM_NAMESPACE,
                        "port": self.aggregated_port,
                    },
                    "version": "v1alpha1",
                    "versionPriority": 10,
                },
            },
        ]

    def bootstrap(self) -> None:
        """Namespaces, CRDs, webhook configurations and the Cluster APIService."""
        c = self.core.client(timeout=30)
        for ns in (SYSTEM_NAMESPACE, CLUSTER_NAMESPACE):
            c.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        crds = self.crds()
        for crd in crds:
            c.apply(crd)
        for obj in self.webhook_configurations() + self.aggregation_objects():
            c.apply(obj)
        self.report.step(KARMADA, f"applied {len(crds)} CRDs, webhook configurations, APIService")
        names = [crd["metadata"]["name"] for crd in crds]

        def established() -> bool:
            for n in names:
                crd = c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                if condition(crd, "Established") != "True":
                    return False
            return True

        wait_for("Karmada CRDs Established", established, COMPONENT_TIMEOUT, self.core.servers)
        self.report.step(KARMADA, "CRDs established")

    # ---- programs ------------------------------------------------------------------------

    def _start(self, program: str, argv: list[str]) -> Component:
        comp = self.core.start_program(program, argv, component=program)
        self.components[program] = comp
        return comp

    def start(self) -> None:
        core = self.core
        pki = core.pki_dir
        core.start_etcd()
        core.start_apiserver(
            [
                # As Karmada's own deployment (artifacts/deploy/karmada-apiserver.yaml).
                "--disable-admission-plugins=StorageObjectInUseProtection,ServiceAccount",
                *self.apiserver_args,
            ],
            component="karmada-apiserver",
        )
        kcm = core.start_controller_manager(KARMADA_KCM_CONTROLLERS)
        agg_kc = core.component_kubeconfig("karmada-aggregated-apiserver")
        aggregated = self._start(
            "karmada-aggregated-apiserver",
            [
                f"--kubeconfig={agg_kc}",
                f"--authentication-kubeconfig={agg_kc}",
                f"--authorization-kubeconfig={agg_kc}",
                f"--etcd-servers={core.etcd_url}",
                f"--tls-cert-file={pki / 'aggregated-apiserver.crt'}",
                f"--tls-private-key-file={pki / 'aggregated-apiserver.key'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.aggregated_port}",
                "--profiling=false",
            ],
        )
        webhook = self._start("karmada-webhook", self._webhook_argv())
        self.bootstrap()
        client = core.client()
        wait_for(
            f"APIService {CLUSTER_APISERVICE} Available",
            lambda: (
                condition(
                    client.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{CLUSTER_APISERVICE}"),
                    "Available",
                )
                == "True"
            ),
            COMPONENT_TIMEOUT,
            [aggregated, *core.servers],
        )
        self.report.step(KARMADA, "cluster.karmada.io served by karmada-aggregated-apiserver")
        cm = self._start(
            "karmada-controller-manager",
            [
                f"--kubeconfig={core.component_kubeconfig('karmada-controller-manager')}",
                "--leader-elect=false",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.controller_manager_health_port}",
                f"--feature-gates={self.feature_gates}",
                "--cluster-status-update-frequency=5s",
                *self.controller_manager_args,
            ],
        )
        scheduler = self._start(
            "karmada-scheduler",
            [
                f"--kubeconfig={core.component_kubeconfig('karmada-scheduler')}",
                "--leader-elect=false",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.scheduler_health_port}",
                "--enable-scheduler-estimator=false",
            ],
        )
        self._wait_webhook_serving(webhook)
        core.wait_healthz(kcm, core.ports.controller_manager)
        core.wait_healthz(cm, self.controller_manager_health_port, "/healthz", https=False)
        core.wait_healthz(scheduler, self.scheduler_health_port, "/healthz", https=False)

    def _webhook_argv(self) -> list[str]:
        return [
            f"--kubeconfig={self.core.component_kubeconfig('karmada-webhook')}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.webhook_port}",
            f"--cert-dir={self.core.pki_dir / 'webhook'}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self.webhook_health_port}",
            f"--feature-gates={self.feature_gates}",
            *self.webhook_args,
        ]

    def _wait_webhook_serving(self, webhook: Component) -> None:
        tls = RestClient(f"https://127.0.0.1:{self.webhook_port}", ca_file=self.core.ca_file)

        def serving() -> bool:
            try:
                tls.request("GET", "/", timeout=2)
            except OSError:
                return False
            return True

        # karmada-webhook registers no health checks; serving TLS is its readiness.
        wait_for("karmada-webhook serving TLS", serving, COMPONENT_TIMEOUT, [webhook])
        self.report.step(KARMADA, "karmada-webhook serving")

    def restart_webhook(self, webhook_args: Sequence[str]) -> None:
        """Restart karmada-webhook with ``webhook_args`` instead of the current extra flags
        (its flags are read once at start; the benchmark compares client QPS settings)."""
        old = self.components["karmada-webhook"]
        if old.record is not None:
            stop_records([old.record], grace=10, reap=old.reap)
        self.webhook_args = list(webhook_args)
        self._wait_webhook_serving(self._start("karmada-webhook", self._webhook_argv()))

    # ---- joining members -----------------------------------------------------------------

    def join_objects(self, member: MemberCluster) -> list[dict[str, Any]]:
        name = member.name

        def secret(secret_name: str, data: dict[str, bytes]) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": CLUSTER_NAMESPACE},
                "type": "Opaque",
                "data": {k: _b64(v) for k, v in data.items()},
            }

        return [
            secret(
                name,
                {"token": member.karmada_token.encode(), "caBundle": member.core.ca.cert_pem},
            ),
            secret(f"{name}-impersonator", {"token": member.impersonator_token.encode()}),
            {
                "apiVersion": "cluster.karmada.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {
                    "id": member.cluster_id(),
                    "apiEndpoint": member.server,
                    "syncMode": "Push",
                    "secretRef": {"namespace": CLUSTER_NAMESPACE, "name": name},
                    "impersonatorSecretRef": {
                        "namespace": CLUSTER_NAMESPACE,
                        "name": f"{name}-impersonator",
                    },
                },
            },
        ]

    def join(self, member: MemberCluster) -> None:
        """Register ``member`` in Push mode as `karmadactl join` does."""
        c = self.core.client()
        for obj in self.join_objects(member):
            c.apply(obj)
        self.report.step(member.name, "joined (Push mode)")

    def wait_clusters_ready(self, names: list[str]) -> None:
        c = self.core.client()
        cm = self.components["karmada-controller-manager"]

        def all_ready() -> bool:
            return all(
                condition(c.get(f"/apis/cluster.karmada.io/v1alpha1/clusters/{n}"), "Ready")
                == "True"
                for n in names
            )

        watch = [cm, *self.core.servers]
        wait_for(f"Clusters {', '.join(names)} Ready", all_ready, CLUSTER_READY_TIMEOUT, watch)
        self.report.step(KARMADA, f"clusters Ready: {', '.join(names)}")
