"""`make release` (hack/release.py): the Krew manifest it ships has no placeholder left and
passes Krew's validation rules; what it refuses to make."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLATFORMS = ("linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64")
DIGESTS = {p: f"{i:x}" * 64 for i, p in enumerate(PLATFORMS, start=10)}


def release() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", REPO / "hack" / "release.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_krew_manifest_is_filled_in_and_valid() -> None:
    r = release()
    text = r.krew_manifest("example-org/karmadaquota", "0.1.0", DIGESTS)
    assert "${" not in text and "OWNER" not in text
    manifest = yaml.safe_load(text)
    assert r.krew_errors(manifest, "karmadaquota") == []
    spec = manifest["spec"]
    assert spec["version"] == "v0.1.0"
    assert spec["homepage"] == "https://github.com/example-org/karmadaquota"
    by_platform = {
        f"{p['selector']['matchLabels']['os']}/{p['selector']['matchLabels']['arch']}": p
        for p in spec["platforms"]
    }
    assert set(by_platform) == set(DIGESTS) == set(r.PLATFORMS)
    for platform, p in by_platform.items():
        assert p["sha256"] == DIGESTS[platform]
        assert p["uri"] == (
            "https://github.com/example-org/karmadaquota/releases/download/v0.1.0/"
            f"kubectl-karmadaquota_{platform.replace('/', '_')}.tar.gz"
        )


def test_a_platform_without_its_digest_is_refused() -> None:
    digests = {p: d for p, d in DIGESTS.items() if p != "darwin/arm64"}
    with pytest.raises(ValueError, match="SHA256_DARWIN_ARM64"):
        release().krew_manifest("example-org/karmadaquota", "0.1.0", digests)


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("spec", "version"), "0.1.0", "spec.version"),
        (("spec", "homepage"), "https://github.com/OWNER/karmadaquota", "placeholder"),
        (("spec", "platforms", 0, "sha256"), "abc", "sha256"),
        (("spec", "platforms", 1, "uri"), "http://example.org/a.tar.gz", "https"),
        (("metadata", "name"), "KarmadaQuota", "metadata.name"),
    ],
)
def test_krews_rules_catch_what_krew_would_refuse(
    path: tuple[Any, ...], value: str, error: str
) -> None:
    r = release()
    manifest = yaml.safe_load(r.krew_manifest("example-org/karmadaquota", "0.1.0", DIGESTS))
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = r.krew_errors(manifest, "karmadaquota")
    assert len(errors) == 1 and error in errors[0], errors


@pytest.mark.parametrize("repo", ["", "OWNER/karmadaquota", "no-slash"])
def test_a_release_needs_the_repository_it_is_published_at(repo: str) -> None:
    with pytest.raises(SystemExit):
        release().main(["--repo", repo, "--skip-image"])
