"""The version matrix without a bed: which Karmada a bed is asked to run, where its programs
are, that `make binaries` builds both, and that docs/install.md states what CI tests."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.testbed.layout import BUILD_SCRIPT, VERSIONS_FILE, Inputs, karmada_version, read_versions

REPO = Path(__file__).resolve().parents[2]
PINS = {"KARMADA_VERSION": "v1.17.1", "KARMADA_PREVIOUS_VERSION": "v1.16.0"}


@pytest.mark.parametrize("chosen", [None, "", "current", "v1.17.1"])
def test_unset_or_current_is_the_current_karmada(chosen: str | None) -> None:
    assert karmada_version(PINS, chosen) == "v1.17.1"


@pytest.mark.parametrize("chosen", ["previous", "v1.16.0"])
def test_previous_is_the_pinned_previous_karmada(chosen: str) -> None:
    assert karmada_version(PINS, chosen) == "v1.16.0"


@pytest.mark.parametrize("chosen", ["v1.18.0", "v1.16", "latest", "Previous"])
def test_an_unpinned_version_is_refused_with_the_variable_and_the_pins(chosen: str) -> None:
    with pytest.raises(ValueError) as e:
        karmada_version(PINS, chosen)
    assert "KARMADAQUOTA_KARMADA_VERSION" in str(e.value) and "v1.16.0" in str(e.value)


def test_previous_is_refused_when_none_is_pinned() -> None:
    with pytest.raises(ValueError, match="KARMADAQUOTA_KARMADA_VERSION='previous'"):
        karmada_version({"KARMADA_VERSION": "v1.17.1"}, "previous")


def test_the_environment_chooses_the_bed_s_karmada(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = read_versions()
    monkeypatch.setenv("KARMADAQUOTA_KARMADA_VERSION", "previous")
    assert Inputs.discover().karmada_version == pinned["KARMADA_PREVIOUS_VERSION"]
    monkeypatch.delenv("KARMADAQUOTA_KARMADA_VERSION")
    assert Inputs.discover().karmada_version == pinned["KARMADA_VERSION"]


def test_a_previous_karmada_s_programs_and_crds_sit_beside_the_current_ones() -> None:
    cache = Path("/cache")
    current = Inputs(cache, dict(PINS))
    previous = Inputs(cache, dict(PINS), karmada="v1.16.0")
    assert current.binary("karmada-webhook") == cache / "bin" / "karmada-webhook"
    assert previous.binary("karmada-webhook") == cache / "bin/karmada-v1.16.0/karmada-webhook"
    # Kubernetes, etcd, kwok and kubectl are shared by both
    for program in ("kube-apiserver", "etcd", "kwok", "kubectl"):
        assert previous.binary(program) == current.binary(program) == cache / "bin" / program
    assert previous.karmada_crds == cache / "karmada-crds/v1.16.0"
    assert current.karmada_crds == cache / "karmada-crds/v1.17.1"
    assert previous.karmada_module.name == "karmada@v1.16.0"


def test_the_matrix_spans_two_karmada_minors() -> None:
    pinned = read_versions()
    minor = [
        re.fullmatch(r"v1\.(\d+)\.\d+", pinned[k])
        for k in ("KARMADA_VERSION", "KARMADA_PREVIOUS_VERSION")
    ]
    assert all(minor), pinned
    current, previous = (int(m[1]) for m in minor if m)
    assert previous < current


KARMADA_CMDS = ("controller-manager", "scheduler", "webhook", "aggregated-apiserver")


@dataclass
class StubbedBuild:
    """hack/build-binaries.sh run with `go` and `python3` stubs that record what it does, in a
    cache where every component but the previous Karmada is already built (stamped)."""

    cache: Path
    log: Path
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(BUILD_SCRIPT), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def go_calls(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def stubbed(tmp_path: Path) -> StubbedBuild:
    pinned = read_versions()
    cache, stubs = tmp_path / "cache", tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "go.log"
    (stubs / "go").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        # `go mod download -json`: a module path a stub python3 reads the `go` line from
        'case "$*" in "mod download -json"*) echo "{}";; esac\n'
        'case "$*" in "list -m -f"*) echo "$KQ_MODDIR";; esac\n'
        'case "$*" in "build"*) for a; do case "$a" in\n'
        '  */cmd/*) install /dev/null "out/${a##*/}";;\n'
        "esac; done;; esac\n"
    )
    (stubs / "python3").write_text("#!/bin/sh\ncat > /dev/null\necho 1.24.10\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    moddir = tmp_path / "karmada"
    (moddir / "charts/karmada/_crds").mkdir(parents=True)
    (moddir / "charts/karmada/_crds/kustomization.yaml").write_text("resources: []\n")
    bin_dir = cache / "bin"
    (bin_dir / ".stamps").mkdir(parents=True)
    promql = hashlib.sha256((REPO / "hack/promql-check/main.go").read_bytes()).hexdigest()
    built = {
        "kubectl": pinned["KUBECTL_WHEEL_VERSION"],
        "etcd": pinned["ETCD_VERSION"],
        "kube-apiserver": pinned["KUBERNETES_VERSION"],
        "kube-controller-manager": pinned["KUBERNETES_VERSION"],
        "kube-scheduler": pinned["KUBERNETES_VERSION"],
        "kwok": pinned["KWOK_VERSION"],
        "helm": pinned["HELM_VERSION"],
        "promql-check": f"{pinned['PROMETHEUS_VERSION']}-{promql[:12]}",
    }
    current = pinned["KARMADA_VERSION"]
    for c in KARMADA_CMDS:
        built[f"karmada-{c}"] = current
    (cache / "karmada-crds" / current).mkdir(parents=True)
    for name, version in built.items():
        (bin_dir / name).touch(mode=0o755)
        (bin_dir / ".stamps" / name).write_text(version + "\n")
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KARMADAQUOTA_CACHE": str(cache),
        "KQ_MODDIR": str(moddir),
    }
    return StubbedBuild(cache, log, env)


def test_make_binaries_builds_the_previous_karmada_too(stubbed: StubbedBuild) -> None:
    """hack/build-binaries.sh with no arguments (what `make binaries` and CI run) builds the
    previous Karmada beside the current one, and a second run only checks stamps."""
    pinned = read_versions()
    current, prev = pinned["KARMADA_VERSION"], pinned["KARMADA_PREVIOUS_VERSION"]
    first = stubbed.run().stdout
    assert f"karmada {prev}: done" in first and f"karmada {current}: up to date" in first
    bin_dir = stubbed.cache / "bin"
    for c in KARMADA_CMDS:
        assert os.access(bin_dir / f"karmada-{prev}" / f"karmada-{c}", os.X_OK), c
        assert (bin_dir / ".stamps" / f"karmada-{prev}" / f"karmada-{c}").read_text() == prev + "\n"
        assert (bin_dir / ".stamps" / f"karmada-{c}").read_text() == current + "\n"  # untouched
    assert (stubbed.cache / "karmada-crds" / prev / "kustomization.yaml").exists()
    # the wrapper module takes Karmada's own go line
    assert "mod edit -go=1.24.10" in stubbed.go_calls()
    stubbed.log.unlink()
    assert f"karmada {prev}: up to date" in stubbed.run().stdout
    assert stubbed.go_calls() == ""


@pytest.mark.parametrize("chosen", ["", "current", "previous"])
def test_a_bed_builds_only_the_karmada_it_runs(stubbed: StubbedBuild, chosen: str) -> None:
    """`make up` (hack/local-up.sh: `build-binaries.sh bed`) does not wait for the version
    matrix's other Karmada."""
    prev = read_versions()["KARMADA_PREVIOUS_VERSION"]
    out = stubbed.run("bed", KARMADAQUOTA_KARMADA_VERSION=chosen).stdout
    built = f"karmada {prev}: done" in out
    assert built == (chosen == "previous"), out
    assert "helm" not in out and "promql-check" not in out


