"""The serving certificate: reloaded when its files change (`CertReloader`), and when it
expires, read from its PEM file with the standard library (`not_after`).

The stdlib has no public parser for a certificate that is not a CA (`SSLContext.get_ca_certs`
lists only CA certificates, `getpeercert()` decodes only a verified peer's), and `cryptography`
is not a runtime dependency, so the validity's notAfter is read from the DER directly: it sits
at a fixed place in every X.509 certificate (RFC 5280 §4.1), after the version, serial number,
signature algorithm and issuer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import calendar
import logging
import os
import re
import ssl
from collections.abc import Callable
from datetime import datetime

from karmadaquota.serving.server import tls_context

log = logging.getLogger("karmadaquota.webhook")

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)
_SEQUENCE, _INTEGER, _UTC_TIME, _GENERALIZED_TIME, _VERSION = 0x30, 0x02, 0x17, 0x18, 0xA0


class CertificateError(ValueError):
    """The file holds no certificate, or one this parser cannot read."""


def _element(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start, end) of the contents of the DER element at `pos`."""
    if pos + 2 > len(der):
        raise CertificateError("truncated certificate")
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        size = length & 0x7F
        if not 0 < size <= 4 or pos + size > len(der):
            raise CertificateError("bad DER length")
        length = int.from_bytes(der[pos : pos + size], "big")
        pos += size
    if pos + length > len(der):
        raise CertificateError("truncated certificate")
    return tag, pos, pos + length


def _expect(der: bytes, pos: int, tag: int) -> tuple[int, int]:
    found, start, end = _element(der, pos)
    if found != tag:
        raise CertificateError(f"DER tag {found:#x} where {tag:#x} was expected")
    return start, end


def _time(der: bytes, pos: int) -> float:
    tag, start, end = _element(der, pos)
    text = der[start:end].decode("ascii", errors="replace")
    if tag == _UTC_TIME:  # YYMMDDHHMMSSZ; RFC 5280: YY >= 50 is 19YY
        when = datetime.strptime(text, "%y%m%d%H%M%SZ")
        if when.year >= 2050:
            when = when.replace(year=when.year - 100)
    elif tag == _GENERALIZED_TIME:  # YYYYMMDDHHMMSSZ
        when = datetime.strptime(text, "%Y%m%d%H%M%SZ")
    else:
        raise CertificateError(f"DER tag {tag:#x} is not a time")
    return float(calendar.timegm(when.timetuple()))


def der_not_after(der: bytes) -> float:
    """A DER certificate's notAfter, as seconds since the epoch."""
    try:
        start, _ = _expect(der, 0, _SEQUENCE)  # Certificate
        pos, _ = _expect(der, start, _SEQUENCE)  # TBSCertificate
        if _element(der, pos)[0] == _VERSION:
            pos = _element(der, pos)[2]
        pos = _expect(der, pos, _INTEGER)[1]  # serialNumber
        pos = _expect(der, pos, _SEQUENCE)[1]  # signature AlgorithmIdentifier
        pos = _expect(der, pos, _SEQUENCE)[1]  # issuer Name
        validity, _ = _expect(der, pos, _SEQUENCE)
        not_after = _element(der, validity)[2]  # past notBefore
        return _time(der, not_after)
    except ValueError as e:  # CertificateError, and strptime's
        raise CertificateError(f"unreadable certificate: {e}") from None


def not_after(cert_file: str) -> float:
    """The earliest notAfter of the certificates in a PEM file (the serving certificate and any
    intermediates sent with it: the chain stops verifying when the first of them expires)."""
    with open(cert_file, "rb") as f:
        blocks = _PEM.findall(f.read())
    if not blocks:
        raise CertificateError(f"{cert_file}: no PEM certificate")
    try:
        ders = [base64.b64decode(b"".join(block.split()), validate=True) for block in blocks]
    except binascii.Error as e:
        raise CertificateError(f"{cert_file}: bad base64: {e}") from None
    return min(der_not_after(der) for der in ders)


class CertReloader:
    """Serves with a TLS context whose certificate is reloaded when its files change."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        on_load: Callable[[str], None] | None = None,
        client_ca_file: str | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._on_load = on_load or (lambda _cert_file: None)  # after each successful load
        self._stamp = self._mtimes()
        self.context = tls_context(cert_file, key_file, client_ca_file)
        self._on_load(cert_file)

    def _mtimes(self) -> tuple[float, ...]:
        files = [self.cert_file, self.key_file, *filter(None, [self.client_ca_file])]
        return tuple(os.stat(f).st_mtime for f in files)

    def reload_if_changed(self) -> bool:
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:  # adds a rotated CA (a removed one stays until a restart)
                self.context.load_verify_locations(self.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            log.warning("serving certificate not reloaded", extra={"error": str(e)})
            return False
        self._stamp = stamp
        log.info("serving certificate reloaded", extra={"cert_file": self.cert_file})
        self._on_load(self.cert_file)
        return True

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)  # a polling period, not synchronisation
            self.reload_if_changed()
