"""The wheel ships only what runs in production: no test bed, no tests, no benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_wheel_holds_only_the_product(tmp_path: Path) -> None:
    # Build from a copy so that the build leaves nothing (build/, *.egg-info) in the checkout.
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".mypy_cache", "build"),
    )
    out = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("karmadaquota-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    code = sorted(n for n in names if not n.startswith("karmadaquota-"))
    assert code, "the wheel holds no modules"
    assert all(n.startswith("karmadaquota/") for n in code), code
    tops = {n.split("/")[1] for n in code}
    assert not tops & {"testbed", "tests", "e2e", "bench"}, tops
    # The production entry points are there.
    for module in ("cli.py", "webhook/app.py", "controller/main.py", "kube/client.py"):
        assert f"karmadaquota/{module}" in names


def test_the_release_workflow_publishes_what_make_release_builds() -> None:
    """.github/workflows/release.yml: on a v* tag, `make release`, then the artifacts attached
    and the image and chart pushed under the names hack/release.py gives them."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    flow = yaml.safe_load((root / ".github/workflows/release.yml").read_text())
    assert flow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    steps = [s.get("run", "") for s in flow["jobs"]["release"]["steps"]]
    text = "\n".join(steps)
    assert "make release RELEASE_REPO=" in text
    release_py = (root / "hack/release.py").read_text()
    for made in ("karmadaquota-image-{ver}.oci.tar", "karmadaquota-<version>.tgz"):
        assert made in release_py
    assert "*.oci.tar" in text and "karmadaquota-${VERSION}.tgz" in text
