"""One member Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok faking N nodes of known allocatable.

kwok runs standalone (no kwokctl): it watches Nodes annotated ``kwok.x-k8s.io/node=fake`` and
plays the *Stages* given in its ``--config`` file. kwok ships its default stages as manifests in
its module (``kustomize/stage/...``); the test bed reads them from the Go module cache at run
time (node-initialize, node-heartbeat-with-lease, pod-ready/complete/delete) and passes them
explicitly, since the kwok binary alone has none. The Nodes are created by us with status
(capacity/allocatable), as kwok expects; kwok then marks them Ready and renews their leases,
and moves every pod bound to them to Running.

Karmada reaches the member with static bearer tokens (``--token-auth-file``) in
``system:masters``: one for the cluster secret and one for the impersonator secret, the two
credentials `karmadactl join` sets up with service accounts.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import kubeconfig
from .kube import MASTERS, KubeCore
from .layout import Home, Inputs
from .process import StartupError, Supervisor, wait_for
from .report import Reporter
from .rest import ApiError, condition

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_STAGES = (
    "kustomize/stage/node/fast",
    "kustomize/stage/node/heartbeat-with-lease",
    "kustomize/stage/pod/fast",
)
MEMBER_CONTROLLERS = (
    "namespace",
    "garbagecollector",
    "serviceaccount",
    "serviceaccount-token",
    "root-ca-cert-publisher",
    "deployment",
    "replicaset",
    "replicationcontroller",
    "statefulset",
    "job",
    "resourcequota",
    "podgc",
    # A member's own HorizontalPodAutoscaler sizes its workload (at least minReplicas even
    # without metrics): what the retain-replicas label would let run past a charge.
    "horizontalpodautoscaling",
    # Lifts the node.kubernetes.io/not-ready taint (added at Node creation by the
    # TaintNodesByCondition admission plugin) once kwok reports the node Ready, and watches
    # the node leases kwok renews.
    "nodelifecycle",
)
NODES_TIMEOUT = 60.0


@dataclass(frozen=True)
class NodeShape:
    """The fake nodes of one member: ``count`` nodes with this capacity (= allocatable)."""

    count: int = 3
    cpu: str = "8"
    memory: str = "32Gi"
    pods: str = "110"


def kwok_stages(kwok_module: Path) -> list[dict[str, Any]]:
    """kwok's default Stage objects, read from its module source (via each kustomization)."""
    stages: list[dict[str, Any]] = []
    for rel in KWOK_STAGES:
        d = kwok_module / rel
        try:
            kust = yaml.safe_load((d / "kustomization.yaml").read_text())
        except OSError as e:
            raise StartupError(
                f"kwok stage manifests not found in {kwok_module} ({e}); "
                "run hack/build-binaries.sh kwok (it downloads the kwok module)"
            ) from e
        for res in kust.get("resources", []):
            stages.extend(doc for doc in yaml.safe_load_all((d / res).read_text()) if doc)
    return [*map(_not_lingering, stages), LINGER_STAGE]


# A pod whose template carries this annotation (a duration, e.g. "8s") stays in its
# termination grace period that long once deleted, as a kubelet stopping a slow container
# would keep it; every other pod is removed at once (kwok's fast stage).
LINGER_ANNOTATION = "e2e.karmadaquota.io/terminating-for"
_LINGERS = f'.metadata.annotations["{LINGER_ANNOTATION}"]'
LINGER_STAGE: dict[str, Any] = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "pod-delete-after-grace"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {
            "matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": _LINGERS, "operator": "Exists"},
            ]
        },
        "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": _LINGERS}},
        "next": {"delete": True},
    },
}


