"""Certificates for the test bed: CAs, serving certs for 127.0.0.1, client certs, SA keys.

Every key is ECDSA P-256 (fast to generate; Kubernetes accepts it everywhere, including the
service-account signing key, ES256). Files are PEM; keys are written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_HOSTS = ("127.0.0.1", "localhost")
_VALIDITY = dt.timedelta(days=365)
_BACKDATE = dt.timedelta(hours=1)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> CertFiles:
        return CertFiles(
            cert=_write(directory / f"{name}.crt", self.cert_pem),
            key=_write(directory / f"{name}.key", self.key_pem, private=True),
        )


def split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split host names into (DNS names, IP addresses)."""
    dns: list[str] = []
    ips: list[str] = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
        except ValueError:
            dns.append(h)
        else:
            ips.append(h)
    return dns, ips


class CertificateAuthority:
    """A self-signed CA that issues leaf certificates."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self._cert = cert
        self._key = key

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + 10 * _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, files: CertFiles) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{files.key}: expected an EC private key")
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str) -> CertFiles:
        return CertKey(self.cert_pem, _key_pem(self._key)).write(directory, name)

    def issue(
        self,
        common_name: str,
        *,
        organizations: Iterable[str] = (),
        hosts: Iterable[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> CertKey:
        """Issue a leaf certificate; ``hosts`` become DNS/IP SANs."""
        key = _new_key()
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
            )
        )
        dns, ips = split_hosts(hosts)
        if dns or ips:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def serving(self, common_name: str, extra_hosts: Iterable[str] = ()) -> CertKey:
        """A serving certificate valid for 127.0.0.1 and localhost (plus ``extra_hosts``)."""
        return self.issue(common_name, hosts=[*LOCAL_HOSTS, *extra_hosts], server=True)

    def client(self, user: str, groups: Iterable[str] = ()) -> CertKey:
        """A client certificate authenticating as ``user`` in ``groups`` (CN / O)."""
        return self.issue(user, organizations=groups, client=True)


@dataclass(frozen=True)
class KeyPair:
    """A bare key pair (the service-account signing key), both PEM."""

    public_pem: bytes
    private_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``<name>.pub`` and ``<name>.key``; return (public, private) paths."""
        return (
            _write(directory / f"{name}.pub", self.public_pem),
            _write(directory / f"{name}.key", self.private_pem, private=True),
        )


def service_account_key_pair() -> KeyPair:
    key = _new_key()
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(pub, _key_pem(key))
