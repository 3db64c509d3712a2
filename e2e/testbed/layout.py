"""Where the test bed's inputs and state live on disk, and which versions it runs.

Inputs (built once, shared): ``${KARMADAQUOTA_CACHE:-~/.cache/karmadaquota}`` holds ``bin/``
(every program; the version matrix's previous Karmada in ``bin/karmada-<version>/``),
``karmada-crds/<version>/`` and the Go module cache ``gomod/`` (kwok's stage manifests are read
from there at run time, never copied into the repository).

Which Karmada a bed runs: ``$KARMADAQUOTA_KARMADA_VERSION`` — unset or ``current`` for
``KARMADA_VERSION``, ``previous`` (or that version spelled out) for ``KARMADA_PREVIOUS_VERSION``,
the version matrix's second minor. Kubernetes, etcd and kwok are the same in both.

State (one per test bed): ``${KARMADAQUOTA_HOME:-~/.karmadaquota}`` holds ``state.json``,
``kubeconfig/`` (the convention `make up` documents), ``logs/<component>.log`` and one directory per
cluster with its PKI, etcd data and component configs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "hack" / "versions.env"
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-binaries.sh"

KARMADA_VERSION_ENV = "KARMADAQUOTA_KARMADA_VERSION"
KARMADA = "karmada"
"""Name of the Karmada control plane in kubeconfig paths, logs and the ``cluster=`` argument."""

PROGRAMS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "karmada-aggregated-apiserver",
    "karmada-controller-manager",
    "karmada-scheduler",
    "karmada-webhook",
    "kwok",
)


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse ``hack/versions.env`` (KEY=VALUE lines, ``#`` comments)."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip().strip('"')
    return versions


def karmada_version(versions: dict[str, str], chosen: str | None) -> str:
    """The Karmada version ``chosen`` names (see the module docstring); anything but the two
    pinned versions is refused, since only those are built and tested."""
    current, previous = versions["KARMADA_VERSION"], versions.get("KARMADA_PREVIOUS_VERSION")
    if chosen in (None, "", "current", current):
        return current
    if previous and chosen in ("previous", previous):
        return previous
    pinned = ", ".join(v for v in (current, previous) if v)
    raise ValueError(
        f"{KARMADA_VERSION_ENV}={chosen!r}: expected current, previous or one of the versions "
        f"pinned in {VERSIONS_FILE.name} ({pinned})"
    )


def cache_dir() -> Path:
    return Path(os.environ.get("KARMADAQUOTA_CACHE", Path.home() / ".cache" / "karmadaquota"))


def default_home() -> Path:
    return Path(os.environ.get("KARMADAQUOTA_HOME", Path.home() / ".karmadaquota"))


@dataclass(frozen=True)
class Inputs:
    """Built programs and the manifests read from downloaded modules."""

    cache: Path
    versions: dict[str, str]
    karmada: str = ""
    """The Karmada version this bed runs; empty for ``KARMADA_VERSION``."""

    @classmethod
    def discover(cls) -> Inputs:
        versions = read_versions()
        chosen = karmada_version(versions, os.environ.get(KARMADA_VERSION_ENV))
        return cls(cache=cache_dir(), versions=versions, karmada=chosen)

    @property
    def karmada_version(self) -> str:
        return self.karmada or self.versions["KARMADA_VERSION"]

    @property
    def bin_dir(self) -> Path:
        return self.cache / "bin"

    def binary(self, program: str) -> Path:
        """A previous Karmada's programs sit in ``bin/karmada-<version>/`` (as
        hack/build-binaries.sh puts them), beside the current ones."""
        v = self.karmada_version
        if program.startswith("karmada-") and v != self.versions["KARMADA_VERSION"]:
            return self.bin_dir / f"karmada-{v}" / program
        return self.bin_dir / program

    def missing_programs(self) -> list[str]:
        return [p for p in PROGRAMS if not os.access(self.binary(p), os.X_OK)]

    @property
    def gomodcache(self) -> Path:
        return Path(os.environ.get("GOMODCACHE_OVERRIDE", self.cache / "gomod"))

    @property
    def karmada_crds(self) -> Path:
        return self.cache / "karmada-crds" / self.karmada_version

    @property
    def karmada_module(self) -> Path:
        v = self.karmada_version
        return self.gomodcache / "github.com" / "karmada-io" / f"karmada@{v}"

    @property
    def kwok_module(self) -> Path:
        return self.gomodcache / "sigs.k8s.io" / f"kwok@{self.versions['KWOK_VERSION']}"


@dataclass(frozen=True)
class Home:
    """One test bed's state directory."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig_dir(self) -> Path:
        return self.root / "kubeconfig"

    def kubeconfig(self, cluster: str) -> Path:
        name = "karmada-apiserver" if cluster == KARMADA else cluster
        return self.kubeconfig_dir / f"{name}.config"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def log(self, component: str) -> Path:
        return self.log_dir / f"{component}.log"

    def cluster_dir(self, cluster: str) -> Path:
        return self.root / "clusters" / cluster

    @property
    def kubectl_cache(self) -> Path:
        return self.root / "kubectl-cache"
