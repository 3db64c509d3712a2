"""`make release`: everything a user installs, built from this tree into one directory.

    hack/release.sh --repo OWNER/NAME [--out dist/release] [--skip-image]

writes to OUT (default dist/release/v<version>):

    karmadaquota-image-<version>.oci.tar       the image (hack/build-image.sh, uvloop included),
                                               as an OCI archive: `podman load` / `skopeo copy`
    karmadaquota-<version>.tgz                 the Helm chart, version and appVersion = <version>
    kubectl-karmadaquota_<os>_<arch>.tar.gz    the kubectl plugin per Krew platform
                                               (hack/build-plugin.sh)
    karmadaquota.yaml                          the Krew manifest for them: deploy/krew's template
                                               filled in (version, URLs, sha256) and checked
                                               against Krew's validation rules
    karmadaquota-<version>-py3-none-any.whl    the package (pip)
    karmadaquota-<version>.tar.gz              its sdist
    SHA256SUMS                                 of all of the above (`sha256sum -c SHA256SUMS`)

`--repo` says where the release is published (its GitHub repository): the Krew manifest's
homepage and download URLs are made from it, so no placeholder is left in what is shipped.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
KREW_TEMPLATE = REPO / "deploy" / "krew" / "karmadaquota.yaml"
PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
BIN = Path.home() / ".cache" / "karmadaquota" / "bin"
_PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+)\}")
# Krew's own rules (krew pkg/index/validation): a name of lowercase letters, digits and dashes;
# a semantic version with a leading v; https URIs; a sha256 per platform; a bin inside it.
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_SEMVER = re.compile(r"^v\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    match = re.search(r'^version = "([^"]+)"$', text, re.M)
    if match is None:
        raise SystemExit("pyproject.toml: no version")
    return match.group(1)


def fill(template: str, values: dict[str, str]) -> str:
    """The template with every ${NAME} replaced; a name without a value is an error."""
    missing = sorted(set(_PLACEHOLDER.findall(template)) - set(values))
    if missing:
        raise ValueError(f"no value for {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def krew_errors(manifest: dict[str, Any], plugin_name: str) -> list[str]:
    """What Krew's validation (and `kubectl krew install --manifest`) would refuse."""
    errors = []
    if manifest.get("apiVersion") != "krew.googlecontainertools.github.com/v1alpha2":
        errors.append(f"apiVersion {manifest.get('apiVersion')!r}")
    if manifest.get("kind") != "Plugin":
        errors.append(f"kind {manifest.get('kind')!r}")
    name = (manifest.get("metadata") or {}).get("name", "")
    if name != plugin_name or not _NAME.match(name) or name == "kubectl":
        errors.append(f"metadata.name {name!r}")
    spec = manifest.get("spec") or {}
    if not _SEMVER.match(str(spec.get("version", ""))):
        errors.append(f"spec.version {spec.get('version')!r} is not a semantic version with v")
    if not spec.get("shortDescription"):
        errors.append("spec.shortDescription is empty")
    if not str(spec.get("homepage", "")).startswith("https://"):
        errors.append(f"spec.homepage {spec.get('homepage')!r}")
    platforms = spec.get("platforms") or []
    if not platforms:
        errors.append("spec.platforms is empty")
    for i, p in enumerate(platforms):
        where = f"spec.platforms[{i}]"
        if not (p.get("selector") or {}).get("matchLabels"):
            errors.append(f"{where}.selector has no matchLabels")
        if not str(p.get("uri", "")).startswith("https://"):
            errors.append(f"{where}.uri {p.get('uri')!r} is not https")
        if not _SHA256.match(str(p.get("sha256", ""))):
            errors.append(f"{where}.sha256 {p.get('sha256')!r}")
        if not p.get("bin") or ".." in str(p["bin"]):
            errors.append(f"{where}.bin {p.get('bin')!r}")
        for f in p.get("files") or []:
            if not f.get("from") or not f.get("to") or ".." in f["to"]:
                errors.append(f"{where}.files {f!r}")
    text = yaml.safe_dump(manifest)
    if "OWNER" in text or "${" in text:
        errors.append("a placeholder is left")
    return errors


def krew_manifest(repo: str, ver: str, sha256: dict[str, str]) -> str:
    """deploy/krew's template for a release of `ver` published at github.com/`repo`."""
    values = {
        "VERSION": f"v{ver}",
        "HOMEPAGE": f"https://github.com/{repo}",
        "RELEASE_URL": f"https://github.com/{repo}/releases/download/v{ver}",
    }
    for platform, digest in sha256.items():
        values["SHA256_" + platform.replace("/", "_").upper()] = digest
    template = KREW_TEMPLATE.read_text()
    body = template[template.index("apiVersion:") :]  # the template's how-to header is not shipped
    header = f"# Krew plugin manifest of kubectl karmadaquota v{ver} (hack/release.py)\n"
    text = header + fill(body, values)
    errors = krew_errors(yaml.safe_load(text), "karmadaquota")
    if errors:
        raise ValueError("the Krew manifest would be refused: " + "; ".join(errors))
    return text


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run(*cmd: str, cwd: Path = REPO) -> str:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.PIPE, text=True).stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hack/release.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, help="OWNER/NAME on GitHub the release goes to")
    p.add_argument("--out", type=Path, help="default: dist/release/v<version>")
    p.add_argument("--skip-image", action="store_true", help="no image archive (no podman)")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+", args.repo) or "OWNER" in args.repo:
        p.error(f"--repo {args.repo!r}: expected OWNER/NAME of the repository releases go to")
    ver = version()
    out: Path = (args.out or REPO / "dist" / "release" / f"v{ver}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    if not args.skip_image:
        image = run("bash", str(REPO / "hack" / "build-image.sh")).strip().splitlines()[-1]
        archive = out / f"karmadaquota-image-{ver}.oci.tar"
        archive.unlink(missing_ok=True)
        run("podman", "save", "--format", "oci-archive", "-o", str(archive), image)
    run(
        str(BIN / "helm"),
        "package",
        str(REPO / "charts" / "karmadaquota"),
        "--version",
        ver,
        "--app-version",
        ver,
        "--destination",
        str(out),
    )
    digests = {}
    for platform in PLATFORMS:
        pythons = [a for v in PYTHONS for a in ("--python", v)]
        run(
            python,
            str(REPO / "hack" / "build_plugin.py"),
            "--out",
            str(out),
            "--target",
            platform,
            *pythons,
        )
        archive = out / f"kubectl-karmadaquota_{platform.replace('/', '_')}.tar.gz"
        digests[platform] = sha256(archive)
    (out / "karmadaquota.yaml").write_text(krew_manifest(args.repo, ver, digests))
    leftover = not (REPO / "build").exists()  # setuptools builds in the tree: tidy up after
    with tempfile.TemporaryDirectory() as tmp:
        run(
            python,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
            cwd=Path(tmp),
        )
    run(python, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})")
    if leftover:
        shutil.rmtree(REPO / "build", ignore_errors=True)
    files = sorted(f for f in out.iterdir() if f.name != "SHA256SUMS" and f.is_file())
    (out / "SHA256SUMS").write_text("".join(f"{sha256(f)}  {f.name}\n" for f in files))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
