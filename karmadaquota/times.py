"""RFC 3339 times as the API server reads and writes them (pure).

Below the wire models (`api`) and the pending-charge contract (`pending`), which both read and
write times: one parser, one printer.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 time from the wire, in UTC; None when unreadable.

    RFC 3339 always carries an offset; a time without one is read as UTC rather than letting a
    naive/aware comparison raise later.
    """
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def format_time(when: datetime, micro: bool = False) -> str:
    """RFC 3339 in UTC as the API server prints it: metav1.Time (seconds) or, with `micro`,
    metav1.MicroTime (microseconds). Naive means UTC."""
    utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")
