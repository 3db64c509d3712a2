"""The webhook's configuration inputs: the limitedResources file and the TLS reloader."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trustme

from karmadaquota.cli import main as cli_main
from karmadaquota.scopes import Expression
from karmadaquota.serving.certs import CertReloader
from karmadaquota.webhook.config import ConfigError, load_limited

GOOD = """
apiVersion: apiserver.config.k8s.io/v1
kind: ResourceQuotaConfiguration
limitedResources:
- resource: resourcebindings
  matchContains: [requests.nvidia.com/gpu]
  matchScopes:
  - {scopeName: PriorityClass, operator: In, values: [high]}
- resource: pods
  matchContains: [requests.cpu]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "limited.yaml"
    p.write_text(text)
    return p


def test_limited_resources_for_bindings_are_loaded(tmp_path: Path) -> None:
    (entry,) = load_limited(write(tmp_path, GOOD))  # the pods entry does not apply to us
    assert entry.match_contains == ("requests.nvidia.com/gpu",)
    assert entry.match_scopes == (Expression("PriorityClass", "In", frozenset({"high"})),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: AdmissionConfiguration\n", "kind must be ResourceQuotaConfiguration"),
        (
            "limitedResources: [{matchScopes: [{scopeName: PriorityClass, operator: In}]}]\n",
            "limitedResources[0].matchScopes[0].values: Required value",
        ),
        (
            "limitedResources: [{matchScopes: [{scopeName: Color, operator: In, values: [x]}]}]\n",
            'Unsupported value: "Color"',
        ),
        ("limitedResources: [{matchContainz: [cpu]}]\n", "matchContainz: Extra inputs"),
        ("limitedResources: [\n", "cannot read limitedResources configuration"),
    ],
)
def test_bad_configuration_is_refused_naming_the_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_limited(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_the_webhook_command_exits_2_on_a_bad_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "kind: Nope\n")
    code = cli_main(
        ["webhook", "--tls-cert-file=x", "--tls-private-key-file=y", f"--limited-resources={path}"]
    )
    assert code == 2
    assert "kind must be ResourceQuotaConfiguration" in capsys.readouterr().err


def _issue(ca: trustme.CA, cert: Path, key: Path) -> None:
    leaf = ca.issue_cert("127.0.0.1")
    cert.write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())


def test_a_rotated_certificate_is_reloaded_and_a_broken_one_is_not(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _issue(ca, cert, key)
    reloader = CertReloader(str(cert), str(key))
    assert isinstance(reloader.context, ssl.SSLContext)
    assert reloader.reload_if_changed() is False  # nothing changed
    _issue(ca, cert, key)
    os.utime(cert, (1, 1))  # a different mtime, as a rotation gives
    assert reloader.reload_if_changed() is True
    key.write_text("not a key")
    os.utime(key, (2, 2))
    assert reloader.reload_if_changed() is False  # keeps serving the last good certificate