def _not_lingering(stage: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-delete stage, for pods without the linger annotation."""
    if stage.get("metadata", {}).get("name") != "pod-delete":
        return stage
    spec = stage["spec"]
    exprs = [*spec["selector"]["matchExpressions"], {"key": _LINGERS, "operator": "DoesNotExist"}]
    return {**stage, "spec": {**spec, "selector": {**spec["selector"], "matchExpressions": exprs}}}


class MemberCluster:
    def __init__(
        self,
        name: str,
        home: Home,
        inputs: Inputs,
        supervisor: Supervisor,
        reporter: Reporter,
        nodes: NodeShape | None = None,
    ) -> None:
        self.name = name
        self.home = home
        self.inputs = inputs
        self.report = reporter
        self.nodes = nodes or NodeShape()
        self.core = KubeCore(name, home, inputs, supervisor, reporter, component_prefix=name)
        self.karmada_token = secrets.token_hex(24)
        self.impersonator_token = secrets.token_hex(24)

    @property
    def server(self) -> str:
        return self.core.server

    @property
    def kubeconfig(self) -> Path:
        return self.home.kubeconfig(self.name)

    def node_names(self) -> list[str]:
        return [f"{self.name}-node-{i}" for i in range(self.nodes.count)]

    def prepare(self) -> None:
        self.core.prepare()
        tokens = self.core.config_dir / "tokens.csv"
        tokens.write_text(
            f'{self.karmada_token},system:karmada:{self.name},karmada-push,"{MASTERS}"\n'
            f'{self.impersonator_token},system:karmada:impersonator,karmada-imp,"{MASTERS}"\n'
        )
        tokens.chmod(0o600)
        kwok_cfg = self.core.config_dir / "kwok.yaml"
        kwok_cfg.write_text(yaml.safe_dump_all(kwok_stages(self.inputs.kwok_module)))
        kubeconfig.write(self.kubeconfig, self.core.admin_kubeconfig())

    def node_object(self, name: str) -> dict[str, Any]:
        n = self.nodes
        resources = {"cpu": n.cpu, "memory": n.memory, "pods": n.pods}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/role": "agent",
                    "node-role.kubernetes.io/agent": "",
                    "topology.kubernetes.io/region": self.name,
                },
            },
            "spec": {},
            "status": {
                "allocatable": resources,
                "capacity": resources,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                },
            },
        }

    def create_nodes(self) -> None:
        c = self.core.client()
        for name in self.node_names():
            status, body = c.request("POST", "/api/v1/nodes", self.node_object(name))
            if status >= 300 and status != 409:
                raise ApiError("POST", "/api/v1/nodes", status, body)

    def _nodes_schedulable(self) -> bool:
        """Every fake node Ready and without taints (so pods can be scheduled)."""
        nodes = self.core.client().get("/api/v1/nodes") or {}
        ready = [
            n
            for n in nodes.get("items", [])
            if condition(n, "Ready") == "True" and not n.get("spec", {}).get("taints")
        ]
        return len(ready) >= self.nodes.count

    def start(self) -> None:
        core = self.core
        core.start_etcd()
        core.start_apiserver([f"--token-auth-file={core.config_dir / 'tokens.csv'}"])
        self.create_nodes()
        kcm = core.start_controller_manager(MEMBER_CONTROLLERS)
        scheduler = core.start_scheduler()
        kwok = core.start_program(
            "kwok",
            [
                f"--kubeconfig={core.component_kubeconfig('kwok')}",
                f"--config={core.config_dir / 'kwok.yaml'}",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                "--cidr=10.0.0.0/16",
                "--node-ip=127.0.0.1",
                # Renew a Lease per node (kubelet-style heartbeat); without it kwok creates none.
                "--node-lease-duration-seconds=40",
            ],
        )
        wait_for(
            f"{self.name}: {self.nodes.count} kwok nodes Ready and untainted",
            self._nodes_schedulable,
            NODES_TIMEOUT,
            [kwok, kcm, *core.servers],
        )
        self.report.step(self.name, f"{self.nodes.count} kwok nodes Ready and schedulable")
        core.wait_healthz(kcm, core.ports.controller_manager)
        core.wait_healthz(scheduler, core.ports.scheduler)

    def cluster_id(self) -> str:
        ns = self.core.client().get("/api/v1/namespaces/kube-system") or {}
        return str(ns.get("metadata", {}).get("uid", ""))