def test_a_bed_of_an_unpinned_karmada_is_refused(stubbed: StubbedBuild) -> None:
    proc = stubbed.run("bed", check=False, KARMADAQUOTA_KARMADA_VERSION="v1.18.0")
    assert proc.returncode == 2
    assert "KARMADAQUOTA_KARMADA_VERSION=v1.18.0: expected current, previous" in proc.stderr
    assert stubbed.go_calls() == ""


def test_install_md_opens_its_prerequisites_with_the_versions_ci_tests() -> None:
    """docs/install.md: prerequisites first, "Supported versions" first among them, naming the
    Karmada versions and the Kubernetes hack/versions.env pins (a new pin fails here until the
    page says so)."""
    text = (REPO / "docs" / "install.md").read_text()
    headings = re.findall(r"^(#{2,3}) (.+)$", text, re.M)
    assert headings[:2] == [("##", "Prerequisites"), ("###", "Supported versions")], headings[:3]
    section = text.split("### Supported versions", 1)[1].split("\n## ", 1)[0]
    pinned = read_versions(VERSIONS_FILE)
    for key in ("KARMADA_VERSION", "KARMADA_PREVIOUS_VERSION"):
        assert f"**{pinned[key]}**" in section, key
    assert pinned["KUBERNETES_VERSION"].lstrip("v") in section
    assert "≥ 1.28" in section and "matchConditions" in section
    assert "spec.suspension.scheduling" in section and "v1.13" in section
