"""When the serving certificate expires, read from its PEM file with the standard library.

The stdlib has no public parser for a certificate that is not a CA (`SSLContext.get_ca_certs`
lists only CA certificates, `getpeercert()` decodes only a verified peer's), and `cryptography`
is not a runtime dependency, so the validity's notAfter is read from the DER directly: it sits
at a fixed place in every X.509 certificate (RFC 5280 §4.1), after the version, serial number,
signature algorithm and issuer.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import re
from datetime import datetime

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
