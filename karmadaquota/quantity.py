"""Exact Kubernetes `resource.Quantity` (k8s.io/apimachinery/pkg/api/resource), pure Python.

Quota decisions compare sums of quantities, so a float would eventually admit what Kubernetes
denies (or the reverse). A `Quantity` is therefore an integer count of nano-units plus the
format it prints in; parsing, arithmetic and printing follow Kubernetes' quantity.go and
suffix.go exactly, with these deliberate differences (all stricter, none looser):

- a magnitude above 2**63-1 base units is an error ("too large"); Kubernetes silently caps
  BinarySI values at 2**63-1 and keeps larger decimal ones;
- a number must have at least one digit ("Mi", "-", "." are errors; Kubernetes reads them as 0);
- a decimal exponent is an exact integer of any size (Kubernetes truncates it to int32, so that
  "1e4294967296" means 1 there).

Arithmetic is unbounded (Python ints), as Kubernetes' inf.Dec fallback is: a sum may exceed the
parse limit and still prints, but will not parse back.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_BASE_UNITS", "NANO", "Format", "Quantity", "QuantityError"]

MAX_BASE_UNITS: Final = 2**63 - 1
"""Largest magnitude a parsed quantity may have, in base units (Kubernetes' int64 bound)."""
NANO: Final = 10**9
"""Nano-units per base unit: the finest precision a quantity keeps."""
_MAX_NANOS: Final = MAX_BASE_UNITS * NANO


class QuantityError(ValueError):
    """A string (or number) that is not a valid quantity; the message names value and field."""

    def __init__(self, value: str, reason: str, field: str = "") -> None:
        self.value = value
        self.reason = reason
        self.field = field
        where = f" for {field}" if field else ""
        super().__init__(f"invalid quantity {_quote(value)}{where}: {reason}")

    def with_field(self, field: str) -> QuantityError:
        """The same error, attributed to `field` (parse results are cached without a field)."""
        return QuantityError(self.value, self.reason, field)


class Format(enum.Enum):
    """How a quantity prints; remembered from the suffix it was parsed with."""

    DECIMAL_SI = "DecimalSI"  # 12M = 12 * 10^6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2^20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
# Printing: decimal exponent (multiple of 3, from -9) -> suffix; binary power of 1024 -> suffix.
_DECIMAL_BY_EXP: Final[dict[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER: Final[tuple[str, ...]] = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")

# sign, integer digits, fraction digits; the rest of the string is the suffix. [0-9], not \d:
# Kubernetes accepts ASCII digits only.
_NUMBER_RE: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?")
_EXPONENT_RE: Final = re.compile(r"[eE]([+-]?)([0-9]+)")
# An exponent with more digits than this is astronomically out of range either way.
_MAX_EXPONENT_DIGITS: Final = 18
_HUGE_EXPONENT: Final = 10**18
# CPython refuses int(str) beyond 4300 digits; longer digit strings go through _digits_to_int.
_INT_STR_LIMIT: Final = 4000


def _quote(value: str) -> str:
    """Go-%q-like quoting, so whitespace and control characters are visible in messages."""
    return json.dumps(value, ensure_ascii=False)


def _too_large(text: str) -> QuantityError:
    return QuantityError(text, f"too large: magnitude exceeds 2^63-1 ({MAX_BASE_UNITS})")


def _digits_to_int(digits: str) -> int:
    """int(digits) for any length (only absurd inputs take the slow branch)."""
    if len(digits) <= _INT_STR_LIMIT:
        return int(digits)
    value = 0
    for i in range(0, len(digits), _INT_STR_LIMIT):
        chunk = digits[i : i + _INT_STR_LIMIT]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def _decimal_nanos(text: str, digits: str, exp10: int) -> int:
    """ceil(int(digits) * 10^exp10 * 10^9) for non-empty `digits` without leading zeros.

    Never builds numbers larger than the limit: huge exponents are decided by digit counts.
    """
    ndigits = len(digits)
    if ndigits - 1 + exp10 > 18:  # value >= 10^19 > 2^63-1
        raise _too_large(text)
    shift = exp10 + 9
    if shift >= 0:
        scale: int = 10**shift
        return int(digits) * scale
    keep = ndigits + shift  # digits at or above the nano position
    if keep <= 0:
        return 1  # below 1n: rounds up to the smallest representable amount
    head, tail = digits[:keep], digits[keep:]
    return int(head) + (1 if tail.strip("0") else 0)


def _binary_nanos(text: str, digits: str, frac_len: int, power2: int) -> int:
    """ceil(int(digits) / 10^frac_len * 2^power2 * 10^9), exactly."""
    if len(digits) - 1 - frac_len > 19:  # value >= 10^20 > 2^63-1
        raise _too_large(text)
    mantissa = _digits_to_int(digits) << power2
    if frac_len <= 9:
        scale: int = 10 ** (9 - frac_len)
        return mantissa * scale
    divisor: int = 10 ** (frac_len - 9)
    return -(-mantissa // divisor)


def _suffix_hint(suffix: str) -> str:
    """Suffixes are case-sensitive; name the ones the user probably meant."""
    lowered = suffix.lower()
    known = [*_DECIMAL_SUFFIXES, *_BINARY_SUFFIXES]
    near = sorted(s for s in known if s and s.lower() == lowered)
    if not near:
        return ""
    return " (suffixes are case-sensitive; did you mean " + " or ".join(map(_quote, near)) + "?)"


def _is_suffix(rest: str) -> bool:
    return (
        rest in _DECIMAL_SUFFIXES
        or rest in _BINARY_SUFFIXES
        or _EXPONENT_RE.fullmatch(rest) is not None
    )


def _reject(text: str, has_digits: bool, rest: str) -> QuantityError:
    """The most precise reason `text` is not a quantity (error path only)."""
    if not text:
        return QuantityError(text, "empty string")
    if any(c.isspace() for c in text):
        return QuantityError(text, "contains whitespace")
    if rest[:1] in ("+", "-"):
        return QuantityError(text, "bad number: sign only allowed at the start")
    if rest[:1] == ".":
        return QuantityError(text, "bad number: more than one decimal point")
    if not has_digits:
        if rest and _is_suffix(rest):
            return QuantityError(text, f"missing number before suffix {_quote(rest)}")
        return QuantityError(text, "missing number")
    if rest[:1] in ("e", "E") and re.fullmatch(r"[eE][+-]?[0-9]*", rest):
        return QuantityError(text, f"bad exponent {_quote(rest)}: expected e<integer>")
    return QuantityError(text, f"unknown suffix {_quote(rest)}{_suffix_hint(rest)}")


def _parse(text: str) -> Quantity:
    """Parse without caching; see Quantity.parse."""
    m = _NUMBER_RE.match(text)
    assert m is not None  # every group is optional
    sign, int_digits, frac_digits = m.group(1), m.group(2), m.group(3) or ""
    rest = text[m.end() :]
    has_digits = bool(int_digits or frac_digits)
    if not has_digits:
        raise _reject(text, has_digits, rest)

    digits = (int_digits + frac_digits).lstrip("0")
    fmt: Format
    if rest in _DECIMAL_SUFFIXES:
        fmt = Format.DECIMAL_SI
        nanos = (
            _decimal_nanos(text, digits, _DECIMAL_SUFFIXES[rest] - len(frac_digits))
            if digits
            else 0
        )
    elif rest in _BINARY_SUFFIXES:
        fmt = Format.BINARY_SI
        nanos = (
            _binary_nanos(text, digits, len(frac_digits), _BINARY_SUFFIXES[rest]) if digits else 0
        )
    else:
        em = _EXPONENT_RE.fullmatch(rest)
        if em is None:
            raise _reject(text, has_digits, rest)
        fmt = Format.DECIMAL_EXPONENT
        exp_digits = em.group(2).lstrip("0") or "0"
        exponent = int(exp_digits) if len(exp_digits) <= _MAX_EXPONENT_DIGITS else _HUGE_EXPONENT
        if em.group(1) == "-":
            exponent = -exponent
        nanos = _decimal_nanos(text, digits, exponent - len(frac_digits)) if digits else 0

    if nanos > _MAX_NANOS:
        raise _too_large(text)
    # Kubernetes: a BinarySI amount strictly between 0 and 1 in magnitude becomes DecimalSI.
    if fmt is Format.BINARY_SI and 0 < nanos < NANO:
        fmt = Format.DECIMAL_SI
    return Quantity(-nanos if sign == "-" else nanos, fmt)


# Quota strings repeat across every binding and every review: parse each distinct one once.
_parse_cached: Final = functools.lru_cache(maxsize=65536)(_parse)


@functools.lru_cache(maxsize=65536)
def _canonical(nanos: int, fmt: Format) -> str:
    """Kubernetes' CanonicalizeBytes: the largest suffix that keeps the mantissa integral."""
    if nanos == 0:
        return "0"
    sign = "-" if nanos < 0 else ""
    mag = -nanos if nanos < 0 else nanos
    if fmt is Format.BINARY_SI:
        # |v| < 1024, or not a whole number of units: printed as DecimalSI, never rounded.
        if mag >= 1024 * NANO and mag % NANO == 0:
            units, power = mag // NANO, 0
            while units & 1023 == 0 and power < 6:
                units >>= 10
                power += 1
            return f"{sign}{units}{_BINARY_BY_POWER[power]}"
        fmt = Format.DECIMAL_SI
    exp = -9
    # DecimalSI has no suffix above E (only reachable by arithmetic past the parse limit).
    limit = 18 if fmt is Format.DECIMAL_SI else None
    while mag % 1000 == 0 and (limit is None or exp < limit):
        mag //= 1000
        exp += 3
    if fmt is Format.DECIMAL_SI:
        return f"{sign}{mag}{_DECIMAL_BY_EXP[exp]}"
    return f"{sign}{mag}e{exp}" if exp else f"{sign}{mag}"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Quantity:
    """An exact quantity: `nanos` = value x 10^9, plus the format it prints in.

    Equality, hashing and ordering use the value only ("1Gi" == "1073741824"), as
    Kubernetes' Cmp does; the format only matters for printing.
    """

    nanos: int
    format: Format = Format.DECIMAL_SI

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, field: str = "") -> Quantity:
        """Parse a Kubernetes quantity string ("1500m", "2Gi", "1e3"); cached per string.

        Values finer than 1n round up, away from zero, as in Kubernetes ("0.1n" -> "1n").
        Raises QuantityError naming `text` and `field` on any bad input.
        """
        try:
            return _parse_cached(text)
        except QuantityError as e:
            raise (e.with_field(field) if field else e) from None
        except TypeError:  # unhashable or not a string
            raise QuantityError(
                repr(text), f"must be a string, not {type(text).__name__}", field
            ) from None

    @classmethod
    def from_int(cls, value: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """A whole number of base units (Kubernetes' NewQuantity), e.g. a pod count."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise QuantityError(repr(value), f"must be an int, not {type(value).__name__}")
        if abs(value) > MAX_BASE_UNITS:
            raise _too_large(str(value))
        return cls(value * NANO, fmt)

    @classmethod
    def zero(cls) -> Quantity:
        """Zero, DecimalSI (what Kubernetes' parse of "0" gives)."""
        return _ZERO

    # -- inspection ---------------------------------------------------------------------------

    @property
    def is_zero(self) -> bool:
        return self.nanos == 0

    @property
    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.nanos > 0) - (self.nanos < 0)

    def canonical(self) -> str:
        """The string Kubernetes prints for this value and format ("1500m", "1536Mi")."""
        return _canonical(self.nanos, self.format)

    def to_json(self) -> str:
        """The JSON/YAML value for status fields: the canonical string."""
        return _canonical(self.nanos, self.format)

    def as_float(self) -> float:
        """Approximate value in base units, for metrics gauges and display ONLY (lossy)."""
        return self.nanos / NANO

    def __str__(self) -> str:
        return _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"Quantity({_canonical(self.nanos, self.format)!r}, {self.format.name})"

    # -- comparison (value only) --------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.nanos == other.nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self.nanos < other.nanos
        return NotImplemented

    def __le__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self.nanos <= other.nanos
        return NotImplemented

    def __gt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self.nanos > other.nanos
        return NotImplemented

    def __ge__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self.nanos >= other.nanos
        return NotImplemented

    # -- arithmetic (exact; format rule as Kubernetes' Add/Sub) -------------------------------
    # The result keeps the left operand's format, except that a zero-valued left operand takes
    # the right one's: 0 + 1Gi prints "1Gi" whichever side the zero is on.

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos + other.nanos, self.format if self.nanos else other.format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos - other.nanos, self.format if self.nanos else other.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.nanos, self.format)

    def __mul__(self, n: int) -> Quantity:
        """Scale by a whole count (replicas); keeps the format, as Kubernetes' Mul does."""
        if isinstance(n, bool) or not isinstance(n, int):
            return NotImplemented
        return Quantity(self.nanos * n, self.format)

    __rmul__ = __mul__


_ZERO: Final = Quantity(0, Format.DECIMAL_SI)
