"""Tests for karmadaquota.quantity: exact Kubernetes Quantity semantics.

The tables marked "k8s" are taken from Kubernetes' own documented examples and unit tests:
k8s.io/apimachinery/pkg/api/resource/quantity_test.go (TestQuantityParse, TestQuantityString,
TestQuantityParseEmit, TestNewSet, TestMilliNewSet, TestNewScaledSet, TestAdd, TestSub, TestMul,
TestQuantityAddZeroPreservesSuffix), the Quantity type's doc comment in quantity.go, and the
"Resource units in Kubernetes" page of kubernetes.io (memory: 128974848, 129e6, 129M,
128974848000m, 123Mi; cpu: 0.1 == 100m).
"""

from __future__ import annotations

import ast
import inspect
import math
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from karmadaquota import quantity as quantity_module
from karmadaquota.quantity import MAX_BASE_UNITS, NANO, Format, Quantity, QuantityError

DEC = Format.DECIMAL_SI
BIN = Format.BINARY_SI
EXP = Format.DECIMAL_EXPONENT
MAX_NANOS = MAX_BASE_UNITS * NANO


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def dec_nanos(mantissa: int, exp10: int) -> int:
    """k8s' decQuantity(mantissa, exp10, _) in nano-units."""
    scale: int = 10 ** (exp10 + 9)
    return mantissa * scale


# ---------------------------------------------------------------------------------------------
# k8s: TestQuantityParse — input -> exact value (mantissa x 10^exp) and remembered format.

K8S_PARSE_VALUES: list[tuple[str, int, int, Format]] = [
    ("0", 0, 0, DEC),
    ("0n", 0, 0, DEC),
    ("0u", 0, 0, DEC),
    ("0m", 0, 0, DEC),
    ("0Ki", 0, 0, BIN),
    ("0k", 0, 0, DEC),
    ("0Mi", 0, 0, BIN),
    ("0M", 0, 0, DEC),
    ("0Gi", 0, 0, BIN),
    ("0G", 0, 0, DEC),
    ("0Ti", 0, 0, BIN),
    ("0T", 0, 0, DEC),
    ("1", 1, 0, DEC),
    ("1Ki", 1024, 0, BIN),
    ("8Ki", 8 * 1024, 0, BIN),
    ("7Mi", 7 * 1024**2, 0, BIN),
    ("6Gi", 6 * 1024**3, 0, BIN),
    ("5Ti", 5 * 1024**4, 0, BIN),
    ("4Pi", 4 * 1024**5, 0, BIN),
    ("3Ei", 3 * 1024**6, 0, BIN),
    ("10Ti", 10 * 1024**4, 0, BIN),
    ("100Ti", 100 * 1024**4, 0, BIN),
    ("5n", 5, -9, DEC),
    ("4u", 4, -6, DEC),
    ("3m", 3, -3, DEC),
    ("9", 9, 0, DEC),
    ("8k", 8, 3, DEC),
    ("50k", 5, 4, DEC),
    ("7M", 7, 6, DEC),
    ("6G", 6, 9, DEC),
    ("5T", 5, 12, DEC),
    ("40T", 4, 13, DEC),
    ("300T", 3, 14, DEC),
    ("2P", 2, 15, DEC),
    ("1E", 1, 18, DEC),
    ("1E-3", 1, -3, EXP),
    ("1e3", 1, 3, EXP),
    ("1E6", 1, 6, EXP),
    ("1e9", 1, 9, EXP),
    ("1E12", 1, 12, EXP),
    ("1e15", 1, 15, EXP),
    ("1E18", 1, 18, EXP),
    ("1e14", 1, 14, EXP),
    ("1e13", 1, 13, EXP),
    ("100.035k", 100035, 0, DEC),
    ("0.001", 1, -3, DEC),
    ("0.0005k", 5, -1, DEC),
    ("0.005", 5, -3, DEC),
    ("0.05", 5, -2, DEC),
    ("0.5", 5, -1, DEC),
    ("0.00050k", 5, -1, DEC),
    ("0.00500", 5, -3, DEC),
    ("0.05000", 5, -2, DEC),
    ("0.50000", 5, -1, DEC),
    ("0.5e0", 5, -1, EXP),
    ("0.5e-1", 5, -2, EXP),
    ("0.5e-2", 5, -3, EXP),
    ("10.035M", 10035, 3, DEC),
    ("1.2e3", 12, 2, EXP),
    ("1.3E+6", 13, 5, EXP),
    ("1.40e9", 14, 8, EXP),
    ("1.53E12", 153, 10, EXP),
    ("1.6e15", 16, 14, EXP),
    ("1.7E18", 17, 17, EXP),
    ("9.01", 901, -2, DEC),
    ("8.1k", 81, 2, DEC),
    ("7.123456M", 7123456, 0, DEC),
    ("6.987654321G", 6987654321, 0, DEC),
    ("5.444T", 5444, 9, DEC),
    ("40.1T", 401, 11, DEC),
    ("300.2T", 3002, 11, DEC),
    ("2.5P", 25, 14, DEC),
    ("1.01E", 101, 16, DEC),
    # things that round up to 1n
    ("3.001n", 4, -9, DEC),
    ("1.1E-9", 2, -9, EXP),
    ("0.0000000001", 1, -9, DEC),
    ("0.0000000005", 1, -9, DEC),
    ("0.00000000050", 1, -9, DEC),
    ("0.5e-9", 1, -9, EXP),
    ("0.9n", 1, -9, DEC),
    ("0.00000012345", 124, -9, DEC),
    ("0.00000012354", 124, -9, DEC),
    # fractional binary
    ("100.035Ki", 10243584, -2, BIN),
    ("0.5Mi", 512 * 1024, 0, BIN),
    ("0.05Gi", 536870912, -1, BIN),
    ("0.025Ti", 274877906944, -1, BIN),
    # "things written by trolls"
    ("0.000000000001Ki", 2, -9, DEC),  # rounds up, changes format
    (".001", 1, -3, DEC),
    (".0001k", 100, -3, DEC),
    ("1.", 1, 0, DEC),
    ("1.G", 1, 9, DEC),
]


