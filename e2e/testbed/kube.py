"""The Kubernetes core every cluster of the test bed shares: PKI, etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, all on 127.0.0.1 with free ports.

The Karmada control plane (`karmada.KarmadaControlPlane`) and each member
(`cluster.MemberCluster`) build on one `KubeCore` and add their own flags and programs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import kubeconfig
from .layout import Home, Inputs
from .pki import CertFiles, CertificateAuthority, CertKey, service_account_key_pair
from .ports import free_port
from .process import Component, Supervisor, wait_for
from .report import Reporter
from .rest import RestClient

SERVICE_CIDR = "10.96.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "system:admin"
MASTERS = "system:masters"

ETCD_TIMEOUT = 30.0
APISERVER_TIMEOUT = 90.0
COMPONENT_TIMEOUT = 60.0
# Shutdown tiers (see process.stop_in_order): clients, then API servers, then etcd.
TIERS = {"kube-apiserver": 1, "karmada-aggregated-apiserver": 1, "etcd": 2}


@dataclass
class Ports:
    etcd_client: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    scheduler: int = field(default_factory=free_port)


class KubeCore:
    """PKI, etcd and the Kubernetes control-plane programs of one cluster."""

    def __init__(
        self,
        name: str,
        home: Home,
        inputs: Inputs,
        supervisor: Supervisor,
        reporter: Reporter,
        component_prefix: str,
    ) -> None:
        self.name = name
        self.home = home
        self.inputs = inputs
        self.sup = supervisor
        self.report = reporter
        self.prefix = component_prefix
        self.dir = home.cluster_dir(name)
        self.pki_dir = self.dir / "pki"
        self.config_dir = self.dir / "config"
        self.ports = Ports()
        self.components: dict[str, Component] = {}
        self.apiserver: Component | None = None
        self._ca: CertificateAuthority | None = None
        self._admin: CertKey | None = None

    # ---- PKI and kubeconfigs -------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def ca(self) -> CertificateAuthority:
        assert self._ca is not None, "prepare() first"
        return self._ca

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def admin_files(self) -> CertFiles:
        return CertFiles(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")

    def prepare(self, extra_server_hosts: Sequence[str] = ()) -> None:
        """Create the CA, the apiserver's serving cert, the SA key pair and the admin cert."""
        for d in (self.pki_dir, self.config_dir, self.dir / "etcd"):
            d.mkdir(parents=True, exist_ok=True)
        self._ca = CertificateAuthority.create(f"{self.name}-ca")
        self._ca.write(self.pki_dir, "ca")
        self._ca.serving(
            "kube-apiserver",
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "10.96.0.1",
                *extra_server_hosts,
            ],
        ).write(self.pki_dir, "apiserver")
        service_account_key_pair().write(self.pki_dir, "sa")
        # Front proxy (aggregation layer): lets aggregated API servers, and the authentication
        # delegation of kube-controller-manager/-scheduler, trust the API server's proxy.
        front_proxy = CertificateAuthority.create(f"{self.name}-front-proxy-ca")
        front_proxy.write(self.pki_dir, "front-proxy-ca")
        front_proxy.client("front-proxy-client").write(self.pki_dir, "front-proxy-client")
        self._admin = self._ca.client(ADMIN_USER, [MASTERS])
        self._admin.write(self.pki_dir, "admin")

    def admin_kubeconfig(self) -> dict[str, Any]:
        assert self._admin is not None
        return kubeconfig.build(
            self.name,
            self.server,
            self.ca.cert_pem,
            client_cert_pem=self._admin.cert_pem,
            client_key_pem=self._admin.key_pem,
        )

    def component_kubeconfig(self, component: str) -> Path:
        """A kubeconfig for one program, with its own client cert (in system:masters)."""
        cert = self.ca.client(f"system:testbed:{component}", [MASTERS])
        cfg = kubeconfig.build(
            self.name,
            self.server,
            self.ca.cert_pem,
            client_cert_pem=cert.cert_pem,
            client_key_pem=cert.key_pem,
        )
        return kubeconfig.write(self.config_dir / f"{component}.kubeconfig", cfg)

    def client(self, timeout: float = 10.0) -> RestClient:
        return RestClient(
            self.server, ca_file=self.ca_file, client=self.admin_files, timeout=timeout
        )

    # ---- programs ------------------------------------------------------------------------

    def start_program(
        self, program: str, argv: Sequence[str], component: str | None = None
    ) -> Component:
        """Start ``program``; the component (and its log) is named ``<prefix>-<program>``."""
        name = component or f"{self.prefix}-{program}"
        tier = TIERS.get(program, 0)
        comp = self.sup.start(
            name, [str(self.inputs.binary(program)), *argv], self.home.log(name), tier=tier
        )
        self.components[name] = comp
        return comp

    def start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        comp = self.start_program(
            "etcd",
            [
                f"--name={self.name}",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={self.name}={peer}",
                "--initial-cluster-state=new",
                # A throwaway test store: durability is not worth the fsync latency.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        probe = RestClient(client)
        wait_for(f"{comp.name} /health", lambda: probe.ok("/health"), ETCD_TIMEOUT, [comp])
        self.report.step(self.name, f"{comp.name} ready")

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd_client}"

    def start_apiserver(self, extra_args: Sequence[str] = (), component: str | None = None) -> None:
        p = self.pki_dir
        comp = self.start_program(
            "kube-apiserver",
            [
                "--advertise-address=127.0.0.1",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.apiserver}",
                f"--etcd-servers={self.etcd_url}",
                f"--client-ca-file={p / 'ca.crt'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # The "kubernetes" Service cannot point at a loopback address.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
                f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-username-headers=X-Remote-User",
                *extra_args,
            ],
            component,
        )
        self.apiserver = comp
        c = self.client(timeout=5)
        wait_for(f"{comp.name} /readyz", lambda: c.ok("/readyz"), APISERVER_TIMEOUT, [comp])
        self.report.step(self.name, f"{comp.name} ready at {self.server}")

    def start_controller_manager(self, controllers: Sequence[str]) -> Component:
        kc = self.component_kubeconfig("kube-controller-manager")
        return self.start_program(
            "kube-controller-manager",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.controller_manager}",
                "--leader-elect=false",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-name={self.name}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--profiling=false",
            ],
        )

    def start_scheduler(self) -> Component:
        kc = self.component_kubeconfig("kube-scheduler")
        return self.start_program(
            "kube-scheduler",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.scheduler}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )

    @property
    def servers(self) -> list[Component]:
        """The running API server, for `wait_for`'s ``watch`` (fail fast if it dies)."""
        return [self.apiserver] if self.apiserver is not None else []

    def wait_healthz(
        self, component: Component, port: int, path: str = "/healthz", https: bool = True
    ) -> None:
        scheme = "https" if https else "http"
        probe = RestClient(f"{scheme}://127.0.0.1:{port}", insecure=True)
        wait_for(f"{component.name} {path}", lambda: probe.ok(path), COMPONENT_TIMEOUT, [component])
        self.report.step(self.name, f"{component.name} healthy")
