"""The kubectl plugin without the server stack: hack/build-plugin.sh's archive runs from nothing
but its own contents and the standard library (`python -I -S`: no site-packages, no PYTHONPATH,
no script directory), the way Krew installs it (unpacked, `bin` symlinked onto PATH); and the
Krew manifest template names that archive for each platform the build supports."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.delivery.test_kubectl_plugin import FULL

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "krew" / "karmadaquota.yaml"
SERVER_ONLY = ("aiohttp", "kopf", "kubernetes_asyncio", "prometheus_client", "orjson", "multidict")


def build_plugin_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_plugin", REPO / "hack" / "build_plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out: Path) -> tuple[Path, str]:
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "build-plugin.sh"), f"--out={out}"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    path, digest = proc.stdout.splitlines()
    return Path(path), digest.removeprefix("sha256: ")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return build(tmp_path_factory.mktemp("dist"))


def isolated(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter with only the standard library importable."""
    return subprocess.run(
        [sys.executable, "-I", "-S", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd="/",
        env={**os.environ, **(env or {})},
    )


def krew_install(archive: Path, root: Path) -> Path:
    """What `kubectl krew install` does: unpack, then link `bin` into a directory on PATH."""
    store, bin_dir = root / "store", root / "bin"
    store.mkdir()
    bin_dir.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(store, filter="data")
    link = bin_dir / "kubectl-karmadaquota"
    link.symlink_to(store / "kubectl-karmadaquota")
    return link


def test_the_archive_is_named_and_hashed_as_printed(bundle: tuple[Path, str]) -> None:
    archive, digest = bundle
    target = build_plugin_module().this_target().replace("/", "_")
    assert archive.name == f"kubectl-karmadaquota_{target}.tar.gz"
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == digest


def test_the_archive_is_reproducible(bundle: tuple[Path, str], tmp_path: Path) -> None:
    assert build(tmp_path)[1] == bundle[1]


def test_the_archive_holds_the_plugin_and_not_the_server(bundle: tuple[Path, str]) -> None:
    with tarfile.open(bundle[0]) as tar:
        names = tar.getnames()
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert modes["kubectl-karmadaquota"] == 0o755
    assert "LICENSE" in names
    ours = {n.removeprefix("lib/karmadaquota/") for n in names if n.startswith("lib/karmadaquota/")}
    assert {"kubectl_plugin.py", "api.py", "frq.py", "usage_view.py"} <= ours
    assert not {n for n in ours if n.startswith(("webhook/", "controller/", "kube/"))}
    tops = {n.split("/")[1] for n in names if n.startswith("lib/") and n.count("/") > 1}
    assert {"yaml", "pydantic", "karmadaquota"} <= tops
    assert not tops & set(SERVER_ONLY)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert any(n.startswith(f"lib/{tag}/pydantic_core/_pydantic_core") for n in names)
    compiled = [n for n in names if n.endswith((".so", ".pyd")) and not n.startswith(f"lib/{tag}/")]
    assert compiled == []  # PyYAML's optional C extension is left out


def test_isolation_leaves_only_the_standard_library() -> None:
    """Guard against a vacuous test: under -I -S neither the package nor pydantic imports."""
    for module in ("karmadaquota", "pydantic", "yaml"):
        assert isolated("-c", f"import {module}").returncode != 0, module


def test_installed_like_krew_it_runs_from_its_own_contents(
    bundle: tuple[Path, str], tmp_path: Path
) -> None:
    plugin = krew_install(bundle[0], tmp_path)
    helped = isolated(str(plugin), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "describe" in helped.stdout and "import-frq" in helped.stdout

    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(FULL)}\nEOF\n")
    kubectl.chmod(0o755)
    env = {"KUBECTL": str(kubectl)}
    text = isolated(str(plugin), "describe", "team", "-n", "team-a", env=env)
    assert text.returncode == 0, text.stderr
    assert re.search(r"requests\.cpu\s+12\s+100", text.stdout), text.stdout
    assert "PriorityClass In [high]" in text.stdout  # scopes: the pydantic models at work
    as_yaml = isolated(str(plugin), "describe", "team", "-n", "team-a", "-o", "yaml", env=env)
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout)["name"] == "team"

    frqs = {
        "items": [
            {
                "metadata": {"name": "team", "namespace": "team-a"},
                "spec": {"overall": {"cpu": "10", "memory": "20Gi"}},
            }
        ]
    }
    kubectl.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(frqs)}\nEOF\n")
    imported = isolated(str(plugin), "import-frq", "-A", env=env)
    assert imported.returncode == 0, imported.stderr
    quota = yaml.safe_load(imported.stdout)
    assert quota["kind"] == "KarmadaQuota"
    assert quota["spec"]["hard"] == {"requests.cpu": "10", "requests.memory": "20Gi"}


def test_a_python_the_bundle_was_not_built_for_is_named(
    bundle: tuple[Path, str], tmp_path: Path
) -> None:
    plugin = krew_install(bundle[0], tmp_path)
    lib = plugin.resolve().parent / "lib"
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    (lib / tag).rename(lib / "cp399")
    proc = isolated(str(plugin), "--help")
    assert proc.returncode == 1
    assert "this bundle supports Python" in proc.stderr
    assert f"python3 is {sys.version_info[0]}.{sys.version_info[1]}" in proc.stderr


def test_krew_manifest_has_the_required_fields_and_names_the_built_archives() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    # `kubectl karmadaquota` is the binary kubectl-karmadaquota: Krew names it after the plugin
    assert manifest["metadata"]["name"] == "karmadaquota"
    spec = manifest["spec"]
    for field in ("version", "homepage", "shortDescription", "description", "platforms"):
        assert spec.get(field), field
    assert len(spec["shortDescription"]) <= 50
    assert "python3" in spec["caveats"] and "3.11" in spec["caveats"]
    targets = build_plugin_module().PLATFORMS
    seen = set()
    for p in spec["platforms"]:
        labels = p["selector"]["matchLabels"]
        target = f"{labels['os']}/{labels['arch']}"
        seen.add(target)
        assert p["bin"] == "kubectl-karmadaquota"
        assert p["uri"].endswith(f"/kubectl-karmadaquota_{target.replace('/', '_')}.tar.gz")
        assert re.fullmatch(r"\$\{SHA256_[A-Z0-9_]+\}|[0-9a-f]{64}", p["sha256"]), p["sha256"]
        assert p["files"] == [{"from": "*", "to": "."}]
    assert seen == set(targets)