@pytest.mark.parametrize(("text", "mantissa", "exp10", "fmt"), K8S_PARSE_VALUES)
def test_k8s_parse_values(text: str, mantissa: int, exp10: int, fmt: Format) -> None:
    got = q(text)
    assert got.nanos == dec_nanos(mantissa, exp10)
    assert got.format is fmt
    # k8s runs the same table with an explicit sign
    assert q("+" + text) == got and q("+" + text).format is fmt
    neg = q("-" + text)
    assert neg.nanos == -got.nanos and neg.format is fmt


# k8s: TestQuantityString — (value, format) -> canonical string, and an alternate spelling
# that must re-emit canonically ("" = none).
K8S_STRING: list[tuple[int, Format, str, str]] = [
    (dec_nanos(1024**3, 0), BIN, "1Gi", "1024Mi"),
    (dec_nanos(300 * 1024**2, 0), BIN, "300Mi", "307200Ki"),
    (dec_nanos(6 * 1024, 0), BIN, "6Ki", ""),
    (dec_nanos(1001 * 1024**3, 0), BIN, "1001Gi", "1025024Mi"),
    (dec_nanos(1024**4, 0), BIN, "1Ti", "1024Gi"),
    (dec_nanos(5, 0), BIN, "5", "5000m"),
    (dec_nanos(500, -3), BIN, "500m", "0.5"),
    (dec_nanos(1, 9), DEC, "1G", "1000M"),
    (dec_nanos(1000, 6), DEC, "1G", "0.001T"),
    (dec_nanos(1000000, 3), DEC, "1G", ""),
    (dec_nanos(1000000000, 0), DEC, "1G", ""),
    (dec_nanos(1, -3), DEC, "1m", "1000u"),
    (dec_nanos(80, -3), DEC, "80m", ""),
    (dec_nanos(1080, -3), DEC, "1080m", "1.08"),
    (dec_nanos(108, -2), DEC, "1080m", "1080000000n"),
    (dec_nanos(10800, -4), DEC, "1080m", ""),
    (dec_nanos(300, 6), DEC, "300M", ""),
    (dec_nanos(1, 12), DEC, "1T", ""),
    (dec_nanos(1234567, 6), DEC, "1234567M", ""),
    (dec_nanos(1234567, -3), BIN, "1234567m", ""),
    (dec_nanos(3, 3), DEC, "3k", ""),
    (dec_nanos(1025, 0), BIN, "1025", ""),
    (0, DEC, "0", ""),
    (0, BIN, "0", ""),
    (dec_nanos(1, 9), EXP, "1e9", ".001e12"),
    (dec_nanos(1, -3), EXP, "1e-3", "0.001e0"),
    (dec_nanos(1, -9), EXP, "1e-9", "1000e-12"),
    (dec_nanos(80, -3), EXP, "80e-3", ""),
    (dec_nanos(300, 6), EXP, "300e6", ""),
    (dec_nanos(1, 12), EXP, "1e12", ""),
    (dec_nanos(1, 3), EXP, "1e3", ""),
    (dec_nanos(3, 3), EXP, "3e3", ""),
    (0, EXP, "0", "00"),
    (dec_nanos(1, -9), DEC, "1n", ""),
    (dec_nanos(80, -9), DEC, "80n", ""),
    (dec_nanos(1080, -9), DEC, "1080n", ""),
    (dec_nanos(108, -8), DEC, "1080n", ""),
    (dec_nanos(10800, -10), DEC, "1080n", ""),
    (dec_nanos(1, -6), DEC, "1u", ""),
    (dec_nanos(80, -6), DEC, "80u", ""),
    (dec_nanos(1080, -6), DEC, "1080u", ""),
]


