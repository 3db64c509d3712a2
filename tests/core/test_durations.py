"""Go durations: the one parser behind every duration flag and the API server's ?timeout=."""

from __future__ import annotations

from datetime import timedelta

import pytest

from karmadaquota import durations
from karmadaquota.durations import duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("2m30.5s", 150.5),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("1000ns", 1e-6),  # timedelta keeps microseconds
        ("-2m", -120.0),
        ("+3s", 3.0),
        (".5h", 1800.0),
    ],
)
def test_go_durations_are_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert durations.parse(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "s", "1d", "1h 30m", "5 s", "1.2.3s", "--1s", "0x"])
def test_what_go_refuses_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        durations.parse(text)


def test_a_duration_flag_refuses_negative_and_malformed_values_clearly() -> None:
    assert duration("1h30m") == timedelta(hours=1, minutes=30)
    assert duration("1.5s") == timedelta(seconds=1.5)
    for bad, why in (("-5s", "must not be negative"), ("5 minutes", "invalid duration")):
        with pytest.raises(Exception, match=why):
            duration(bad)