@pytest.mark.parametrize(("nanos", "fmt", "expect", "alternate"), K8S_STRING)
def test_k8s_string(nanos: int, fmt: Format, expect: str, alternate: str) -> None:
    value = Quantity(nanos, fmt)
    assert str(value) == expect
    assert q(expect) == value
    if alternate:
        assert str(q(alternate)) == expect
    if nanos:
        assert str(-value) == "-" + expect  # k8s: every non-zero row negated prints "-" + expect


# Parse, then print: k8s TestQuantityParseEmit, the quantity.go doc comment, the kubernetes.io
# resource-units page, TestNewSet / TestNewScaledSet strings, plus this project's brief.
K8S_PARSE_EMIT: list[tuple[str, str]] = [
    ("1Ki", "1Ki"),
    ("1Mi", "1Mi"),
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    # quantity.go doc comment
    ("1.5", "1500m"),
    ("1.5Gi", "1536Mi"),
    # kubernetes.io "Resource units in Kubernetes"
    ("128974848", "128974848"),
    ("129e6", "129e6"),
    ("129M", "129M"),
    ("128974848000m", "128974848"),
    ("123Mi", "123Mi"),
    ("0.1", "100m"),
    ("100m", "100m"),
    # TestNewSet / TestNewScaledSet outputs, re-parsed
    ("1k", "1k"),
    ("1234k", "1234k"),
    ("1e6", "1e6"),
    ("1u", "1u"),
    # DecimalSI: largest suffix with an integral mantissa
    ("1000", "1k"),
    ("1500", "1500"),
    ("2000000", "2M"),
    ("1n", "1n"),
    ("0", "0"),
    ("0.1n", "1n"),
    ("1000m", "1"),
    ("1000000000000000000", "1E"),
    ("9223372036854775807", "9223372036854775807"),
    # BinarySI
    ("0.5Gi", "512Mi"),
    ("1536Mi", "1536Mi"),
    ("0.5Ki", "512"),
    ("0.1Ki", "102400m"),
    ("1.5Ki", "1536"),
    ("2048Ki", "2Mi"),
    ("7Ei", "7Ei"),
    ("1025Ki", "1025Ki"),
    ("0Gi", "0"),
    # DecimalExponent
    ("1e3", "1e3"),
    ("1.5e3", "1500"),
    ("12e6", "12e6"),
    ("12e+6", "12e6"),
    ("1.2e7", "12e6"),
    ("120e6", "120e6"),
    ("1E-3", "1e-3"),
    ("1e0", "1"),
    ("1e-100", "1e-9"),
    ("0.1e1", "1"),
    # negative values
    ("-1500m", "-1500m"),
    ("-1.5Gi", "-1536Mi"),
    ("-0.1n", "-1n"),
    ("-0", "0"),
]


@pytest.mark.parametrize(("text", "expect"), K8S_PARSE_EMIT)
def test_parse_emit(text: str, expect: str) -> None:
    assert str(q(text)) == expect
    assert q(text).canonical() == expect
    assert q(text).to_json() == expect


def test_k8s_new_set_formats() -> None:
    """k8s TestNewSet and TestMilliNewSet: a value in a format prints as Kubernetes prints it."""
    assert str(Quantity.from_int(1)) == "1"
    assert str(Quantity.from_int(1000)) == "1k"
    assert str(Quantity.from_int(1234000)) == "1234k"
    assert str(Quantity.from_int(1024, BIN)) == "1Ki"
    assert str(Quantity.from_int(1024 * 1024, BIN)) == "1Mi"
    assert str(Quantity.from_int(1000000, EXP)) == "1e6"
    # NewMilliQuantity(1024, BinarySI) is 1.024: not a whole number, printed as DecimalSI
    assert str(Quantity(1024 * 10**6, BIN)) == "1024m"
    assert str(Quantity(1024 * 1024 * 10**6, BIN)) == "1048576m"
    assert str(Quantity(10**6 * 10**6, EXP)) == "1e3"


# ---------------------------------------------------------------------------------------------
# Every suffix


DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15}
BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


@pytest.mark.parametrize(("suffix", "exp10"), [*DECIMAL_SUFFIXES.items(), ("E", 18)])
def test_every_decimal_suffix(suffix: str, exp10: int) -> None:
    got = q("7" + suffix)
    assert got.nanos == 7 * 10 ** (exp10 + 9)
    assert got.format is DEC
    assert str(got) == "7" + suffix


@pytest.mark.parametrize(("suffix", "power"), BINARY_SUFFIXES.items())
def test_every_binary_suffix(suffix: str, power: int) -> None:
    got = q("7" + suffix)
    assert got.nanos == 7 * 1024**power * NANO
    assert got.format is BIN
    assert str(got) == "7" + suffix
    if power < 6:  # 1024 of a suffix prints as 1 of the next one
        bigger = list(BINARY_SUFFIXES)[power]
        assert str(q(f"{1024 * 7}{suffix}")) == "7" + bigger


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("1e3", 10**12),
        ("1E3", 10**12),
        ("1e+3", 10**12),
        ("1e-3", 10**6),
        ("1E-9", 1),
        ("1e0", NANO),
        ("1e-0", NANO),
        ("1e007", 10**16),
        ("5e18", 5 * 10**27),
        ("0e999999999999999999999999", 0),
        ("1e-999999999999999999999999", 1),
    ],
)
def test_decimal_exponent(text: str, nanos: int) -> None:
    got = q(text)
    assert got.nanos == nanos
    assert got.format is EXP


# ---------------------------------------------------------------------------------------------
# Bad input: the one exception type, naming value, field and a precise reason.

BAD: list[tuple[str, str]] = [
    ("", "empty string"),
    (" 1", "contains whitespace"),
    ("1 ", "contains whitespace"),
    ("1\n", "contains whitespace"),
    ("1 Gi", "contains whitespace"),
    ("12x", 'unknown suffix "x"'),
    ("1.2.3", "more than one decimal point"),
    ("1.1.M", "more than one decimal point"),  # k8s invalid list
    ("--1", "sign only allowed at the start"),
    ("+-1", "sign only allowed at the start"),
    ("1+1.0M", "sign only allowed at the start"),  # k8s invalid list
    ("1-", "sign only allowed at the start"),
    ("1ki", 'unknown suffix "ki" (suffixes are case-sensitive; did you mean "Ki"?)'),
    ("1K", 'did you mean "k"?'),
    ("1gi", 'did you mean "Gi"?'),
    ("0.1mi", 'unknown suffix "mi"'),  # k8s invalid list
    ("0.1am", 'unknown suffix "am"'),  # k8s invalid list
    (".5i", 'unknown suffix "i"'),  # k8s invalid list
    ("1i", 'unknown suffix "i"'),  # k8s invalid list
    ("-3.01i", 'unknown suffix "i"'),  # k8s invalid list
    ("1KiB", 'unknown suffix "KiB"'),
    ("1Mi1", 'unknown suffix "Mi1"'),
    ("1ee3", 'unknown suffix "ee3"'),
    ("-3.01e-", 'bad exponent "e-"'),  # k8s invalid list
    ("1e", 'bad exponent "e"'),
    ("1e+", 'bad exponent "e+"'),
    ("1e1.5", 'unknown suffix "e1.5"'),
    ("Mi", 'missing number before suffix "Mi"'),
    ("-Ki", 'missing number before suffix "Ki"'),
    ("e3", 'missing number before suffix "e3"'),
    ("aoeu", "missing number"),  # k8s invalid list
    ("-", "missing number"),
    ("+", "missing number"),
    (".", "missing number"),
    ("-.", "missing number"),
    ("\u0661", "missing number"),  # non-ASCII digit
    ("1\u0662", 'unknown suffix "\u0662"'),
    ("0x10", 'unknown suffix "x10"'),
    ("inf", "missing number"),
    ("nan", "missing number"),
]


@pytest.mark.parametrize(("text", "reason"), BAD)
def test_bad_input(text: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        Quantity.parse(text, "spec.hard[requests.cpu]")
    message = str(info.value)
    assert message.startswith(f"invalid quantity {quote(text)} for spec.hard[requests.cpu]: ")
    assert reason in message
    assert info.value.value == text
    assert info.value.field == "spec.hard[requests.cpu]"
    assert isinstance(info.value, ValueError)


def quote(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


def test_error_message_exact() -> None:
    with pytest.raises(QuantityError) as info:
        Quantity.parse("12x", "spec.hard[requests.cpu]")
    assert (
        str(info.value) == 'invalid quantity "12x" for spec.hard[requests.cpu]: unknown suffix "x"'
    )


def test_error_without_field() -> None:
    with pytest.raises(QuantityError, match=r'^invalid quantity "12x": unknown suffix "x"$'):
        Quantity.parse("12x")


def test_error_field_not_cached() -> None:
    """The same bad string is attributed to whichever field it appears in."""
    for field in ("a[x]", "b[y]", ""):
        with pytest.raises(QuantityError) as info:
            Quantity.parse("1ki", field)
        assert info.value.field == field


def test_whitespace_is_visible_in_message() -> None:
    with pytest.raises(QuantityError, match=r'"1\\t"'):
        Quantity.parse("1\t", "f")


@pytest.mark.parametrize("value", [5, 1.5, None, b"1", ["1"], True])
def test_parse_non_string(value: object) -> None:
    with pytest.raises(QuantityError, match="must be a string") as info:
        Quantity.parse(value, "spec.hard[pods]")  # type: ignore[arg-type]
    assert info.value.field == "spec.hard[pods]"


# ---------------------------------------------------------------------------------------------
# Overflow boundaries: |value| <= 2^63-1 base units.

OK_AT_LIMIT = [
    "9223372036854775807",
    "-9223372036854775807",
    "+9223372036854775807",
    "9223372036854775807000m",
    "9223372036854775807000000000n",
    "9.223372036854775807E",
    "9.223372036854775807e18",
    "9223372036854775.807k",
    "9223372036854775806.999999999",
    "8191Pi",  # 2^63 - 2^50
    "7.99999999999999999Ei",
    "1e18",
    "9E",
]
TOO_LARGE = [
    "9223372036854775808",
    "-9223372036854775808",
    "9223372036854775807.000000001",
    "9223372036854775807.0000000001",  # rounds up past the limit
    "9223372036854775808000m",
    "9.223372036854775808E",
    "10E",
    "12E",  # k8s keeps it (beyond int64); we refuse
    "1e19",
    "1e100",
    "1e2147483648",
    "8Ei",  # 2^63
    "9Ei",  # k8s caps it to 2^63-1; we refuse
    "8192Pi",
    "9223372036854775807Ki",
    "99999999999999999999999999999999999999",
    "1" + "0" * 5000,
    "1" + "0" * 5000 + "Ki",
]


@pytest.mark.parametrize("text", OK_AT_LIMIT)
def test_at_limit_ok(text: str) -> None:
    assert abs(q(text).nanos) <= MAX_NANOS


def test_limit_exact() -> None:
    assert q("9223372036854775807").nanos == MAX_NANOS
    assert q("-9223372036854775807").nanos == -MAX_NANOS
    assert q("9223372036854775806.999999999").nanos == MAX_NANOS - 1


@pytest.mark.parametrize("text", TOO_LARGE)
def test_too_large(text: str) -> None:
    with pytest.raises(QuantityError, match="too large") as info:
        Quantity.parse(text, "spec.hard[requests.memory]")
    assert "spec.hard[requests.memory]" in str(info.value)


def test_long_digit_strings_are_exact() -> None:
    """Digit strings beyond CPython's int(str) limit still parse exactly (and quickly)."""
    assert q("0." + "0" * 5000 + "1").nanos == 1
    assert q("1." + "0" * 5000 + "1").nanos == NANO + 1
    assert q("1." + "0" * 5000 + "1Ki").nanos == 1024 * NANO + 1
    fives = 5 * (10**6000 - 1) // 9  # 0.555...5 (6000 fives) x 10^6000
    assert q("0." + "5" * 6000 + "Ki").nanos == -(-fives * 1024 * NANO // 10**6000)
    assert q("0" * 6000 + "1").nanos == NANO
    assert q("1." + "0" * 6000 + "Ki").nanos == 1024 * NANO


def test_from_int_bounds() -> None:
    assert Quantity.from_int(MAX_BASE_UNITS).nanos == MAX_NANOS
    with pytest.raises(QuantityError, match="too large"):
        Quantity.from_int(MAX_BASE_UNITS + 1)
    with pytest.raises(QuantityError, match="must be an int"):
        Quantity.from_int(True)
    with pytest.raises(QuantityError, match="must be an int"):
        Quantity.from_int(1.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Value semantics


def test_equality_ignores_format() -> None:
    assert q("1Gi") == q("1073741824") == q("1073741824000m") == q("1.073741824e9")
    assert hash(q("1Gi")) == hash(q("1073741824"))
    assert q("1k") == q("1e3") == q("1000")
    assert q("1Ki") != q("1k")
    assert len({q("1Gi"), q("1024Mi"), q("1073741824")}) == 1
    assert q("0") == q("0Ki") == q("-0") == Quantity.zero()
    assert q("1") != 1  # never equal to a plain number
    assert q("1").__eq__(1) is NotImplemented


def test_ordering() -> None:
    assert q("100m") > q("50m")
    assert q("50m") < q("100m")
    assert q("10000T") > q("100Gi")  # k8s TestQuantityCmp
    assert q("1Ki") >= q("1024") and q("1Ki") <= q("1024")
    assert q("-1") < q("0") < q("1n")
    assert max(q("1Gi"), q("1G")) == q("1Gi")
    assert min(q("1Gi"), q("1G")) == q("1G")
    assert sorted([q("2"), q("1500m"), q("-1")]) == [q("-1"), q("1500m"), q("2")]
    with pytest.raises(TypeError):
        _ = q("1") < 2  # type: ignore[operator]


def test_properties() -> None:
    assert Quantity.zero().is_zero and Quantity.zero().sign == 0
    assert Quantity.zero().format is DEC and str(Quantity.zero()) == "0"
    assert not q("1n").is_zero and q("1n").sign == 1
    assert q("-1n").sign == -1
    assert Quantity.from_int(3).nanos == 3 * NANO
    assert Quantity.from_int(-3, BIN) == q("-3") and Quantity.from_int(-3, BIN).format is BIN


def test_as_float_is_for_display_only() -> None:
    assert q("1500m").as_float() == 1.5
    assert q("2Gi").as_float() == 2147483648.0
    assert q("1.1Ki").as_float() == 1126.4  # k8s TestStringQuantityAsApproximateFloat64
    assert isinstance(q("1").as_float(), float)


def test_repr() -> None:
    assert repr(q("1.5Gi")) == "Quantity('1536Mi', BINARY_SI)"
    assert f"{q('1500m')}" == "1500m"


def test_parse_is_cached() -> None:
    assert Quantity.parse("7.5Mi") is Quantity.parse("7.5Mi")


def test_frozen() -> None:
    value = q("1")
    with pytest.raises(AttributeError):
        value.nanos = 5  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Arithmetic and its format rule


def test_add_sub_values() -> None:
    assert q("1") + q("500m") == q("1500m")
    assert q("1Gi") - q("512Mi") == q("512Mi")
    assert q("1") - q("2") == q("-1")
    assert -q("1.5") == q("-1500m")
    negated = -q("1.5")
    assert -negated == q("1.5")
    assert q("100m") * 3 == q("300m")
    assert 3 * q("100m") == q("300m")
    assert q("1Gi") * 0 == Quantity.zero()
    assert q("-50") * -50 == q("2500")  # k8s TestMul


def test_arithmetic_format_rules() -> None:
    """Left operand's format; a zero-valued left takes the right's (k8s Add/Sub)."""
    assert (q("10") + q("1Ki")).format is DEC  # k8s TestAdd
    assert (q("10Ki") + q("1")).format is BIN
    assert (q("10Ki") - q("1")).format is BIN  # k8s TestSub
    zero = q("0")
    for text in ("100m", "1Gi"):  # k8s TestQuantityAddZeroPreservesSuffix
        value = q(text)
        assert str(value + zero) == text
        assert str(zero + value) == text
        assert str(value - zero) == text
        assert str(zero - value) == str(-value)
    assert str(Quantity.zero() + q("1Gi") + q("1Gi")) == "2Gi"
    assert (q("1Gi") * 3).format is BIN and str(q("1Gi") * 3) == "3Gi"
    assert (-q("1Gi")).format is BIN


def test_mul_rejects_non_int() -> None:
    with pytest.raises(TypeError):
        _ = q("1") * 1.5  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = q("1") * True
    with pytest.raises(TypeError):
        _ = q("1") * q("1")  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = q("1") + 1  # type: ignore[operator]


def test_arithmetic_beyond_parse_limit_still_prints() -> None:
    big = q("9E") * 1000
    assert str(big) == "9000E"  # DecimalSI has no suffix above E
    assert str(Quantity(big.nanos, EXP)) == "9e21"
    assert str(q("7Ei") * 1024) == "7168Ei"


# ---------------------------------------------------------------------------------------------
# No float anywhere (except the documented display helper)


def test_module_has_no_floats() -> None:
    tree = ast.parse(inspect.getsource(quantity_module))
    as_float_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "as_float":
            as_float_lines = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if line in as_float_lines:
            continue
        assert not (isinstance(node, ast.Constant) and isinstance(node.value, float)), line
        assert not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)), line
        assert not (isinstance(node, ast.Name) and node.id in ("float", "Decimal", "Fraction")), (
            line
        )


# ---------------------------------------------------------------------------------------------
# Property tests

ANY_NANOS = st.integers(min_value=-MAX_NANOS, max_value=MAX_NANOS)
NICE_NANOS = st.builds(
    lambda m, e: m * 10**e, st.integers(-999_999, 999_999), st.integers(0, 21)
).filter(lambda n: abs(n) <= MAX_NANOS)
BINARY_NANOS = st.builds(
    lambda m, p: m * 1024**p * NANO, st.integers(-8191, 8191), st.integers(0, 5)
)
NANOS = st.one_of(ANY_NANOS, NICE_NANOS, BINARY_NANOS)
FORMATS = st.sampled_from(list(Format))
QUANTITIES = st.builds(Quantity, NANOS, FORMATS)
SMALL = st.builds(Quantity, st.integers(-(10**30), 10**30), FORMATS)


def reference_nanos(text: str) -> int:
    """An independent oracle: exact rational arithmetic, ceil away from zero to 1n."""
    import re

    m = re.fullmatch(r"([+-]?)([0-9]*\.?[0-9]*)(.*)", text)
    assert m is not None
    sign, number, suffix = m.groups()
    value = Fraction(number if number not in ("", ".") else "0")
    if number.endswith("."):
        value = Fraction(number[:-1] or "0")
    decimal = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
    if suffix in decimal:
        value *= Fraction(10) ** decimal[suffix]
    elif suffix in BINARY_SUFFIXES:
        value *= 1024 ** BINARY_SUFFIXES[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    nanos = math.ceil(value * NANO)
    return -nanos if sign == "-" else nanos


SUFFIX = st.sampled_from(
    [*DECIMAL_SUFFIXES, "E", *BINARY_SUFFIXES, "e0", "e3", "E-3", "e+6", "e-9", "e-12", "e18"]
)
NUMBER_TEXT = st.builds(
    lambda i, f, dot: i + ("." + f if dot else ""),
    st.text("0123456789", min_size=0, max_size=22),
    st.text("0123456789", min_size=0, max_size=14),
    st.booleans(),
).filter(lambda s: any(c.isdigit() for c in s))
QUANTITY_TEXT = st.builds(
    lambda sign, num, suffix: sign + num + suffix,
    st.sampled_from(["", "+", "-"]),
    NUMBER_TEXT,
    SUFFIX,
)


@given(QUANTITY_TEXT)
def test_parse_matches_exact_oracle(text: str) -> None:
    expected = reference_nanos(text)
    if abs(expected) > MAX_NANOS:
        with pytest.raises(QuantityError, match="too large"):
            Quantity.parse(text)
        return
    got = Quantity.parse(text)
    assert got.nanos == expected
    assert type(got.nanos) is int


@given(QUANTITIES)
def test_round_trip(value: Quantity) -> None:
    text = str(value)
    again = Quantity.parse(text)
    assert again == value
    if value.format is not BIN or text[-1] == "i":
        assert str(again) == text  # canonical form is stable
    # A whole BinarySI value >= 1024 that is not a multiple of 1024 prints without a suffix, so
    # it re-parses as DecimalSI (Kubernetes does the same: BinarySI 5000 -> "5000" -> "5k").
    # One round later the string is a fixed point.
    assert str(Quantity.parse(str(again))) == str(again)


def test_binary_plain_integer_reparses_as_decimal() -> None:
    """The one canonical-form instability, inherited from Kubernetes."""
    value = Quantity.from_int(5000, BIN)
    assert str(value) == "5000"
    assert str(Quantity.parse("5000")) == "5k"
    assert str(Quantity.from_int(1000, BIN)) == "1k"  # |v| < 1024 prints as DecimalSI


@given(QUANTITY_TEXT)
def test_round_trip_from_text(text: str) -> None:
    assume(abs(reference_nanos(text)) <= MAX_NANOS)
    value = Quantity.parse(text)
    assert Quantity.parse(str(value)) == value
    assert str(Quantity.parse(str(value))) == str(value)


def oracle_canonical(nanos: int, fmt: Format) -> str:
    """Independent of the implementation: search suffixes from the largest down."""
    if nanos == 0:
        return "0"
    sign, mag = ("-" if nanos < 0 else ""), abs(nanos)
    if fmt is BIN and mag >= 1024 * NANO and mag % NANO == 0:
        units = mag // NANO
        names = ["", *BINARY_SUFFIXES]
        power = next(p for p in range(6, -1, -1) if units % 1024**p == 0)
        return f"{sign}{units // 1024**power}{names[power]}"
    top = 18 if fmt is not EXP else 60
    exp = next(e for e in range(top, -12, -3) if mag % 10 ** (e + 9) == 0)
    mantissa = mag // 10 ** (exp + 9)
    if fmt is EXP:
        return f"{sign}{mantissa}" + (f"e{exp}" if exp else "")
    names10 = {v: k for k, v in {**DECIMAL_SUFFIXES, "E": 18}.items()}
    return f"{sign}{mantissa}{names10[exp]}"


@given(QUANTITIES)
def test_canonical_matches_oracle(value: Quantity) -> None:
    assert str(value) == oracle_canonical(value.nanos, value.format)
    assert reference_nanos(str(value)) == value.nanos


@given(SMALL, SMALL)
def test_add_commutative(a: Quantity, b: Quantity) -> None:
    assert a + b == b + a


@given(SMALL, SMALL, SMALL)
def test_add_associative(a: Quantity, b: Quantity, c: Quantity) -> None:
    assert (a + b) + c == a + (b + c)


@given(SMALL, SMALL)
def test_add_then_sub(a: Quantity, b: Quantity) -> None:
    assert (a + b) - b == a
    assert a - b == a + (-b)
    assert (a + b).nanos == a.nanos + b.nanos


@given(SMALL, st.integers(0, 40))
def test_mul_is_repeated_add(a: Quantity, n: int) -> None:
    total = Quantity.zero()
    for _ in range(n):
        total = total + a
    assert n * a == total == a * n
    assert type((a * n).nanos) is int


@given(SMALL, SMALL)
def test_ordering_consistent_with_nanos(a: Quantity, b: Quantity) -> None:
    assert (a < b) == (a.nanos < b.nanos)
    assert (a <= b) == (a.nanos <= b.nanos)
    assert (a > b) == (a.nanos > b.nanos)
    assert (a >= b) == (a.nanos >= b.nanos)
    assert (a == b) == (a.nanos == b.nanos)
    if a == b:
        assert hash(a) == hash(b)


@given(SMALL)
def test_neg_and_sign(a: Quantity) -> None:
    negated = -a
    assert -negated == a
    assert (-a).sign == -a.sign
    assert (a + (-a)).is_zero
